package rollout

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/metrics"
)

// maxFailures bounds the failed clusters listed in status (the targets hold them all).
const maxFailures = 10

// aggregate counts the revision's targets by phase, lists the failed ones and sets
// clustersDone: the status stays bounded however many clusters there are.
func (s *scope) aggregate() {
	ro := s.ro
	counts := v1alpha1.TargetCounts{}
	var failures []v1alpha1.ClusterFailure
	rollback := s.isRollback()
	done := 0
	for _, t := range s.current() {
		counts.Total++
		switch phaseOf(t) {
		case v1alpha1.ClusterSucceeded:
			counts.Succeeded++
			done++
		case v1alpha1.ClusterRolledBack:
			counts.RolledBack++
			if rollback && !s.isFailedRestore(t) {
				done++
			}
		case v1alpha1.ClusterFailed:
			counts.Failed++
			if len(failures) < maxFailures {
				failures = append(failures, v1alpha1.ClusterFailure{Cluster: t.Spec.Cluster, Step: t.Status.Step, Path: t.Spec.Path, Message: truncate(t.Status.Message, 512)})
			}
		case v1alpha1.ClusterUpgrading, v1alpha1.ClusterRollingBack:
			counts.InProgress++
		default:
			counts.Pending++
		}
	}
	ro.Status.Targets = counts
	ro.Status.Failures = failures
	ro.Status.ClustersDone = fmt.Sprintf("%d/%d", done, counts.Total)
	s.setWaiting()
}

// maxWaiting bounds the waiting clusters the Waiting condition names.
const maxWaiting = 10

// setWaiting says, in the Waiting condition, which clusters wait on something outside the
// release (an unreachable member, an unavailable snapshot store) and why; it is removed when
// none does.
func (s *scope) setWaiting() {
	var parts []string
	reason, n := "", 0
	for _, t := range s.current() {
		// A plan refused as stale is planned again by this controller: nobody waits on it.
		if t.Status.WaitingFor == "" || t.Status.WaitingFor == v1alpha1.ReasonStalePlan || target.Terminal(phaseOf(t)) {
			continue
		}
		n++
		if reason == "" {
			reason = t.Status.WaitingFor
		}
		if len(parts) < maxWaiting {
			parts = append(parts, fmt.Sprintf("%s waits at %s: %s", t.Spec.Cluster, t.Status.Step, truncate(t.Status.Message, 300)))
		}
	}
	if n == 0 {
		meta.RemoveStatusCondition(&s.ro.Status.Conditions, v1alpha1.ConditionWaiting)
		return
	}
	msg := strings.Join(parts, "; ")
	if n > len(parts) {
		msg += fmt.Sprintf("; and %d more clusters", n-len(parts))
	}
	s.condition(v1alpha1.ConditionWaiting, metav1.ConditionTrue, reason, fmt.Sprintf("%d clusters wait without failing: %s", n, msg))
}

// setPhase records a phase in progress.
func (s *scope) setPhase(phase, reason, msg string) {
	ro := s.ro
	if ro.Status.Phase != phase {
		s.event("Normal", "Phase"+phase, "%s", msg)
	}
	ro.Status.Phase = phase
	progressing := metav1.ConditionTrue
	if phase == v1alpha1.RolloutPaused || phase == v1alpha1.RolloutWaitingForApproval {
		progressing = metav1.ConditionFalse
	}
	s.condition(v1alpha1.ConditionProgressing, progressing, reason, msg)
	s.condition(v1alpha1.ConditionReconciling, progressing, reason, msg)
	s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
}

// truncate cuts s to at most n bytes (the status stays bounded; the targets keep it all).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func (s *scope) condition(typ string, status metav1.ConditionStatus, reason, msg string) {
	msg = truncate(msg, 4096)
	meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: s.ro.Generation})
}

