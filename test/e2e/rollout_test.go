//go:build !unit

// Package e2e runs rewind's rollout pipeline end to end against a real hub and three member
// clusters with workloads (kube-controller-manager, scheduler and kwok per member).
package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

// suite is the package's testbed and hub.
var suite fleet.Suite

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true}, &suite.Env)
}

// Shorthands for the suite's helpers.
var (
	hub          = suite.Hub
	newFleet     = suite.New
	memberClient = fleet.MemberClient
	rewind       = suite.Rewind
	metric       = fleet.Metric
)

// startManager runs a manager (crashing at a step where crashAt says) until the test ends.
func startManager(t *testing.T, ns string, crashAt func(cluster, step string) bool) (stop func()) {
	t.Helper()
	return suite.StartManager(t, ns, controller.Options{CrashAt: crashAt})
}

// startManagerWith runs a manager with options o until the test ends.
func startManagerWith(t *testing.T, ns string, o controller.Options) (stop func()) {
	t.Helper()
	return suite.StartManager(t, ns, o)
}

// operatorImage is a digest-pinned image for a release version.
func operatorImage(version string) string { return testfixture.OperatorImage(version) }

func TestWave1FailsRollsBackAndWave2NeverStarts(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-bad", nil)
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)

	cond := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	if cond == nil || cond.Reason != v1alpha1.ReasonAutomaticRollback || !strings.Contains(cond.Message, "member1") || !strings.Contains(cond.Message, "health gate") {
		t.Errorf("RolledBack condition must give the automatic reason: %+v", cond)
	}
	// The failure is held in status; spec.release is left as the person (or Git) set it.
	if ro.Spec.Release != "mysql-bad" || ro.Status.FailedRelease != "mysql-bad" || !strings.Contains(ro.Status.FailureReason, "member1") {
		t.Errorf("spec.release %s, status.failedRelease %s (%s): the automatic rollback must hold the failure in status, not write spec",
			ro.Spec.Release, ro.Status.FailedRelease, ro.Status.FailureReason)
	}
	bad := ro.Status.History[len(ro.Status.History)-2]
	if bad.Release != "mysql-bad" || bad.Outcome != "RolledBack" || !ro.Status.History[len(ro.Status.History)-1].Automatic {
		t.Errorf("history: %+v", ro.Status.History)
	}
	snaps := f.SnapshotsOf(bad.Revision)
	snap := snaps["member1"]
	if snap == "" {
		t.Fatalf("no pre-change snapshot recorded for member1: %+v", snaps)
	}
	if _, ok := snaps["member2"]; ok {
		t.Errorf("wave 2 must never start, but member2 has a snapshot")
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
	f.AssertEqualsSnapshot(suite.Env.Members[0], snap)
}

func TestUpgradeThenManualRollback(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-b" || rec.Version != "2.0.0" {
			t.Errorf("%s record %+v, want mysql-b", m.Name, rec)
		}
	}
	snaps := f.SnapshotsOf(ro.Status.Revision)
	// A MySQLCluster created on member1 since the upgrade's snapshot: the rollback keeps it
	// (spec.pruneOnRollback is off) and says so.
	if err := testfixture.Populate(t.Context(), suite.Env.Members[0].RESTConfig(), testfixture.Options{Namespaces: []string{f.CRNS}, Offset: 100, Count: 1}); err != nil {
		t.Fatal(err)
	}
	// `rewind rollback` sets spec.release back to A: rollback is a desired state.
	out := rewind(t, f.NS, "rollback", f.Name)
	if got := f.Rollout().Spec.Release; got != "mysql-a" || !strings.Contains(out, "rolling back from mysql-b to mysql-a") {
		t.Fatalf("rewind rollback must set spec.release to mysql-a, got %s:\n%s", got, out)
	}
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if out := rewind(t, f.NS, "history", f.Name); strings.Count(out, "Succeeded") < 2 || !strings.Contains(out, "mysql-b") {
		t.Errorf("rewind history:\n%s", out)
	}
	if out := rewind(t, f.NS, "rollout", "status", f.Name); !strings.Contains(out, "RolledBack") || strings.Count(out, "Restore") < 3 {
		t.Errorf("rewind rollout status:\n%s", out)
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack); c == nil || c.Reason != v1alpha1.ReasonManualRollback {
		t.Errorf("RolledBack condition %+v", c)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
	f.WaitEvent("KeptSinceSnapshot", "member1: kept 1 objects created since snapshot "+snaps["member1"], f.CRNS+"/db-00100")
}

