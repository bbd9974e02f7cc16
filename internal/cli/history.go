package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/history"
)

// printHistory prints a rollout's revisions as history.Describe reads them: each one's action
// (an upgrade, or a rollback by a person or by the policy) and its outcome as a person should
// read it, with the snapshots taken in it (snaps, "cluster=snapshot" by revision).
func printHistory(out io.Writer, ro *v1alpha1.Rollout, snaps map[string][]string) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tRELEASE\tACTION\tSTARTED\tFINISHED\tOUTCOME\tSNAPSHOTS\tREASON")
	for _, e := range history.Describe(ro.Status.History) {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Revision.Revision, e.Release, e.Action(), ts(e.StartedAt), ts(e.FinishedAt),
			dash(e.Shown), dash(strings.Join(snaps[strconv.Itoa(int(e.Revision.Revision))], ",")), e.Reason)
	}
	w.Flush()
}