// stall records a problem only a person can fix.
func (r *Reconciler) stall(s *scope, reason, msg string) {
	s.stalled = true
	s.condition(v1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
	s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
	s.condition(v1alpha1.ConditionReconciling, metav1.ConditionFalse, reason, msg)
}

// clearStall drops a Stalled condition once the rollout makes progress again: only final
// outcomes (Failed, an automatic rollback) keep it.
func (s *scope) clearStall() {
	if s.stalled {
		return
	}
	switch s.ro.Status.Phase {
	case v1alpha1.RolloutFailed:
		return
	case v1alpha1.RolloutRolledBack:
		if s.ro.Status.FailedRelease != "" {
			return
		}
	}
	meta.RemoveStatusCondition(&s.ro.Status.Conditions, v1alpha1.ConditionStalled)
}

// bakeOrNextGroup waits the wave's bake time, its clusters re-checking their health
// (spec.healthyUntil), then moves to the next group: next says the caller decides that group
// now. The bake has passed only when every baked cluster checked its health at or after the
// bake's end: the time alone says nothing of the health between a cluster's last check (up to
// one poll interval before) and the end.
func (r *Reconciler) bakeOrNextGroup(ctx context.Context, s *scope, rollback bool) (res ctrl.Result, next bool, err error) {
	ro := s.ro
	groups := Groups(&ro.Spec, rollback)
	group := groups[ro.Status.CurrentWave]
	s.observeWave(group)
	if !rollback {
		w := ro.Spec.Waves[group[0]]
		if w.BakeTime != nil && w.BakeTime.Duration > 0 {
			now := r.now()
			if ro.Status.BakeStartedAt == nil {
				// Rounded up to the second, as status times are stored: the bake the targets
				// are given (and the one a later reconcile reads back) is never shorter, and
				// never ends later than the one this reconcile checks against.
				t := metav1.NewTime(now.Truncate(time.Second).Add(time.Second))
				ro.Status.BakeStartedAt = &t
			}
			until := metav1.NewTime(ro.Status.BakeStartedAt.Add(w.BakeTime.Duration))
			var baking []string
			for _, c := range s.clusters() {
				if !c.Stale && c.Wave == group[0] && c.Bakes && c.Phase == v1alpha1.ClusterSucceeded {
					baking = append(baking, c.Name)
				}
			}
			err := eachTarget(ctx, baking, func(ctx context.Context, cluster string) error {
				_, err := s.updateTarget(ctx, cluster, func(t *v1alpha1.RolloutTarget) { t.Spec.HealthyUntil = &until })
				return err
			})
			if err != nil {
				return ctrl.Result{}, false, err
			}
			if left := until.Sub(now); left > 0 {
				s.setPhase(v1alpha1.RolloutBaking, v1alpha1.ReasonBaking, fmt.Sprintf("wave %q baking, %s left", w.Name, left.Round(time.Second)))
				return ctrl.Result{RequeueAfter: left}, false, nil
			}
			if waiting := Unbaked(group, until.Time, s.clusters()); len(waiting) > 0 {
				// Each target writes its last check in its status, which wakes this reconciler.
				s.setPhase(v1alpha1.RolloutBaking, v1alpha1.ReasonBaking, fmt.Sprintf("wave %q baked; waiting for the health check at its end on %s",
					w.Name, strings.Join(waiting, ", ")))
				return ctrl.Result{}, false, nil
			}
		}
	}
	ro.Status.BakeStartedAt = nil
	ro.Status.CurrentWave++
	return ctrl.Result{}, true, nil
}

// observeWave records how long a group took, once.
func (s *scope) observeWave(group []int32) {
	if s.ro.Status.BakeStartedAt != nil {
		return
	}
	var first, last time.Time
	for _, t := range s.current() {
		if !containsWave(group, t.Spec.Wave) || t.Status.StartedAt == nil || t.Status.FinishedAt == nil {
			continue
		}
		if first.IsZero() || t.Status.StartedAt.Time.Before(first) {
			first = t.Status.StartedAt.Time
		}
		if t.Status.FinishedAt.Time.After(last) {
			last = t.Status.FinishedAt.Time
		}
	}
	if !first.IsZero() {
		name := "all"
		if len(group) == 1 {
			name = s.ro.Spec.Waves[group[0]].Name
		}
		s.afterWrite(func() {
			metrics.WaveDuration.WithLabelValues(s.ro.Namespace, s.ro.Name, name).Observe(last.Sub(first).Seconds())
		})
	}
}

func containsWave(group []int32, w int32) bool {
	for _, g := range group {
		if g == w {
			return true
		}
	}
	return false
}

// finish closes the revision. A rollback in which some clusters failed to restore ends as
// Failed, naming each one: the others were restored meanwhile.
func (r *Reconciler) finish(s *scope, rollback bool, failed []string) {
	ro := s.ro
	now := metav1.NewTime(r.now())
	if len(failed) > 0 {
		parts := make([]string, 0, len(failed))
		for _, name := range failed {
			t := s.targets[name]
			parts = append(parts, fmt.Sprintf("the restore of cluster %s failed at %s: %s", name, t.Status.Step, t.Status.Message))
		}
		restored := int(ro.Status.Targets.RolledBack)
		r.stopFailed(s, v1alpha1.ReasonRollbackFailed, fmt.Sprintf("rolling back to %s: %d clusters restored; %s", ro.Status.CurrentRelease, restored, strings.Join(parts, "; ")))
		return
	}
	if h := s.revision(); h != nil && h.FinishedAt == nil {
		h.FinishedAt, h.Outcome = &now, "Succeeded"
		s.observeDuration(h)
	}
	msg := fmt.Sprintf("%s is installed on all %d clusters", ro.Status.CurrentRelease, ro.Status.Targets.Total)
	switch {
	case ro.Status.FailedRelease != "":
		// An automatic rollback: spec.release still asks for the release that failed.
		ro.Status.Phase = v1alpha1.RolloutRolledBack
		why := fmt.Sprintf("%s failed and every changed cluster was rolled back to %s: %s. It is not attempted again until spec.release changes or a retry is asked for (rewind retry %s)",
			ro.Status.FailedRelease, ro.Status.CurrentRelease, ro.Status.FailureReason, ro.Name)
		s.condition(v1alpha1.ConditionRolledBack, metav1.ConditionTrue, v1alpha1.ReasonAutomaticRollback, why)
		s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonRolledBack, why)
		s.condition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonRolledBack, why)
		s.condition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonRolledBack, msg)
		s.condition(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonRolledBack, msg)
		s.event("Warning", "RolledBack", "%s", why)
		return
	case rollback:
		ro.Status.Phase = v1alpha1.RolloutRolledBack
		why := fmt.Sprintf("rolled back to %s", ro.Status.CurrentRelease)
		if h := s.revision(); h != nil && h.Reason != "" {
			why += ": " + h.Reason
		}
		s.condition(v1alpha1.ConditionRolledBack, metav1.ConditionTrue, v1alpha1.ReasonManualRollback, why)
		s.event("Normal", "RolledBack", "%s", why)
	default:
		ro.Status.Phase = v1alpha1.RolloutSucceeded
		meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionRolledBack)
		s.event("Normal", "Succeeded", "%s is installed on every cluster", ro.Status.CurrentRelease)
	}
	s.condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded, msg)
	s.condition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, msg)
	s.condition(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonSucceeded, msg)
	meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionStalled)
}

