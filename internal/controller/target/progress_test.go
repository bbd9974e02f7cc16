package target

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestOnlyProgressDoesNotWakeTheRollout: a target's step within a phase that goes on does
// not wake its Rollout; everything the Rollout decides or shows from does.
func TestOnlyProgressDoesNotWakeTheRollout(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(3 * time.Second))
	base := func() *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "mysql-m1", Generation: 3, Labels: map[string]string{v1alpha1.LabelRollout: "mysql"}},
			Spec:       v1alpha1.RolloutTargetSpec{Rollout: "mysql", Cluster: "m1", Revision: 2, Path: v1alpha1.PathRestore, Start: true},
			Status: v1alpha1.RolloutTargetStatus{ObservedGeneration: 3, Revision: 2, Path: v1alpha1.PathRestore, Phase: v1alpha1.ClusterRollingBack,
				Step: StepRestore, RestoreSteps: []string{"Quiesce"}, StartedAt: &t0, StepStartedAt: &t0},
		}
	}
	cases := []struct {
		name   string
		change func(*v1alpha1.RolloutTarget)
		wakes  bool
	}{
		{"a restore's next inner point", func(t *v1alpha1.RolloutTarget) { t.Status.RestoreSteps = append(t.Status.RestoreSteps, "CRDs") }, false},
		{"the next step", func(t *v1alpha1.RolloutTarget) {
			t.Status.Step, t.Status.StepStartedAt = StepApplyRelease, &t1
		}, false},
		{"a health check's metrics", func(t *v1alpha1.RolloutTarget) {
			t.Status.Metrics = []v1alpha1.MetricResult{{Name: "errors", Phase: "Successful"}}
		}, false},
		{"a fault ridden out", func(t *v1alpha1.RolloutTarget) { t.Status.Faults = 2 }, false},
		{"the end of the phase", func(t *v1alpha1.RolloutTarget) {
			t.Status.Phase, t.Status.FinishedAt = v1alpha1.ClusterRolledBack, &t1
		}, true},
		{"a failure", func(t *v1alpha1.RolloutTarget) {
			t.Status.Phase, t.Status.Message = v1alpha1.ClusterFailed, "gate failed"
		}, true},
		{"a wait", func(t *v1alpha1.RolloutTarget) {
			t.Status.WaitingFor, t.Status.WaitingSince = v1alpha1.ReasonMemberUnreachable, &t1
		}, true},
		{"a new attempt", func(t *v1alpha1.RolloutTarget) { t.Status.Attempt = 1 }, true},
		{"a health check time (the bake reads it)", func(t *v1alpha1.RolloutTarget) { t.Status.HealthCheckedAt = &t1 }, true},
		{"the spec", func(t *v1alpha1.RolloutTarget) { t.Generation, t.Spec.Start = 4, false }, true},
		{"a label", func(t *v1alpha1.RolloutTarget) { t.Labels["x"] = "y" }, true},
		{"an annotation (an approval)", func(t *v1alpha1.RolloutTarget) { t.Annotations = map[string]string{"a": "b"} }, true},
		{"a finalizer", func(t *v1alpha1.RolloutTarget) { t.Finalizers = []string{FinalizerMemberCopy} }, true},
		{"its deletion", func(t *v1alpha1.RolloutTarget) { t.DeletionTimestamp = &t1 }, true},
		{"the observed generation", func(t *v1alpha1.RolloutTarget) { t.Status.ObservedGeneration = 4 }, true},
		{"a new revision's plan", func(t *v1alpha1.RolloutTarget) {
			t.Status = v1alpha1.RolloutTargetStatus{ObservedGeneration: 3, Revision: 3, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterPending}
		}, true},
	}
	for _, c := range cases {
		old, cur := base(), base()
		c.change(cur)
		if got := !OnlyProgress(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}); got != c.wakes {
			t.Errorf("%s: wakes the Rollout %v, want %v", c.name, got, c.wakes)
		}
	}
	// Progress of a waiting target wakes it: the Waiting condition names its step and message.
	old, cur := base(), base()
	old.Status.WaitingFor, cur.Status.WaitingFor = v1alpha1.ReasonMemberUnreachable, v1alpha1.ReasonMemberUnreachable
	cur.Status.Message = "still not heard from"
	if OnlyProgress(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}) {
		t.Error("a waiting target's new message does not wake the Rollout; its Waiting condition shows it")
	}
	// A step of a target already ended (a push target's Record) wakes it too: the end is what counts.
	old, cur = base(), base()
	old.Status.Phase, cur.Status.Phase = v1alpha1.ClusterFailed, v1alpha1.ClusterFailed
	cur.Status.Message = "gate failed: more detail"
	if OnlyProgress(event.UpdateEvent{ObjectOld: old, ObjectNew: cur}) {
		t.Error("a failed target's new message does not wake the Rollout; its failures show it")
	}
}
