package target

import (
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestSteps(t *testing.T) {
	if got := NextStep(v1alpha1.PathUpgrade, StepSnapshot); got != StepApplyCRDs {
		t.Errorf("after Snapshot comes %s", got)
	}
	if got := NextStep(v1alpha1.PathRestore, StepRestore); got != StepApplyRelease {
		t.Errorf("after Restore comes %s", got)
	}
	if got := FirstStep(v1alpha1.PathNone); got != StepDone {
		t.Errorf("a None path starts at %s", got)
	}
	for _, s := range append(UpgradeSteps, RestoreSteps...) {
		if _, ok := steps[s]; !ok && s != StepDone {
			t.Errorf("step %s has no action", s)
		}
	}
	if Changed(v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, StepSnapshot) {
		t.Error("a cluster whose snapshot is not done yet has not been changed")
	}
	if !Changed(v1alpha1.PathUpgrade, v1alpha1.ClusterFailed, StepHealthGate) {
		t.Error("a cluster that failed its gate has been changed")
	}
	if Changed(v1alpha1.PathRestore, v1alpha1.ClusterPending, "") || !Changed(v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, StepRestore) {
		t.Error("a restore changes its cluster once it starts")
	}
}

// A plan made from a journal that has since changed its cluster is stale; one made from a
// journal that changed nothing since, or whose change the plan saw, holds.
func TestStalePlan(t *testing.T) {
	up, re := v1alpha1.PathUpgrade, v1alpha1.PathRestore
	upgrading, succeeded, failed, rollingBack := v1alpha1.ClusterUpgrading, v1alpha1.ClusterSucceeded, v1alpha1.ClusterFailed, v1alpha1.ClusterRollingBack
	journal := func(rev int32, path, phase, step string) *v1alpha1.RolloutTargetStatus {
		return &v1alpha1.RolloutTargetStatus{Revision: rev, Path: path, Phase: phase, Step: step}
	}
	basis := func(rev int32, path, phase, step string) *v1alpha1.PlanBasis {
		return &v1alpha1.PlanBasis{Revision: rev, Path: path, Phase: phase, Step: step}
	}
	for _, tc := range []struct {
		name  string
		basis *v1alpha1.PlanBasis
		st    *v1alpha1.RolloutTargetStatus
		stale bool
	}{
		{"planned at the snapshot, the journal applied CRDs since", basis(2, up, upgrading, StepSnapshot), journal(2, up, upgrading, StepApplyCRDs), true},
		{"planned at the snapshot, the journal succeeded since", basis(2, up, upgrading, StepSnapshot), journal(2, up, succeeded, StepDone), true},
		{"planned at the precheck, the journal still at its snapshot", basis(2, up, upgrading, StepPrecheck), journal(2, up, upgrading, StepSnapshot), false},
		{"planned after the change, the journal went on", basis(2, up, upgrading, StepApplyCRDs), journal(2, up, upgrading, StepHealthGate), false},
		{"planned after the change, the journal failed since", basis(2, up, upgrading, StepHealthGate), journal(2, up, failed, StepHealthGate), false},
		{"planned from the journal before, the next one changed the cluster", basis(1, up, succeeded, StepDone), journal(2, up, upgrading, StepApplyCRDs), true},
		{"planned from the journal before, the next one only took its snapshot", basis(1, up, succeeded, StepDone), journal(2, up, upgrading, StepSnapshot), false},
		{"planned from no journal, one changed the cluster", basis(0, "", "", ""), journal(2, up, upgrading, StepApplyCRDs), true},
		{"planned before a restore started, it started", basis(3, re, v1alpha1.ClusterPending, ""), journal(3, re, rollingBack, StepRestore), true},
		{"planned while a restore ran", basis(3, re, rollingBack, StepRestore), journal(3, re, rollingBack, StepApplyRelease), false},
		{"a journal that failed before its change", basis(2, up, upgrading, StepSnapshot), journal(2, up, failed, StepSnapshot), false},
		{"no basis (a target written by hand)", nil, journal(2, up, upgrading, StepApplyCRDs), false},
	} {
		if got := StalePlan(tc.basis, tc.st); got != tc.stale {
			t.Errorf("%s: StalePlan = %v, want %v", tc.name, got, tc.stale)
		}
	}
}