// failureReason is the condition reason for a failed target.
func failureReason(t *v1alpha1.RolloutTarget) string {
	switch {
	case t.Status.Attempt >= target.MaxAttempts:
		return v1alpha1.ReasonRetriesExhausted
	case t.Status.Step == target.StepHealthGate:
		return v1alpha1.ReasonHealthGateFailed
	case t.Status.Step == target.StepPrecheck:
		return v1alpha1.ReasonPrecheckFailed
	}
	return v1alpha1.ReasonStepFailed
}

// onFailure applies the failure policy once a cluster of an upgrade failed. No later wave
// starts.
func (r *Reconciler) onFailure(ctx context.Context, s *scope, failed []string) (ctrl.Result, error) {
	ro := s.ro
	first := s.targets[failed[0]]
	reason := fmt.Sprintf("cluster %s failed at %s: %s", first.Spec.Cluster, first.Status.Step, first.Status.Message)
	policy := ro.Spec.FailurePolicy
	if policy == "" {
		policy = v1alpha1.FailurePolicyRollbackAll
	}
	if ro.Status.PreviousRelease == "" && policy != v1alpha1.FailurePolicyPause {
		policy = v1alpha1.FailurePolicyPause // a first install: there is nothing to roll back to
	}
	switch policy {
	case v1alpha1.FailurePolicyRollbackAll:
		// Rollback is a desired state held in status: spec.release is left as it is (a GitOps
		// tool owns it), and every changed cluster returns to its snapshot.
		s.event("Warning", "AutomaticRollback", "%s; rolling every changed cluster back to %s", reason, ro.Status.PreviousRelease)
		if err := r.startRevision(ctx, s, ro.Status.PreviousRelease, reason); err != nil {
			return ctrl.Result{}, err
		}
		s.setPhase(v1alpha1.RolloutRollingBack, v1alpha1.ReasonAutomaticRollback, reason+"; rolling back to "+ro.Status.CurrentRelease)
		return ctrl.Result{}, nil
	case v1alpha1.FailurePolicyRollbackFailed:
		if h := s.revision(); h != nil && h.Reason == "" {
			h.Reason = reason
		}
		return r.restoreFailedClusters(ctx, s)
	}
	return ctrl.Result{}, r.stopFailed(s, failureReason(first), reason+" (failure policy Pause)")
}

