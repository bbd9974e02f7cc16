package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// history says who rolled back and never shows a person's rollback as the release's success.
func TestPrintHistorySaysWhoRolledBack(t *testing.T) {
	ro := &v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{History: []v1alpha1.Revision{
		{Revision: 1, Release: "mysql-a", Outcome: "Succeeded"},
		{Revision: 2, Release: "mysql-b", Outcome: "Succeeded"},
		{Revision: 3, Release: "mysql-a", Outcome: "Succeeded", Reason: "requested with rewind rollback (at 2026-12-01T10:00:00Z)"},
		{Revision: 4, Release: "mysql-bad", Outcome: "RolledBack", Reason: "cluster member1 failed its health gate"},
		{Revision: 5, Release: "mysql-a", Outcome: "Succeeded", Automatic: true, Reason: "cluster member1 failed its health gate"},
	}}}
	var out bytes.Buffer
	printHistory(&out, ro, map[string][]string{"2": {"member1=snap-1"}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("want a header and 5 revisions:\n%s", out.String())
	}
	want := []struct {
		// line is the row's index in the output (0 is the header).
		line int
		// has are substrings of the row, in order.
		has []string
	}{
		{0, []string{"REVISION", "RELEASE", "ACTION", "OUTCOME"}},
		{1, []string{"1", "mysql-a", "upgrade", "Succeeded"}},
		{2, []string{"2", "mysql-b", "upgrade", "Succeeded, then rolled back by a person", "member1=snap-1"}},
		{3, []string{"3", "mysql-a", "rollback by a person", "RolledBack", "requested with rewind rollback"}},
		{4, []string{"4", "mysql-bad", "upgrade", "RolledBack by the policy"}},
		{5, []string{"5", "mysql-a", "rollback by the policy", "RolledBack"}},
	}
	for _, w := range want {
		rest := lines[w.line]
		for _, s := range w.has {
			i := strings.Index(rest, s)
			if i < 0 {
				t.Errorf("line %d %q: want %q (in order)", w.line, lines[w.line], s)
				break
			}
			rest = rest[i+len(s):]
		}
	}
	for _, l := range lines[3:4] {
		if strings.Contains(l, "Succeeded") {
			t.Errorf("a person's rollback is shown as a success: %q", l)
		}
	}
}
