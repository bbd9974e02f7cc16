package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
)

func TestPullConditions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(d)); return &v }
	ago := func(d time.Duration) *time.Time { v := now.Add(-d); return &v }
	cases := []struct {
		name string
		// agent is the member's status.agent, clusterID its status.clusterID, timeout its
		// spec.unreachableTimeout (nil: the default 3m).
		agent     *v1alpha1.AgentStatus
		clusterID string
		timeout   *metav1.Duration
		// renew is the agent Lease's renewTime (nil: no Lease).
		renew *time.Time
		// reachable, reason and message are what Reachable must say; ready Ready's status;
		// wait when to look again (0: no deadline).
		reachable, ready metav1.ConditionStatus
		reason, message  string
		wait             time.Duration
	}{
		{name: "never joined", reachable: metav1.ConditionUnknown, ready: metav1.ConditionUnknown,
			reason: v1alpha1.ReasonAwaitingAgent, message: "rewind clusters join edge-1"},
		{name: "bootstrap token valid", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(time.Minute)},
			reachable: metav1.ConditionUnknown, ready: metav1.ConditionUnknown,
			reason: v1alpha1.ReasonAwaitingAgent, message: "valid until 2026-12-01T12:01:00Z", wait: time.Minute},
		{name: "bootstrap token expired unused", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(0)},
			reachable: metav1.ConditionUnknown, ready: metav1.ConditionUnknown,
			reason: v1alpha1.ReasonBootstrapTokenExpired, message: "expired at 2026-12-01T12:00:00Z unused"},
		{name: "joined, no heartbeat yet", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(-time.Hour), JoinedAt: at(-2 * time.Hour)},
			reachable: metav1.ConditionUnknown, ready: metav1.ConditionUnknown,
			reason: v1alpha1.ReasonAwaitingAgent, message: "joined at 2026-12-01T10:00:00Z"},
		{name: "heartbeat within the grace period", agent: &v1alpha1.AgentStatus{JoinedAt: at(-time.Hour)}, clusterID: "uid-1",
			renew: ago(10 * time.Second), reachable: metav1.ConditionTrue, ready: metav1.ConditionTrue,
			reason: ReasonAgentHeartbeat, message: "renewed its Lease at 2026-12-01T11:59:50Z", wait: 3*time.Minute - 10*time.Second},
		{name: "heartbeat, cluster ID not recorded yet", renew: ago(time.Second), reachable: metav1.ConditionTrue, ready: metav1.ConditionFalse,
			reason: ReasonAgentHeartbeat, message: "renewed its Lease", wait: 3*time.Minute - time.Second},
		{name: "heartbeat older than the grace period", clusterID: "uid-1", renew: ago(3 * time.Minute),
			reachable: metav1.ConditionUnknown, ready: metav1.ConditionUnknown,
			reason: ReasonAgentHeartbeatLost, message: "longer ago than the member's unreachableTimeout 3m0s"},
		{name: "heartbeat within a longer grace period", clusterID: "uid-1", renew: ago(5 * time.Minute), timeout: &metav1.Duration{Duration: 10 * time.Minute},
			reachable: metav1.ConditionTrue, ready: metav1.ConditionTrue, reason: ReasonAgentHeartbeat, message: "11:55:00Z", wait: 5 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Generation: 3},
				Spec:   v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull, UnreachableTimeout: tc.timeout},
				Status: v1alpha1.MemberClusterStatus{Agent: tc.agent, ClusterID: tc.clusterID}}
			conds, wait := pullConditions(mc, tc.renew, now)
			if len(conds) != 2 || conds[0].Type != v1alpha1.ConditionReachable || conds[1].Type != v1alpha1.ConditionReady {
				t.Fatalf("conditions %+v, want Reachable and Ready", conds)
			}
			r := conds[0]
			if r.Status != tc.reachable || r.Reason != tc.reason || !strings.Contains(r.Message, tc.message) || r.ObservedGeneration != 3 {
				t.Errorf("Reachable %s %s %q (generation %d), want %s %s naming %q", r.Status, r.Reason, r.Message, r.ObservedGeneration, tc.reachable, tc.reason, tc.message)
			}
			if conds[1].Status != tc.ready {
				t.Errorf("Ready %s (%s), want %s", conds[1].Status, conds[1].Message, tc.ready)
			}
			if wait != tc.wait {
				t.Errorf("look again in %s, want %s", wait, tc.wait)
			}
		})
	}
}

// TestPullCheckWaitsForTheHeartbeatDeadline: with a fresh Lease the hub checks a pull member
// again when its grace period would end, not every checkInterval: nothing can make it
// unreachable before then. At 1,000 members a check every 30 s cost 33 Lease reads and 33
// status writes a second on the hub. With the Lease lost the check is every checkInterval,
// to see the agent come back.
func TestPullCheckWaitsForTheHeartbeatDeadline(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		renew time.Duration // ago
		want  time.Duration
	}{
		{"fresh", 10 * time.Second, 3*time.Minute - 10*time.Second},
		{"lost", 5 * time.Minute, 30 * time.Second},
	} {
		mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull},
			Status: v1alpha1.MemberClusterStatus{Agent: &v1alpha1.AgentStatus{JoinedAt: &metav1.Time{Time: now.Add(-time.Hour)}}, ClusterID: "uid-1"}}
		renew := metav1.NewMicroTime(now.Add(-tc.renew))
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace("edge-1"), Name: join.AgentLease},
			Spec: coordinationv1.LeaseSpec{RenewTime: &renew}}
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(mc, lease).WithStatusSubresource(mc).Build()
		r := &MemberClusterReconciler{Client: c, Now: func() time.Time { return now }}
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mc)})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if res.RequeueAfter != tc.want {
			t.Errorf("%s Lease: next check after %s, want %s", tc.name, res.RequeueAfter, tc.want)
		}
	}
}
