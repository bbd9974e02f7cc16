//go:build !unit

package pull

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/rollout"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

// A rollback is planned from each cluster's journal as the hub reads it. A pull member whose
// upgrade had not changed its cluster then, and that changed before its new plan reached its
// agent (the plan said "not changed: nothing to roll back"), is not left on the release it
// upgraded to: its agent refuses the plan as stale (the executor's check, the same code as a
// push member's), the relay reports it, and the Rollout plans the member again: a restore.
//
// member3's agent cannot read its cluster while the fleet upgrades (its connections refused:
// its journal stays before any change); the relay's write of member3's rollback plan to its
// copy is held on the way to the hub until the agent, its cluster back, has finished the
// upgrade; then it lands.
func TestARollbackPlannedBeforeAPullMemberChangedRestoresIt(t *testing.T) {
	const victim = "member3"
	const deadline = 4 * time.Minute
	joined(t)
	f := suite.New(t, allAtOnce())
	for _, name := range pullMembers {
		bind(t, name, f.NS)
	}
	for _, name := range pullMembers {
		startAgent(t, name)
	}

	// The relay's write of member3's copy for revision 3 (the rollback).
	src := &v1alpha1.RolloutTarget{}
	src.Namespace, src.Name = f.NS, rollout.TargetName(f.Name, victim)
	copyPath := "/namespaces/" + v1alpha1.MemberNamespace(victim) + "/rollouttargets/" + target.CopyName(src)
	cfg := testenv.ControllerConfig(t, suite.Env.Hub, f.NS)
	hold := fleet.HoldWrites(cfg, `"revision":3`, copyPath)
	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		GatePoll: 300 * time.Millisecond, ProbeInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	t.Cleanup(hold.End) // before the manager stops

	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, deadline)
	f.Populate()
	cut := suite.Member(t, victim).Faults()
	cut.RefuseFor(10 * time.Minute)
	t.Cleanup(cut.Heal)
	f.SetRelease("mysql-b", nil)
	poll(t, "the other members upgraded", deadline, func(context.Context) (bool, error) {
		for _, m := range []string{"member1", "member2", "member4"} {
			if st := f.Target(m).Status; st.Revision != 2 || st.Phase != v1alpha1.ClusterSucceeded {
				return false, nil
			}
		}
		return true, nil
	})
	if st := copyOf(t, f, victim).Status; st.Revision == 2 && (target.Terminal(st.Phase) || st.Snapshot != "") {
		t.Fatalf("%s's agent got past its snapshot with its cluster cut off: %+v", victim, st)
	}

	// A person's rollback: member3 has not changed, as the hub reads its journal.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro := f.Rollout()
		ro.Spec.Release = "mysql-a"
		return f.Hub().Update(t.Context(), ro)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hold.Held(copyPath):
	case <-time.After(deadline):
		t.Fatalf("the relay never wrote %s's rollback plan to its copy: target %+v", victim, f.Target(victim).Spec)
	}
	if sp := f.Target(victim).Spec; sp.Revision != 3 || sp.Path != v1alpha1.PathNone {
		t.Fatalf("%s was planned %s in revision %d: the race this test is for did not happen", victim, sp.Path, sp.Revision)
	}

	// Its cluster back, the agent finishes the upgrade it started: member3 runs mysql-b.
	cut.Heal()
	poll(t, victim+"'s agent finishing its upgrade", deadline, func(context.Context) (bool, error) {
		st := copyOf(t, f, victim).Status
		return st.Revision == 2 && st.Phase == v1alpha1.ClusterSucceeded, nil
	})
	if rec := f.Record(suite.Member(t, victim)); rec == nil || rec.Release != "mysql-b" {
		t.Fatalf("%s must run mysql-b before its plan lands: %+v", victim, rec)
	}
	hold.Release()

	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, deadline)
	if tg := f.Target(victim); tg.Spec.Path != v1alpha1.PathRestore || tg.Status.Phase != v1alpha1.ClusterRolledBack {
		t.Errorf("%s changed after the rollback was planned: it must be restored, got path %s phase %s (%s)", victim, tg.Spec.Path, tg.Status.Phase, tg.Status.Message)
	}
	f.WaitEvent("Replanned")
	assertAll(t, f, "mysql-a", f.SnapshotsOf(2), true)
}
