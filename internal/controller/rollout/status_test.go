package rollout

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// The Rollout's status stays bounded however many clusters there are: with 1,000 targets,
// every one failed with a long message, and a full history, it is under 64 KiB.
func TestStatusIsBounded(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "fleet", UID: "uid"},
		Spec: v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "all"}}}}
	ro.Status.Revision, ro.Status.CurrentRelease = 7, "b"
	s := &scope{ro: ro, targets: map[string]*v1alpha1.RolloutTarget{}}
	long := strings.Repeat("x", 2000)
	for i := range 1000 {
		name := fmt.Sprintf("member-%04d", i)
		s.targets[name] = &v1alpha1.RolloutTarget{
			Spec:   v1alpha1.RolloutTargetSpec{Cluster: name, Revision: 7, Path: v1alpha1.PathUpgrade, ToRelease: "b"},
			Status: v1alpha1.RolloutTargetStatus{Revision: 7, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterFailed, Step: "HealthGate", Message: long},
		}
	}
	for i := range historyLimit {
		ro.Status.History = append(ro.Status.History, v1alpha1.Revision{Revision: int32(i + 1), Release: "b", Outcome: "RolledBack", Reason: truncate(long, 1024)})
	}
	s.aggregate()
	for range 5 {
		s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, "X", long)
	}
	data, err := json.Marshal(ro.Status)
	if err != nil {
		t.Fatal(err)
	}
	if ro.Status.Targets.Total != 1000 || ro.Status.Targets.Failed != 1000 || len(ro.Status.Failures) != maxFailures || ro.Status.ClustersDone != "0/1000" {
		t.Fatalf("aggregate: %+v, %d failures listed, %s", ro.Status.Targets, len(ro.Status.Failures), ro.Status.ClustersDone)
	}
	if len(data) > 48<<10 {
		t.Fatalf("status with 1,000 targets is %d bytes, over 48 KiB (a margin under 64 KiB)", len(data))
	}
	t.Logf("status with 1,000 failed targets and %d revisions: %d bytes", historyLimit, len(data))
}
