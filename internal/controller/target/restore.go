package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
)

// restoreSnapshot returns the cluster to its snapshot: CRDs (storage version included), every
// custom resource with its status, the associated objects. The restore's own journal lives in
// the target's status (restoreSteps), patched after each of its steps.
type restoreSnapshot struct{}

func (restoreSnapshot) run(ctx context.Context, x *execution) (time.Duration, error) {
	t := x.t
	key := client.ObjectKeyFromObject(t)
	snap := &v1alpha1.Snapshot{}
	get := func() error {
		if err := x.r.Hub.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.Snapshot}, snap); err != nil {
			if apierrors.IsNotFound(err) {
				return terminalf("snapshot %s to restore: %v", t.Spec.Snapshot, err)
			}
			return fmt.Errorf("reading snapshot %s to restore: %w", t.Spec.Snapshot, err) // tried again with backoff
		}
		return nil
	}
	// The snapshot's content is in memory while the restore runs, and so is the restore's
	// working set of live objects (restoreWorkingSet): wait in line while other restores hold
	// the memory budget. A target already in line asks with the size it gave, without reading
	// the snapshot again.
	n, waiting := x.r.Restores.Waiting(key, t.Spec.Snapshot)
	if !waiting {
		if err := get(); err != nil {
			return 0, err
		}
		n = snap.Status.Bytes + restoreWorkingSet
	}
	give, ok := x.r.Restores.TryTake(key, t.Spec.Snapshot, n)
	if !ok {
		t.Status.Message = fmt.Sprintf("waiting for memory: other restores hold the controller's --restore-memory budget (%s)", x.r.Restores)
		return budgetPoll, nil
	}
	defer give()
	if waiting {
		if err := get(); err != nil {
			return 0, err
		}
	}
	current, err := x.currentReleases(ctx)
	if err != nil {
		return 0, err
	}
	// Opened last and read as the restore starts: it keeps each entry compact, and never holds
	// the snapshot decoded whole (nor an idle store connection while the releases load).
	hdr, entries, closer, err := x.hub().StreamRaw(ctx, snap)
	if err != nil {
		if fault.IsTransient(err) {
			return 0, fmt.Errorf("opening snapshot %s: %w", t.Spec.Snapshot, err) // the store is away for a moment: tried again
		}
		return 0, terminalf("snapshot %s cannot be restored: %v", t.Spec.Snapshot, err)
	}
	defer closer.Close()
	o := restore.Options{
		Header: hdr, Entries: entries, Current: current, Prune: t.Spec.PruneOnRollback,
		Journal: statusJournal{x}, WorkingSet: restoreWorkingSet,
	}
	if crash := x.r.CrashAt; crash != nil {
		o.At = func(point string) { crash(t.Spec.Cluster, StepRestore+": "+point) }
	}
	rep, err := restore.Run(ctx, x.cl, o)
	if errors.Is(err, restore.ErrSnapshotUnreadable) && !fault.IsTransient(err) {
		return 0, terminalf("snapshot %s cannot be restored: %v", t.Spec.Snapshot, err)
	}
	if err == nil && len(rep.Kept) > 0 {
		// Kept, not deleted (spec.pruneOnRollback is off): say so where people look.
		x.note("Normal", "KeptSinceSnapshot", "%s: kept %d objects created since snapshot %s (spec.pruneOnRollback deletes them): %s",
			t.Spec.Cluster, len(rep.Kept), t.Spec.Snapshot, listSome(rep.Kept, 10))
	}
	return 0, err
}

// restoreWorkingSet is what a restore holds of live objects at once (restore.Options.WorkingSet:
// the storage migration's pages, the objects read to be written), taken from the memory budget
// with its snapshot's bytes.
const restoreWorkingSet = restore.DefaultWorkingSet

// currentReleases returns the manifests of the releases installed on the member now: the one
// its installed-version record names (when the change failed before its Record step, not the
// one rolled back from) and the one the rollback comes from. The restore quiesces their
// Deployments and neutralizes their webhooks: left out, the newer release's would stay live
// while the restore runs. So a read that fails is returned (a fault: the step is tried again);
// only what is not there is left out (no record; a release deleted from the hub), and a
// Warning Event says so.
func (x *execution) currentReleases(ctx context.Context) ([]*unstructured.Unstructured, error) {
	t := x.t
	var current []*unstructured.Unstructured
	var missing []string
	load := func(name, digest, what string) error {
		_, objs, err := x.releaseFor(ctx, name, digest)
		if apierrors.IsNotFound(err) {
			missing = append(missing, fmt.Sprintf("release %s (%s) is no longer on the hub", name, what))
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading release %s (%s), whose operator the restore quiesces: %w", name, what, err)
		}
		current = append(current, objs...)
		return nil
	}
	rec, err := member.ReadRecord(ctx, x.cl.Client, t.Spec.Operator)
	if err != nil {
		return nil, err
	}
	from := t.Spec.FromRelease
	if from == t.Spec.ToRelease {
		from = ""
	}
	switch {
	case rec == nil && from == "":
		missing = append(missing, fmt.Sprintf("the member has no installed-version record of %s", t.Spec.Operator))
	case rec != nil && rec.Release != t.Spec.ToRelease:
		if err := load(rec.Release, rec.Digest, "the member's installed-version record names it"); err != nil {
			return nil, err
		}
	}
	if from != "" {
		if err := load(from, t.Spec.FromManifests, "the rollback comes from it"); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		x.note("Warning", "RestoreWithoutRelease", "%s: %s: the restore quiesces only the operator objects of the snapshot and of the releases it can read",
			t.Spec.Cluster, strings.Join(missing, "; "))
	}
	return current, nil
}

// listSome joins up to n of names, saying how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// budgetPoll is how often a restore waiting for the memory budget asks again if no wake-up
// came (MemoryBudget.Wakeups wakes it when its turn may have come).
const budgetPoll = 2 * time.Second

// statusJournal keeps a restore's journal in the target's status.
type statusJournal struct{ x *execution }

func (j statusJournal) Completed(context.Context) ([]string, error) {
	return slices.Clone(j.x.t.Status.RestoreSteps), nil
}

func (j statusJournal) Complete(ctx context.Context, step string) error {
	j.x.t.Status.RestoreSteps = append(j.x.t.Status.RestoreSteps, step)
	return j.x.patch(ctx)
}
