//go:build !unit

package orchestration

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/rollout"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

// A rollback is planned from each cluster's journal as the Rollout reads it. A cluster whose
// upgrade was still at its snapshot then, and that changed before its new plan reached it
// (its plan said "not changed: nothing to roll back"), is not left on the release it upgraded
// to: its executor refuses the plan as stale, and the Rollout plans it again (a restore).
//
// member2's upgrade holds at its snapshot until the rollback is planned; the Rollout's write
// of member2's plan is held on the way to the hub until member2 has finished its upgrade; then
// it lands.
func TestARollbackPlannedBeforeAClusterChangedRestoresIt(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2"}, MaxConcurrency: 2}})
	const deadline = 3 * time.Minute

	var armed atomic.Bool
	// ended lets every hold go when the test ends early (the manager stops after it).
	ended := make(chan struct{})
	atSnapshot, goOn := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	crashAt := func(cluster, step string) bool {
		if armed.Load() && cluster == "member2" && step == target.StepSnapshot {
			holdOnce.Do(func() {
				close(atSnapshot)
				select {
				case <-goOn:
				case <-ended:
				}
			})
		}
		return false
	}
	// The plan's write of member2's target for revision 3 (the rollback).
	member2Target := "/rollouttargets/" + rollout.TargetName(f.Name, "member2")
	cfg := testenv.ControllerConfig(t, suite.Env.Hub, f.NS)
	hold := fleet.HoldWrites(cfg, `"revision":3`, member2Target)
	startManagerWith(t, cfg, controller.Options{CrashAt: crashAt})
	t.Cleanup(func() { close(ended); hold.End() })

	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	armed.Store(true)
	f.SetRelease("mysql-b", nil)
	waitClosed(t, atSnapshot, deadline, "member2's upgrade to reach its snapshot")

	// member2's journal says Snapshot: the rollback plans it as not changed.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro := f.Rollout()
		ro.Spec.Release = "mysql-a"
		return f.Hub().Update(t.Context(), ro)
	}); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, hold.Held(member2Target), deadline, "the rollback's write of member2's plan")
	close(goOn)
	// member2 goes on with its upgrade (the journal on the hub is written, the plan is not).
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		st := f.Target("member2").Status
		return st.Revision == 2 && st.Phase == v1alpha1.ClusterSucceeded, nil
	})
	if err != nil {
		t.Fatalf("member2's upgrade did not finish: %+v", f.Target("member2").Status)
	}
	hold.Release()

	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, deadline)
	tg := f.Target("member2")
	if tg.Spec.Path != v1alpha1.PathRestore || tg.Status.Phase != v1alpha1.ClusterRolledBack {
		t.Errorf("member2 changed after the rollback was planned: it must be restored, got path %s phase %s (%s)", tg.Spec.Path, tg.Status.Phase, tg.Status.Message)
	}
	f.WaitEvent("Replanned") // one per cluster planned again; the recorder may fold two into one series
	snaps := f.SnapshotsOf(2)
	for _, m := range suite.Env.Members[:2] {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s runs %+v after the rollback, want mysql-a", m.Name, rec)
		}
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
}

// startManagerWith runs a manager on cfg until the test ends.
func startManagerWith(t *testing.T, cfg *rest.Config, o controller.Options) {
	t.Helper()
	o.MetricsAddr, o.ProbeAddr, o.SkipNameValidation = "0", "0", true
	o.GatePoll, o.ProbeInterval = 300*time.Millisecond, 500*time.Millisecond
	mgr, err := controller.NewManager(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
}

func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("waited %s for %s", d, what)
	}
}

// A step is on record before it runs; when that record's write lands over a spec changed
// meanwhile (the rollback's plan of the cluster, written while its snapshot was taken), the
// step does not run on the new spec: the executor starts again from it, refuses the plan its
// journal outran, and the cluster is restored to the snapshot.
func TestAStepDoesNotRunOnASpecThatChangedUnderIt(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2"}, MaxConcurrency: 2}})
	const deadline = 3 * time.Minute
	var armed, replanned atomic.Bool
	var afterSnapshot atomic.Int32
	var holdOnce sync.Once
	crashAt := func(cluster, step string) bool {
		if !armed.Load() || cluster != "member2" {
			return false
		}
		switch {
		case step == target.StepSnapshot:
			holdOnce.Do(func() {
				// While member2 is about to take its snapshot, the rollback is planned and
				// written: member2's journal says Snapshot.
				err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
					ro := f.Rollout()
					ro.Spec.Release = "mysql-a"
					return f.Hub().Update(context.Background(), ro)
				})
				if err == nil {
					err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
						return f.Target("member2").Spec.Revision == 3, nil
					})
				}
				if err != nil {
					t.Errorf("the rollback's plan of member2: %v", err)
				}
			})
		case !replanned.Load() && step != target.StepPrecheck:
			// A step of the upgrade after its snapshot, before member2 was planned again.
			if tg := f.Target("member2"); tg.Spec.Path != v1alpha1.PathRestore {
				afterSnapshot.Add(1)
				t.Logf("member2 ran %s with spec revision %d path %s", step, tg.Spec.Revision, tg.Spec.Path)
			} else {
				replanned.Store(true)
			}
		}
		return false
	}
	startManager(t, f.NS, crashAt)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	armed.Store(true)
	f.SetRelease("mysql-b", nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, deadline)
	if n := afterSnapshot.Load(); n > 0 {
		t.Errorf("member2 ran %d steps of its upgrade after the rollback's plan replaced its spec", n)
	}
	tg := f.Target("member2")
	if tg.Spec.Path != v1alpha1.PathRestore || tg.Status.Phase != v1alpha1.ClusterRolledBack {
		t.Errorf("member2 journaled a change after the rollback read it: it must be restored, got path %s phase %s (%s)", tg.Spec.Path, tg.Status.Phase, tg.Status.Message)
	}
	snaps := f.SnapshotsOf(2)
	for _, m := range suite.Env.Members[:2] {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s runs %+v after the rollback, want mysql-a", m.Name, rec)
		}
		if s := snaps[m.Name]; s != "" {
			f.AssertEqualsSnapshot(m, s)
		}
	}
}

