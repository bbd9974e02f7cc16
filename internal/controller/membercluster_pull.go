package controller

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// pullConditions are the Reachable and Ready conditions of a pull member, from what its join
// and its agent recorded in status.agent: a member whose agent has not joined is Unknown, and
// says whether its bootstrap token expired unused (the hub's API server refuses it then).
func pullConditions(mc *v1alpha1.MemberCluster, now time.Time) []metav1.Condition {
	reach := metav1.Condition{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionUnknown,
		Reason: v1alpha1.ReasonAwaitingAgent, ObservedGeneration: mc.Generation}
	a := mc.Status.Agent
	switch {
	case a == nil || a.BootstrapExpiresAt == nil:
		reach.Message = fmt.Sprintf("pull member: no agent has joined; run `rewind clusters join %s` and install what it prints in the member", mc.Name)
	case a.JoinedAt == nil && !now.Before(a.BootstrapExpiresAt.Time):
		reach.Reason = v1alpha1.ReasonBootstrapTokenExpired
		reach.Message = fmt.Sprintf("pull member: the bootstrap token expired at %s unused and is refused; run `rewind clusters join %s` again for a new one",
			a.BootstrapExpiresAt.UTC().Format(time.RFC3339), mc.Name)
	case a.JoinedAt == nil:
		reach.Message = fmt.Sprintf("pull member: waiting for its agent to join with the bootstrap token (valid until %s)",
			a.BootstrapExpiresAt.UTC().Format(time.RFC3339))
	default:
		reach.Message = fmt.Sprintf("pull member: its agent joined at %s; waiting for its heartbeat", a.JoinedAt.UTC().Format(time.RFC3339))
	}
	ready := reach
	ready.Type = v1alpha1.ConditionReady
	return []metav1.Condition{reach, ready}
}