func TestWave2FailsRollsBackWave1Too(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	// A restore memory budget of one byte: the two restores take turns, the second woken
	// when the first gives the memory back.
	startManagerWith(t, f.NS, controller.Options{RestoreMemory: 1})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	// member2's node is marked, so mysql-b-picky's operator never schedules there only.
	suite.MarkMember2(t)
	f.SetRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Timeout = &metav1.Duration{Duration: 8 * time.Second}
	})
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.History[len(ro.Status.History)-2].Revision)
	if snaps["member1"] == "" || snaps["member2"] == "" {
		t.Fatalf("wave 1 and wave 2 clusters should have pre-change snapshots: %v", snaps)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
	// Wave 1's member1 was rolled back too.
	f.AssertEqualsSnapshot(suite.Env.Members[0], snaps["member1"])
	f.AssertEqualsSnapshot(suite.Env.Members[1], snaps["member2"])
	if img := f.OperatorImageOn(suite.Env.Members[0]); img != operatorImage("1.0.0") {
		t.Errorf("member1 runs %v after the rollback, want A's image", img)
	}
}

// A member lost mid-rollout is not a failed release: its target waits (spec.unreachablePolicy
// Hold, the default), the Rollout's Waiting condition says why, the member's Reachable
// condition is False, and once the member is back the rollout goes on and succeeds, nothing
// rolled back. With unreachablePolicy Fail, the same loss fails the cluster and the failure
// policy rolls the changed clusters back.
func TestMemberLostMidRollout(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	lost := suite.Env.Members[2]
	suite.SetUnreachableTimeout(t, lost.Name, 5*time.Second)
	lost.StopAPIServer()
	t.Cleanup(func() { _ = lost.StartAPIServer(context.Background()) })
	// When its API server is back, member3's kube-controller-manager (no leader election in the
	// testbed, so not restarted as a real one would be) sees changes again only when its
	// informers' backoff ends, up to 30 s later: the gate allows for that (with 20 s, the
	// Deployment was not observed in time once in CI and the release failed on member3).
	f.SetRelease("mysql-b", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Timeout = &metav1.Duration{Duration: 90 * time.Second}
	})

	var ro *v1alpha1.Rollout
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ro = f.Rollout()
		c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionWaiting)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonMemberUnreachable && strings.Contains(c.Message, "member3"), nil
	})
	if err != nil {
		t.Fatalf("the Rollout must say that member3 is unreachable and waited for: %+v", ro.Status.Conditions)
	}
	if ro.Status.Phase != v1alpha1.RolloutProgressing || ro.Status.CurrentRelease != "mysql-b" || ro.Status.FailedRelease != "" {
		t.Fatalf("an unreachable member holds the wave; nothing fails: phase %s, release %s, failed %q", ro.Status.Phase, ro.Status.CurrentRelease, ro.Status.FailedRelease)
	}
	if st := f.Target("member3").Status; st.WaitingFor != v1alpha1.ReasonMemberUnreachable || st.Phase != v1alpha1.ClusterUpgrading {
		t.Errorf("member3's target must wait for its member: %+v", st)
	}
	mc := &v1alpha1.MemberCluster{}
	if err := hub(t).Get(t.Context(), client.ObjectKey{Name: lost.Name}, mc); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable); c == nil || c.Status != metav1.ConditionFalse ||
		mc.Status.ConsecutiveProbeFailures < 3 || mc.Status.LastProbeSuccessTime == nil {
		t.Errorf("member3's status must show the failed probes: %+v", mc.Status)
	}

	// The member comes back: the rollout goes on by itself.
	if err := lost.StartAPIServer(t.Context()); err != nil {
		t.Fatal(err)
	}
	ro = f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionWaiting); c != nil {
		t.Errorf("no cluster waits any more: %+v", c)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-b" {
			t.Errorf("%s record %+v, want mysql-b", m.Name, rec)
		}
	}
	if n := f.CountEvents("AutomaticRollback"); n != 0 {
		t.Errorf("a member that was away is not a failed release: %d automatic rollbacks", n)
	}

	// unreachablePolicy Fail: the same loss fails the cluster and the rollout rolls the
	// clusters it changed back.
	lost.StopAPIServer()
	f.SetRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) { s.UnreachablePolicy = v1alpha1.UnreachablePolicyFail })
	ro = f.WaitPhase("mysql-b", v1alpha1.RolloutRolledBack, 4*time.Minute)
	cond := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	if cond == nil || !strings.Contains(cond.Message, "member3") || !strings.Contains(cond.Message, "unreachable") {
		t.Errorf("the rollback reason must name the lost member and say it is unreachable: %+v", cond)
	}
}

