package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
)

// restoreSnapshot returns the cluster to its snapshot: CRDs (storage version included), every
// custom resource with its status, the associated objects. The restore's own journal lives in
// the target's status (restoreSteps), patched after each of its steps; a pull member's agent
// keeps it in its member instead (agentJournal).
type restoreSnapshot struct{}

func (restoreSnapshot) run(ctx context.Context, x *execution) (time.Duration, error) {
	t := x.t
	key := client.ObjectKeyFromObject(t)
	snap := &v1alpha1.Snapshot{}
	get := func() error {
		read := func(r client.Reader) error {
			if err := r.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.Snapshot}, snap); err != nil {
				if apierrors.IsNotFound(err) {
					return terminalf("snapshot %s to restore: %v", t.Spec.Snapshot, err)
				}
				return fmt.Errorf("reading snapshot %s to restore: %w", t.Spec.Snapshot, err) // tried again with backoff
			}
			return nil
		}
		if err := read(x.r.Hub); err != nil {
			return err
		}
		if snap.Status.Location == "" && x.r.APIReader != nil {
			// The manager's cache may not have seen the Snapshot's status yet (its watch broke
			// and it lists again, under faults of the way to the hub): the snapshot step put the
			// target on record only once the status was written, so the API server has it.
			// Before, the restore took the cache's copy for a snapshot never completed, and
			// failed for good.
			return read(x.r.APIReader)
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
		Journal: x.restoreJournal(), WorkingSet: restoreWorkingSet,
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

// restoreJournal is where the restore of x journals its inner points: on the hub, the
// target's status (statusJournal); in a pull member's agent, the member (agentJournal).
func (x *execution) restoreJournal() restore.Journal {
	if x.r.Local == "" {
		return statusJournal{x}
	}
	return agentJournal{x: x, member: x.memberJournal()}
}

// statusJournal keeps a restore's journal in the target's status.
type statusJournal struct{ x *execution }

func (j statusJournal) Completed(context.Context) ([]string, error) {
	return slices.Clone(j.x.t.Status.RestoreSteps), nil
}

func (j statusJournal) Complete(ctx context.Context, step string) error {
	j.x.t.Status.RestoreSteps = append(j.x.t.Status.RestoreSteps, step)
	return j.x.patch(ctx)
}

// agentJournal keeps the restore journal of a pull member's copy in the member, beside its
// installed-version records (a ConfigMap of rewind-system keyed by the copy, its revision and
// its path; restore.ConfigMapJournal), as OCM's work agent keeps what it applied in the
// managed cluster (AppliedManifestWork): a point is on record there before the next runs, so
// an agent killed in the middle resumes from it, and the hub is not written at each point.
// Each point is added to the copy's status.restoreSteps in memory, and reaches the hub with
// the copy's next status write (the next journaled step, a fault, the end). At 1,000 pull
// members the six points were six of the ten writes of each cluster's restore to the hub's
// API server, whose CPU bounds a fleet's RollbackAll, and about three of the relay's. Once
// the restore's end is written to the hub the member's journal is deleted (clearMemberJournal).
type agentJournal struct {
	x      *execution
	member *restore.ConfigMapJournal
}

// Completed is what the status says (an earlier write) and then what the member's journal
// adds; the status in memory takes those too, so that the copy's next write reports every
// point (an agent that resumes reports those of the run before it as well).
func (j agentJournal) Completed(ctx context.Context) ([]string, error) {
	local, err := j.member.Completed(ctx)
	if err != nil {
		return nil, err
	}
	st := &j.x.t.Status
	for _, s := range local {
		if !slices.Contains(st.RestoreSteps, s) {
			st.RestoreSteps = append(st.RestoreSteps, s)
		}
	}
	return slices.Clone(st.RestoreSteps), nil
}

func (j agentJournal) Complete(ctx context.Context, step string) error {
	if err := j.member.Complete(ctx, step); err != nil {
		return err
	}
	if !slices.Contains(j.x.t.Status.RestoreSteps, step) {
		j.x.t.Status.RestoreSteps = append(j.x.t.Status.RestoreSteps, step)
	}
	return nil
}

// MemberJournalName names the ConfigMap of rewind-system in which a pull member's agent
// journals the restores of the copy named copyName (agentJournal).
func MemberJournalName(copyName string) string {
	name := "restore-journal." + copyName
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(copyName))
		name = name[:253-17] + "." + hex.EncodeToString(sum[:8])
	}
	return name
}

// memberJournal is the member's journal of the restore of x, a pull member's copy.
func (x *execution) memberJournal() *restore.ConfigMapJournal {
	t := x.t
	return &restore.ConfigMapJournal{Client: x.cl.Client, Namespace: member.RecordNamespace, Name: MemberJournalName(t.Name),
		Key: fmt.Sprintf("%s/%d/%s", t.UID, t.Spec.Revision, t.Spec.Path)}
}

// clearMemberJournal deletes the member's restore journal of a pull member's copy once the
// status that ends the restore is written to the hub (x.afterWrite): what it held is in the
// copy's status by then. One that cannot be deleted now (a fault) stays, a few bytes, and is
// started over by the copy's next restore (its key).
func (x *execution) clearMemberJournal(ctx context.Context) {
	if x.r.Local == "" || x.t.Spec.Path != v1alpha1.PathRestore {
		return
	}
	if x.cl == nil { // ended without a step run in this reconcile
		cl, err := x.r.Members.Get(ctx, x.t.Spec.Cluster)
		if err != nil {
			return // it stays (above)
		}
		x.cl = cl
	}
	j := x.memberJournal()
	x.afterWrite(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := fault.Retry(ctx, 3, func() error { return j.Clear(ctx) }); err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("the member's restore journal stays until the copy's next restore", "configMap", j.Namespace+"/"+j.Name, "error", err.Error())
		}
	})
}
