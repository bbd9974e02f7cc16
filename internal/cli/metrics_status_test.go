package cli

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// rollout status shows each cluster's metric analyses with their last measurements, and names
// the revision of a result that is not the target's own (the revision a rollback undid); and
// the notes of each cluster's current plan (status.notes), not an earlier plan's.
func TestRolloutStatusShowsMetrics(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql"},
		Spec: v1alpha1.RolloutSpec{Operator: "mysql-operator", Waves: []v1alpha1.Wave{{Name: "canary"}}}}
	ms := func(phase, value string) v1alpha1.Measurement {
		return v1alpha1.Measurement{Phase: phase, Value: value}
	}
	targets := []v1alpha1.RolloutTarget{
		{Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1", Revision: 3, Path: v1alpha1.PathRestore, ToRelease: "mysql-a"},
			Status: v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathRestore, Metrics: []v1alpha1.MetricResult{{
				Name: "error-ratio", Revision: 2, Phase: v1alpha1.MetricFailed, Count: 2, Successful: 1, Failed: 1,
				Measurements: []v1alpha1.Measurement{ms("Error", ""), ms("Successful", "[0.01]"), ms("Failed", "[0.3]")}}},
				Notes: []v1alpha1.TargetNote{{Type: "Normal", Reason: "KeptSinceSnapshot", Message: "member1: kept 1 objects created since snapshot s: crs/db-1"}}}},
		{Spec: v1alpha1.RolloutTargetSpec{Cluster: "member2", Revision: 3, Path: v1alpha1.PathUpgrade, ToRelease: "mysql-a"},
			Status: v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathUpgrade, Metrics: []v1alpha1.MetricResult{{
				Name: "error-ratio", Revision: 3, Phase: v1alpha1.MetricRunning}}}},
		// A note of an earlier plan is not this revision's.
		{Spec: v1alpha1.RolloutTargetSpec{Cluster: "member3", Revision: 3, Path: v1alpha1.PathUpgrade, ToRelease: "mysql-a"},
			Status: v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade,
				Notes: []v1alpha1.TargetNote{{Type: "Warning", Reason: "RestoreWithoutRelease", Message: "member3: an earlier plan's note"}}}},
	}
	var b bytes.Buffer
	printRolloutStatus(&b, ro, targets)
	for _, want := range []string{
		"Metrics:",
		"member1 error-ratio (revision 2): Failed, 2 measured (1 successful, 1 failed, 0 inconclusive, 0 errors); last: Error, Successful [0.01], Failed [0.3]",
		"member2 error-ratio: Running, 0 measured (0 successful, 0 failed, 0 inconclusive, 0 errors); last: -",
		"Notes:\n  member1 Normal KeptSinceSnapshot: member1: kept 1 objects created since snapshot s: crs/db-1\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rollout status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "an earlier plan's note") {
		t.Errorf("rollout status shows a note of an earlier plan:\n%s", b.String())
	}
}