// restoreFailedClusters carries out the RollbackFailed policy: no cluster starts any more;
// clusters in flight finish their upgrade; every failed cluster that changed anything goes back
// to its snapshot and the release before. Then the rollout stops as Failed, the clusters that
// passed keeping the new release.
func (r *Reconciler) restoreFailedClusters(ctx context.Context, s *scope) (ctrl.Result, error) {
	ro := s.ro
	for _, t := range s.current() {
		if phaseOf(t) != v1alpha1.ClusterFailed || t.Spec.Path != v1alpha1.PathUpgrade || t.Status.Snapshot == "" ||
			!target.Changed(t.Spec.Path, phaseOf(t), t.Status.Step) {
			continue
		}
		why := fmt.Sprintf("cluster %s failed at %s: %s", t.Spec.Cluster, t.Status.Step, t.Status.Message)
		snap := t.Status.Snapshot
		changed, err := s.updateTarget(ctx, t.Spec.Cluster, func(t *v1alpha1.RolloutTarget) {
			t.Spec.Path, t.Spec.FromRelease, t.Spec.ToRelease, t.Spec.Snapshot = v1alpha1.PathRestore, ro.Status.CurrentRelease, ro.Status.PreviousRelease, snap
			t.Spec.Start, t.Spec.Reason, t.Spec.HealthyUntil = true, why+"; restoring it to "+ro.Status.PreviousRelease, nil
		})
		if err != nil {
			return ctrl.Result{}, err
		}
		if !changed {
			// A view behind the API server still showed the cluster failed: its restore was
			// asked for already, and counted and told once.
			continue
		}
		metrics.Rollbacks.WithLabelValues(ro.Namespace, ro.Name, "FailedClusterRestore").Inc()
		s.eventNow("Warning", "ClusterRollback", "%s; restoring it to %s", why, ro.Status.PreviousRelease) // the target's write records it
	}
	s.aggregate()
	var moving, restored, failed []string
	for _, t := range s.current() {
		switch p := phaseOf(t); {
		case target.Active(p) || (t.Spec.Start && p == v1alpha1.ClusterPending):
			moving = append(moving, t.Spec.Cluster)
		case s.isFailedRestore(t) && p == v1alpha1.ClusterRolledBack:
			restored = append(restored, t.Spec.Cluster)
		case p == v1alpha1.ClusterFailed:
			failed = append(failed, t.Spec.Cluster)
		}
	}
	why := ""
	if h := s.revision(); h != nil && h.Reason != "" {
		why = h.Reason + "; "
	}
	if len(moving) > 0 {
		s.setPhase(v1alpha1.RolloutRollingBack, v1alpha1.ReasonProgressing,
			fmt.Sprintf("%sfailure policy RollbackFailed: finishing %s", why, strings.Join(moving, ", ")))
		return ctrl.Result{}, nil
	}
	var parts []string
	if len(restored) > 0 {
		parts = append(parts, fmt.Sprintf("restored %s to %s", strings.Join(restored, ", "), ro.Status.PreviousRelease))
	}
	// A failed restore outranks the rest; with nothing restored, the first failure says why.
	condReason, failedRestore := v1alpha1.ReasonFailedClusterRestored, false
	for _, name := range failed {
		t := s.targets[name]
		what := "cluster"
		if s.isFailedRestore(t) {
			what = "the restore of cluster"
		}
		parts = append(parts, fmt.Sprintf("%s %s failed at %s: %s", what, name, t.Status.Step, t.Status.Message))
		if s.isFailedRestore(t) && !failedRestore {
			condReason, failedRestore = failureReason(t), true
		} else if len(restored) == 0 && condReason == v1alpha1.ReasonFailedClusterRestored {
			condReason = failureReason(t)
		}
	}
	return ctrl.Result{}, r.stopFailed(s, condReason, why+strings.Join(parts, "; ")+" (failure policy RollbackFailed)")
}

// stopFailed ends a failed revision: the rollout stays where it is, Stalled, for a person.
func (r *Reconciler) stopFailed(s *scope, condReason, reason string) error {
	ro := s.ro
	now := metav1.NewTime(r.now())
	ro.Status.Phase = v1alpha1.RolloutFailed
	if h := s.revision(); h != nil && h.FinishedAt == nil {
		h.FinishedAt, h.Outcome, h.Reason = &now, "Failed", truncate(reason, 1024)
		h.Failures = historyFailures(ro.Status.Failures)
		s.observeDuration(h)
	}
	s.condition(v1alpha1.ConditionStalled, metav1.ConditionTrue, condReason, reason)
	s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, condReason, reason)
	s.condition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, condReason, reason)
	s.condition(v1alpha1.ConditionReconciling, metav1.ConditionFalse, condReason, reason)
	s.event("Warning", "Failed", "%s", reason)
	return nil
}
