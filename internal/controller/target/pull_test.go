package target

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestRelayedStatus: the status a pull member's target shows is its copy's (once the agent
// wrote one), with the observed generation of the target's own spec; while the member's agent
// is lost, an opened, unfinished target waits (or fails with unreachablePolicy Fail); a
// target not opened or done does not; a target the hub failed keeps its failure.
func TestRelayedStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{Now: func() time.Time { return now }}
	spec := v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade, Start: true}
	mk := func(gen int64, st v1alpha1.RolloutTargetStatus) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: spec, Status: st}
	}
	reachable := func(status metav1.ConditionStatus) *v1alpha1.MemberCluster {
		return &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}, Status: v1alpha1.MemberClusterStatus{
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: status, Reason: "AgentHeartbeatLost",
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}}}
	}
	running := v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: StepSnapshot, ObservedGeneration: 7}
	up := reachable(metav1.ConditionTrue)
	lost := reachable(metav1.ConditionUnknown)

	// Nothing from the agent yet: the target keeps what it shows.
	before := v1alpha1.RolloutTargetStatus{Revision: 1, Phase: v1alpha1.ClusterSucceeded}
	if got, _ := r.relayedStatus(mk(3, before), mk(7, v1alpha1.RolloutTargetStatus{}), up); got.Revision != 1 || got.Phase != v1alpha1.ClusterSucceeded {
		t.Errorf("before the agent wrote anything: %+v", got)
	}
	// The agent's status, its generation translated: the copy at generation 7 saw this spec.
	got, _ := r.relayedStatus(mk(3, before), mk(7, running), up)
	if got.Step != StepSnapshot || got.Phase != v1alpha1.ClusterUpgrading || got.ObservedGeneration != 3 {
		t.Errorf("relayed: %+v", got)
	}
	// A copy whose spec is behind the target's has not seen it.
	cp := mk(7, running)
	cp.Spec.Start = false
	if got, _ := r.relayedStatus(mk(3, v1alpha1.RolloutTargetStatus{ObservedGeneration: 2}), cp, up); got.ObservedGeneration != 2 {
		t.Errorf("a copy behind the target's spec: observedGeneration %d, want 2", got.ObservedGeneration)
	}
	// The agent lost: the running target waits.
	got, requeue := r.relayedStatus(mk(3, before), mk(7, running), lost)
	if got.WaitingFor != v1alpha1.ReasonMemberUnreachable || got.WaitingSince == nil || !strings.Contains(got.Message, "Hold") || requeue <= 0 {
		t.Errorf("agent lost: %+v (requeue %s)", got, requeue)
	}
	// ... or fails with unreachablePolicy Fail, and the failure stays once the agent is back.
	failing := mk(3, before)
	failing.Spec.UnreachablePolicy = v1alpha1.UnreachablePolicyFail
	got, _ = r.relayedStatus(failing, mk(7, running), lost)
	if got.Phase != v1alpha1.ClusterFailed || !strings.Contains(got.Message, "unreachablePolicy Fail") {
		t.Errorf("agent lost, policy Fail: %+v", got)
	}
	failing.Status = *got
	if got, _ := r.relayedStatus(failing, mk(7, running), up); got.Phase != v1alpha1.ClusterFailed {
		t.Errorf("the hub's failure must stay when the agent is back: %+v", got)
	}
	// Not opened, or done: no wait.
	closed := mk(3, before)
	closed.Spec.Start = false
	if got, _ := r.relayedStatus(closed, mk(7, running), lost); got.WaitingFor != "" {
		t.Errorf("a target not opened must not wait: %+v", got)
	}
	done := running
	done.Phase, done.Step = v1alpha1.ClusterSucceeded, StepDone
	if got, _ := r.relayedStatus(mk(3, before), mk(7, done), lost); got.WaitingFor != "" || got.Phase != v1alpha1.ClusterSucceeded {
		t.Errorf("a done target must not wait: %+v", got)
	}
	// A revision the agent has not seen waits from its start.
	if got, _ := r.relayedStatus(mk(3, before), mk(7, before), lost); got.Revision != 2 || got.Phase != v1alpha1.ClusterPending || got.WaitingFor != v1alpha1.ReasonMemberUnreachable {
		t.Errorf("a new revision while the agent is lost: %+v", got)
	}
}

func TestMemberSnapshotName(t *testing.T) {
	if got := MemberSnapshotName("team-a", "mysql-edge-r2"); got != "team-a.mysql-edge-r2" {
		t.Errorf("planned name: %s", got)
	}
	if got := MemberSnapshotName("team-a", "team-a.mysql-edge-r2"); got != "team-a.mysql-edge-r2" {
		t.Errorf("a name the copy gave back: %s", got)
	}
	if got := MemberSnapshotName("team-a", ""); got != "" {
		t.Errorf("no snapshot: %q", got)
	}
}

func TestCopyName(t *testing.T) {
	tt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql-edge"}}
	if got := CopyName(tt); got != "team-a.mysql-edge" {
		t.Errorf("CopyName %s", got)
	}
	if !IsCopy(&v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelSourceNamespace: "team-a"}}}) || IsCopy(tt) {
		t.Error("IsCopy")
	}
}