func TestCrashAtEachStep(t *testing.T) {
	upgrade := slices.DeleteFunc(slices.Clone(target.UpgradeSteps), func(s string) bool { return s == target.StepDone })
	rollback := slices.DeleteFunc(slices.Clone(target.RestoreSteps), func(s string) bool { return s == target.StepDone })
	type crash struct{ path, step string }
	var crashes []crash
	for _, s := range upgrade {
		crashes = append(crashes, crash{"upgrade", s})
	}
	for _, s := range rollback {
		crashes = append(crashes, crash{"rollback", s})
	}
	for _, cr := range crashes {
		t.Run(cr.path+"/"+cr.step, func(t *testing.T) {
			f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
			stop := startManager(t, f.NS, nil)
			f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
			f.Populate()
			if cr.path == "rollback" {
				f.SetRelease("mysql-b", nil)
				f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 2*time.Minute)
			}
			stop()
			// A manager that crashes when member1 reaches the step ...
			var crashed sync.Once
			hit := make(chan struct{})
			stop = startManager(t, f.NS, func(cluster, step string) bool {
				if cluster == "member1" && step == cr.step {
					crashed.Do(func() { close(hit) })
					return true
				}
				return false
			})
			to := "mysql-b"
			if cr.path == "rollback" {
				to = "mysql-a"
			}
			f.SetRelease(to, nil)
			select {
			case <-hit:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the rollout never reached %s", cr.step)
			}
			stop()
			// ... and a fresh one finishes the job.
			startManager(t, f.NS, nil)
			want := v1alpha1.RolloutSucceeded
			if cr.path == "rollback" {
				want = v1alpha1.RolloutRolledBack
			}
			f.WaitPhase(to, want, 3*time.Minute)
			if rec := f.Record(suite.Env.Members[0]); rec == nil || rec.Release != to {
				t.Errorf("record %+v, want %s", rec, to)
			}
			var snaps v1alpha1.SnapshotList
			if err := hub(t).List(t.Context(), &snaps, client.InNamespace(f.NS)); err != nil {
				t.Fatal(err)
			}
			wantSnaps := 2 // one before A (the first install) and one before B
			if len(snaps.Items) != wantSnaps {
				names := []string{}
				for _, s := range snaps.Items {
					names = append(names, s.Name)
				}
				t.Errorf("want %d snapshots (no duplicate), got %v", wantSnaps, names)
			}
			if cr.path == "rollback" {
				f.AssertEqualsSnapshot(suite.Env.Members[0], f.Target("member1").Spec.Snapshot)
			}
		})
	}
}

