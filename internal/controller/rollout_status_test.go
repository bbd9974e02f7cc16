package controller

import (
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestClustersDoneAndRollbackKind(t *testing.T) {
	cp := func(name, path, phase, to string) v1alpha1.ClusterProgress {
		return v1alpha1.ClusterProgress{Cluster: name, Path: path, Phase: phase, ToRelease: to}
	}
	cases := []struct {
		name     string
		clusters []v1alpha1.ClusterProgress
		// rollback says the revision returns clusters to release "b"; failedRestore says
		// RollbackFailed is at work; done is status.clustersDone.
		rollback, failedRestore bool
		done                    string
	}{
		{
			name: "an upgrade counts the clusters that succeeded",
			clusters: []v1alpha1.ClusterProgress{cp("m1", v1alpha1.PathUpgrade, v1alpha1.ClusterSucceeded, "b"),
				cp("m2", v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, "b"), cp("m3", v1alpha1.PathUpgrade, v1alpha1.ClusterPending, "b")},
			done: "1/3",
		},
		{
			name: "a rollback counts the clusters restored and those with nothing to do",
			clusters: []v1alpha1.ClusterProgress{cp("m1", v1alpha1.PathRestore, v1alpha1.ClusterRolledBack, "b"),
				cp("m2", v1alpha1.PathNone, v1alpha1.ClusterSucceeded, "b"), cp("m3", v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, "b")},
			rollback: true, done: "2/3",
		},
		{
			name: "a cluster RollbackFailed restored to the release before does not make the upgrade a rollback, nor count",
			clusters: []v1alpha1.ClusterProgress{cp("m1", v1alpha1.PathUpgrade, v1alpha1.ClusterSucceeded, "b"),
				cp("m2", v1alpha1.PathRestore, v1alpha1.ClusterRolledBack, "a"), cp("m3", v1alpha1.PathUpgrade, v1alpha1.ClusterSucceeded, "b")},
			failedRestore: true, done: "2/3",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &scope{ro: &v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{CurrentRelease: "b", Clusters: tc.clusters}}}
			if got := s.isRollback(); got != tc.rollback {
				t.Errorf("isRollback = %v, want %v", got, tc.rollback)
			}
			if got := s.restoringFailed(); got != tc.failedRestore {
				t.Errorf("restoringFailed = %v, want %v", got, tc.failedRestore)
			}
			if got := clustersDone(tc.clusters, s.isRollback()); got != tc.done {
				t.Errorf("clustersDone = %s, want %s", got, tc.done)
			}
		})
	}
}

func TestFailureReason(t *testing.T) {
	cases := []struct {
		c    v1alpha1.ClusterProgress
		want string
	}{
		{v1alpha1.ClusterProgress{Step: StepApplyWorkloads, Attempt: MaxAttempts}, v1alpha1.ReasonRetriesExhausted},
		{v1alpha1.ClusterProgress{Step: StepHealthGate}, v1alpha1.ReasonHealthGateFailed},
		{v1alpha1.ClusterProgress{Step: StepPrecheck}, v1alpha1.ReasonPrecheckFailed},
		{v1alpha1.ClusterProgress{Step: StepRestore, Attempt: 1}, v1alpha1.ReasonStepFailed},
	}
	for _, tc := range cases {
		if got := failureReason(&tc.c); got != tc.want {
			t.Errorf("failureReason(step %s, attempt %d) = %s, want %s", tc.c.Step, tc.c.Attempt, got, tc.want)
		}
	}
}
