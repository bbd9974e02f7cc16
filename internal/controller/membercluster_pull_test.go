package controller

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestPullConditions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { v := metav1.NewTime(now.Add(d)); return &v }
	cases := []struct {
		name string
		// agent is the member's status.agent.
		agent *v1alpha1.AgentStatus
		// reason and message are what Reachable must say.
		reason, message string
	}{
		{name: "never joined", agent: nil, reason: v1alpha1.ReasonAwaitingAgent, message: "rewind clusters join edge-1"},
		{name: "bootstrap token valid", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(time.Minute)},
			reason: v1alpha1.ReasonAwaitingAgent, message: "valid until 2026-12-01T12:01:00Z"},
		{name: "bootstrap token expired unused", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(0)},
			reason: v1alpha1.ReasonBootstrapTokenExpired, message: "expired at 2026-12-01T12:00:00Z unused"},
		{name: "joined, token since expired", agent: &v1alpha1.AgentStatus{BootstrapExpiresAt: at(-time.Hour), JoinedAt: at(-2 * time.Hour)},
			reason: v1alpha1.ReasonAwaitingAgent, message: "joined at 2026-12-01T10:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Generation: 3},
				Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}, Status: v1alpha1.MemberClusterStatus{Agent: tc.agent}}
			conds := pullConditions(mc, now)
			if len(conds) != 2 || conds[0].Type != v1alpha1.ConditionReachable || conds[1].Type != v1alpha1.ConditionReady {
				t.Fatalf("conditions %+v, want Reachable and Ready", conds)
			}
			for _, c := range conds {
				if c.Status != metav1.ConditionUnknown || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) || c.ObservedGeneration != 3 {
					t.Errorf("%s: %s %s %q (generation %d), want Unknown %s naming %q", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration, tc.reason, tc.message)
				}
			}
		})
	}
}