func TestApprovalPauseAndResume(t *testing.T) {
	waves := fleet.TwoWaves()
	waves[1].RequireApproval = true
	// Wave canary bakes: wave rest comes only after member1 checked its health at its end.
	waves[0].BakeTime = &metav1.Duration{Duration: 3 * time.Second}
	f := newFleet(t, waves)
	// Paused from the start: nothing happens until it is resumed.
	rewind(t, f.NS, "rollout", "pause", f.Name)
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutPaused, time.Minute)
	if p := f.Phases(); p["member1"] != v1alpha1.ClusterPending || f.Target("member1").Spec.Start {
		t.Fatalf("a paused rollout must not start a cluster: %v", p)
	}
	rewind(t, f.NS, "rollout", "resume", f.Name)
	// Wave 1 runs, then wave 2 waits for a person.
	f.WaitPhase("mysql-a", v1alpha1.RolloutWaitingForApproval, 2*time.Minute)
	for cluster, phase := range f.Phases() {
		want := v1alpha1.ClusterPending
		if cluster == "member1" {
			want = v1alpha1.ClusterSucceeded
		}
		if phase != want {
			t.Errorf("%s is %s while wave 2 waits for approval, want %s", cluster, phase, want)
		}
	}
	// The bake passed on a check made at or after its end, not on the time alone (the last
	// re-check can be up to one poll interval before it).
	if tg := f.Target("member1"); tg.Spec.HealthyUntil == nil || tg.Status.HealthCheckedAt == nil || tg.Status.HealthCheckedAt.Before(tg.Spec.HealthyUntil) {
		t.Errorf("wave rest was reached with member1 healthy until %v, last checked at %v: the bake needs a check at or after its end",
			tg.Spec.HealthyUntil, tg.Status.HealthCheckedAt)
	}
	if out := rewind(t, f.NS, "rollout", "status", f.Name); !strings.Contains(out, "rewind rollout approve") {
		t.Errorf("status must say how to approve:\n%s", out)
	}
	rewind(t, f.NS, "rollout", "approve", f.Name)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
}

