package controller

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// A member's check writes its status.lastCheckTime, its conditions and the times of its probe
// or its agent's heartbeat; that write alone does not check the member again (before, every
// write of a check started the next one, on without end whenever a round trip took a second or
// more; and a pull member's check, which changes its heartbeat time and message, was done twice).
// Any other change still does.
func TestAMemberIsNotCheckedAgainForItsOwnCheckTime(t *testing.T) {
	at := func(s int) *metav1.Time { v := metav1.NewTime(time.Date(2026, 12, 2, 6, 0, s, 0, time.UTC)); return &v }
	old := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "m1", ResourceVersion: "1", Generation: 1},
		Spec:   v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull},
		Status: v1alpha1.MemberClusterStatus{LastCheckTime: at(0), ServerVersion: "v1.37.2", Agent: &v1alpha1.AgentStatus{Namespace: "rewind-member-m1"}}}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.MemberCluster)
		want   bool
	}{
		{"the check time alone", func(mc *v1alpha1.MemberCluster) { mc.Status.LastCheckTime = at(1) }, false},
		{"what a pull member's check writes", func(mc *v1alpha1.MemberCluster) {
			mc.Status.LastCheckTime, mc.Status.ObservedGeneration = at(1), 1
			mc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue,
				Reason: "AgentHeartbeat", Message: "pull member: its agent renewed its Lease at 2026-12-02T06:00:01Z"}}
			mc.Status.Agent.LastHeartbeatTime = at(1)
		}, false},
		{"what a push member's check writes", func(mc *v1alpha1.MemberCluster) {
			mc.Status.LastCheckTime, mc.Status.LastProbeSuccessTime, mc.Status.ConsecutiveProbeFailures = at(1), at(1), 2
			mc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionFalse}}
		}, false},
		{"what a join writes", func(mc *v1alpha1.MemberCluster) {
			mc.Status.Agent.JoinedAt = at(2)
		}, true},
		{"the cluster ID the agent writes", func(mc *v1alpha1.MemberCluster) { mc.Status.ClusterID = "5f0c" }, true},
		{"a status field the agent writes", func(mc *v1alpha1.MemberCluster) { mc.Status.ServerVersion = "v1.38.0" }, true},
		{"the spec", func(mc *v1alpha1.MemberCluster) { mc.Spec.Mode, mc.Generation = v1alpha1.ModePush, 2 }, true},
		{"a label", func(mc *v1alpha1.MemberCluster) { mc.Labels = map[string]string{"env": "edge"} }, true},
	} {
		cur := old.DeepCopy()
		cur.ResourceVersion = "2"
		tc.change(cur)
		if got := notOwnCheck(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != tc.want {
			t.Errorf("%s changed: checked again %v; want %v", tc.name, got, tc.want)
		}
	}
}
