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