// TestFailurePolicies runs a wave-2 failure (member2 only) under the two policies that do
// not roll everything back. Under Pause, wave 2 takes one cluster at a time, member2 first,
// so member3 is still Pending when member2 fails. Under RollbackFailed, wave 2 takes both:
// member3, in flight, finishes its upgrade while member2 alone is restored, and a new
// release afterwards starts from what each cluster runs.
func TestFailurePolicies(t *testing.T) {
	for _, policy := range []string{v1alpha1.FailurePolicyRollbackFailed, v1alpha1.FailurePolicyPause} {
		t.Run(policy, func(t *testing.T) {
			waves := fleet.TwoWaves()
			waves[1].MaxConcurrency = 1
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				waves[1].MaxConcurrency = 2
			}
			f := newFleet(t, waves)
			startManager(t, f.NS, nil)
			f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
			f.Populate()
			suite.MarkMember2(t)
			clusterRollbacks := metric(t, "rewind_cluster_phase_transitions_total", map[string]string{"reason": "ClusterRollback"})
			restores := metric(t, "rewind_restores_total", map[string]string{"namespace": f.NS})
			f.SetRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) {
				s.FailurePolicy = policy
				s.HealthGates.Timeout = &metav1.Duration{Duration: 8 * time.Second}
			})
			ro := f.WaitPhase("mysql-b-picky", v1alpha1.RolloutFailed, 3*time.Minute)

			stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionTrue || !strings.Contains(stalled.Message, "member2") {
				t.Errorf("a failed rollout must be Stalled, naming member2: %+v", stalled)
			}
			if ro.Spec.Release != "mysql-b-picky" {
				t.Errorf("%s must not set spec.release back, got %s", policy, ro.Spec.Release)
			}
			phases := f.Phases()
			want := map[string]string{"member1": v1alpha1.ClusterSucceeded, "member2": v1alpha1.ClusterFailed, "member3": v1alpha1.ClusterPending}
			wantDone := "1/3"
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				want["member2"], want["member3"], wantDone = v1alpha1.ClusterRolledBack, v1alpha1.ClusterSucceeded, "2/3"
			}
			if !reflect.DeepEqual(phases, want) {
				t.Errorf("cluster phases %v, want %v", phases, want)
			}
			if ro.Status.ClustersDone != wantDone {
				t.Errorf("status.clustersDone %q, want %s (the clusters that run the new release)", ro.Status.ClustersDone, wantDone)
			}
			rev := ro.Status.History[len(ro.Status.History)-1]
			if rev.Release != "mysql-b-picky" || rev.Outcome != "Failed" || !strings.Contains(rev.Reason, "member2") {
				t.Errorf("the revision must be recorded as Failed because of member2: %+v", rev)
			}

			// member1 keeps the new release: neither policy touches a cluster that passed.
			if img := f.OperatorImageOn(suite.Env.Members[0]); img != operatorImage("2.0.2") {
				t.Errorf("member1 runs %s, want mysql-b-picky's image", img)
			}
			if rec := f.Record(suite.Env.Members[0]); rec == nil || rec.Release != "mysql-b-picky" {
				t.Errorf("member1 record %+v, want mysql-b-picky", rec)
			}
			if policy == v1alpha1.FailurePolicyPause {
				// member3 never started.
				if img := f.OperatorImageOn(suite.Env.Members[2]); img != operatorImage("1.0.0") {
					t.Errorf("member3 runs %s, want mysql-a's image: wave 2 must stop at the failure", img)
				}
			} else if img := f.OperatorImageOn(suite.Env.Members[2]); img != operatorImage("2.0.2") {
				t.Errorf("member3 runs %s, want mysql-b-picky's image: it was in flight and passed", img)
			}
			wantEvents := []string{"Failed"}
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				wantEvents = append(wantEvents, "ClusterRollback")
			}
			evs := f.Events(wantEvents...)
			switch policy {
			case v1alpha1.FailurePolicyRollbackFailed:
				// member2 alone is restored, exactly, to its pre-change snapshot.
				m2 := f.Target("member2")
				snap := m2.Spec.Snapshot
				if snap == "" || m2.Spec.Path != v1alpha1.PathRestore || m2.Spec.ToRelease != "mysql-a" {
					t.Fatalf("member2 must be restored to its pre-change snapshot and mysql-a: %+v", m2.Spec)
				}
				f.AssertEqualsSnapshot(suite.Env.Members[1], snap)
				if img := f.OperatorImageOn(suite.Env.Members[1]); img != operatorImage("1.0.0") {
					t.Errorf("member2 runs %s after its restore, want mysql-a's image", img)
				}
				if rec := f.Record(suite.Env.Members[1]); rec == nil || rec.Release != "mysql-a" {
					t.Errorf("member2 record %+v, want mysql-a", rec)
				}
				if !strings.Contains(evs["ClusterRollback"], "member2") {
					t.Errorf("no ClusterRollback event naming member2: %v", evs)
				}
				if got := metric(t, "rewind_cluster_phase_transitions_total", map[string]string{"reason": "ClusterRollback"}); got < clusterRollbacks+1 {
					t.Errorf("rewind_cluster_phase_transitions_total{reason=ClusterRollback} went from %v to %v, want at least +1", clusterRollbacks, got)
				}
				if got := metric(t, "rewind_restores_total", map[string]string{"namespace": f.NS, "cluster": "member2", "outcome": "Succeeded"}); got != 1 || restores != 0 {
					t.Errorf("rewind_restores_total{cluster=member2,outcome=Succeeded} is %v (had %v before): want exactly one restore", got, restores)
				}
			case v1alpha1.FailurePolicyPause:
				// member2 stays as the failure left it, for a person to look at.
				if img := f.OperatorImageOn(suite.Env.Members[1]); img != operatorImage("2.0.2") {
					t.Errorf("member2 runs %s, want mysql-b-picky's image left in place", img)
				}
				if _, ok := evs["ClusterRollback"]; ok {
					t.Errorf("Pause must not restore a cluster: %v", evs)
				}
				if got := metric(t, "rewind_restores_total", map[string]string{"namespace": f.NS}); got != restores {
					t.Errorf("Pause ran a restore: rewind_restores_total went from %v to %v", restores, got)
				}
			}
			if !strings.Contains(evs["Failed"], "failure policy "+policy) {
				t.Errorf("no Failed event naming the policy: %v", evs)
			}
			if policy != v1alpha1.FailurePolicyRollbackFailed {
				return
			}
			// The next release starts from what each cluster runs: mysql-b-picky on member1 and
			// member3, mysql-a again on member2 (its precheck expects mysql-a).
			f.SetRelease("mysql-b", nil)
			f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
			for _, m := range suite.Env.Members {
				if rec := f.Record(m); rec == nil || rec.Release != "mysql-b" {
					t.Errorf("%s record %+v, want mysql-b", m.Name, rec)
				}
			}
		})
	}
}