// A person's rollback planned while no cluster had changed yet ("nothing to roll back" on
// each) is a rollback once its clusters are planned again as restores: the rollout ends
// RolledBack with both clusters back on their snapshots, and records the rollback as one planned
// so from the start does: the reason given in the revision's history and
// status.lastRollbackReason, and rewind_rollbacks_total{reason="ManualRollback"}. Before, the
// revision was recorded at plan time as no rollback: no reason, no count.
func TestAPersonsRollbackPlannedBeforeAnyClusterChangedIsRecorded(t *testing.T) {
	clusters := []string{"member1", "member2"}
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: clusters, MaxConcurrency: 2}})
	const deadline = 3 * time.Minute

	var armed atomic.Bool
	ended := make(chan struct{})
	goOn := make(chan struct{})
	atSnapshot := map[string]chan struct{}{}
	var holdSnap sync.Map // cluster -> *sync.Once
	paths := map[string]string{}
	for _, c := range clusters {
		atSnapshot[c] = make(chan struct{})
		paths[c] = "/rollouttargets/" + rollout.TargetName(f.Name, c)
	}
	crashAt := func(cluster, step string) bool {
		if ch := atSnapshot[cluster]; armed.Load() && ch != nil && step == target.StepSnapshot {
			once, _ := holdSnap.LoadOrStore(cluster, &sync.Once{})
			once.(*sync.Once).Do(func() {
				close(ch)
				select {
				case <-goOn:
				case <-ended:
				}
			})
		}
		return false
	}
	cfg := testenv.ControllerConfig(t, suite.Env.Hub, f.NS)
	hold := fleet.HoldWrites(cfg, `"revision":3`, paths["member1"], paths["member2"])
	startManagerWith(t, cfg, controller.Options{CrashAt: crashAt})
	t.Cleanup(func() { close(ended); hold.End() })

	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	rollbacks := func() float64 {
		return fleet.Metric(t, "rewind_rollbacks_total", map[string]string{"namespace": f.NS, "reason": v1alpha1.ReasonManualRollback})
	}
	before := rollbacks()
	armed.Store(true)
	f.SetRelease("mysql-b", nil)
	for _, c := range clusters {
		waitClosed(t, atSnapshot[c], deadline, c+"'s upgrade to reach its snapshot")
	}

	// Both journals say Snapshot: the rollback plans both as not changed.
	rewind(t, f.NS, "rollback", f.Name, "--reason", "wrong release")
	for _, c := range clusters {
		waitClosed(t, hold.Held(paths[c]), deadline, "the rollback's write of "+c+"'s plan")
		if sp := f.Target(c).Spec; sp.Path == v1alpha1.PathRestore {
			t.Fatalf("%s was planned as a restore: the race this test is for did not happen", c)
		}
	}
	close(goOn)
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		for _, c := range clusters {
			if st := f.Target(c).Status; st.Revision != 2 || st.Phase != v1alpha1.ClusterSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the upgrade did not finish: %+v / %+v", f.Target("member1").Status, f.Target("member2").Status)
	}
	hold.Release()

	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, deadline)
	for _, c := range clusters {
		if tg := f.Target(c); tg.Spec.Path != v1alpha1.PathRestore || tg.Status.Phase != v1alpha1.ClusterRolledBack {
			t.Errorf("%s must be restored: path %s phase %s (%s)", c, tg.Spec.Path, tg.Status.Phase, tg.Status.Message)
		}
	}
	h := ro.Status.History[len(ro.Status.History)-1]
	if h.Revision != 3 || !strings.HasPrefix(h.Reason, "wrong release (at ") || h.Outcome != "Succeeded" {
		t.Errorf("the rollback's history entry: %+v, want its reason", h)
	}
	if !strings.HasPrefix(ro.Status.LastRollbackReason, "wrong release (at ") {
		t.Errorf("status.lastRollbackReason %q", ro.Status.LastRollbackReason)
	}
	if n := rollbacks() - before; n != 1 {
		t.Errorf("rewind_rollbacks_total{reason=ManualRollback} rose by %v, want 1", n)
	}
	snaps := f.SnapshotsOf(2)
	for _, m := range suite.Env.Members[:2] {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s runs %+v after the rollback, want mysql-a", m.Name, rec)
		}
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
}