// TestRetriesExhaustedStalls makes a step fail on every attempt (an admission policy on
// member1 refuses the new operator Deployment): after MaxAttempts the cluster fails, the
// rollout (failure policy Pause) is Stalled with reason RetriesExhausted, and once a person
// removes the cause, `rewind rollback` brings member1 back.
func TestRetriesExhaustedStalls(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	m1 := memberClient(t, suite.Env.Members[0])
	const denied = "operator version 2.0.0 is not allowed on this cluster"
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "deny-2-0-0-" + f.NS},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"deployments"}}}},
			"validations": []any{map[string]any{
				"expression": "!has(object.metadata.labels) || !('version' in object.metadata.labels) || object.metadata.labels['version'] != '2.0.0'",
				"message":    denied}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "deny-2-0-0-" + f.NS},
		"spec": map[string]any{"policyName": "deny-2-0-0-" + f.NS, "validationActions": []any{"Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": f.OpNS}}}},
	}}
	for _, o := range []*unstructured.Unstructured{policy, binding} {
		if err := m1.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	removePolicy := func() {
		for _, o := range []*unstructured.Unstructured{binding, policy} {
			_ = m1.Delete(context.Background(), o)
		}
	}
	t.Cleanup(removePolicy)
	// The policy is enforced once the API server has compiled it: probe with a dry run.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "probe", "namespace": f.OpNS, "labels": map[string]any{"version": "2.0.0"}},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "probe"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "probe"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.com/probe:1"}}}}},
	}}
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := m1.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), denied), nil
	})
	if err != nil {
		t.Fatalf("the admission policy is not enforced: %v", err)
	}

	f.SetRelease("mysql-b", func(s *v1alpha1.RolloutSpec) { s.FailurePolicy = v1alpha1.FailurePolicyPause })
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutFailed, 3*time.Minute)
	c := f.Target("member1").Status
	if c.Phase != v1alpha1.ClusterFailed || c.Step != target.StepApplyWorkloads || c.Attempt != target.MaxAttempts {
		t.Errorf("member1 must fail at %s after %d attempts: %+v", target.StepApplyWorkloads, target.MaxAttempts, c)
	}
	// The attempts waited out their backoff (1s, 2s, 4s, 8s) although every attempt wrote the
	// status, which triggers a reconcile (status times have one-second precision).
	if c.StepStartedAt == nil || c.FinishedAt == nil {
		t.Errorf("member1 has no step start or finish time: %+v", c)
	} else if took := c.FinishedAt.Sub(c.StepStartedAt.Time); took < 14*time.Second {
		t.Errorf("%d attempts took %v: the backoff (1s, 2s, 4s, 8s) was not honoured", target.MaxAttempts, took)
	}
	stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != v1alpha1.ReasonRetriesExhausted ||
		!strings.Contains(stalled.Message, fmt.Sprintf("attempt %d of %d", target.MaxAttempts, target.MaxAttempts)) || !strings.Contains(stalled.Message, denied) {
		t.Errorf("Stalled must say the retries ran out and why: %+v", stalled)
	}
	if out := rewind(t, f.NS, "rollout", "status", f.Name); !strings.Contains(out, denied) {
		t.Errorf("rollout status must show the cause:\n%s", out)
	}

	// A person removes the cause and rolls back.
	removePolicy()
	rewind(t, f.NS, "rollback", f.Name)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if s := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); s != nil {
		t.Errorf("the rollback must clear Stalled: %+v", s)
	}
	if rec := f.Record(suite.Env.Members[0]); rec == nil || rec.Release != "mysql-a" {
		t.Errorf("member1 record %+v, want mysql-a", rec)
	}
	f.AssertEqualsSnapshot(suite.Env.Members[0], c.Snapshot)
}
