// Package notify computes a Rollout's notifications from its status and its targets' status,
// and delivers them to webhooks, CloudEvents sinks and Slack. Nothing is captured in memory:
// the events are recomputed from the API objects on every reconcile, and a NotificationRecord
// says which were already sent.
package notify

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// stepHealthGate is the per-cluster step of the health gate (target.StepHealthGate; not
// imported, to keep this package free of the controller's).
const stepHealthGate = "HealthGate"

// Key is a notification's idempotency key: the Rollout's UID, the revision, the event and
// its subject ("cluster=NAME", "wave=NAME", "reason=REASON" or "-").
func Key(uid string, revision int32, event v1alpha1.NotificationEvent, subject string) string {
	if subject == "" {
		subject = "-"
	}
	return fmt.Sprintf("%s/%d/%s/%s", uid, revision, event, subject)
}

// Compute returns the notifications a Rollout's state shows, oldest first, for revisions from
// from on. It is pure: the same objects always give the same notifications with the same keys
// (observedAt aside, which is now). targets are the Rollout's RolloutTargets.
func Compute(ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget, from int32, now metav1.Time) []v1alpha1.Notification {
	uid := string(ro.UID)
	var out []v1alpha1.Notification
	seen := map[string]bool{}
	add := func(n v1alpha1.Notification, subject string) {
		n.Key = Key(uid, n.Revision, n.Event, subject)
		if seen[n.Key] {
			return
		}
		seen[n.Key] = true
		n.Message = truncate(n.Message, 1024)
		n.ObservedAt = now
		out = append(out, n)
	}
	cur := ro.Status.Revision
	for _, h := range ro.Status.History {
		if h.Revision < from || h.Revision == 0 {
			continue
		}
		started, finished := v1alpha1.EventRevisionStarted, v1alpha1.EventRevisionFinished
		if h.Automatic {
			started, finished = v1alpha1.EventRollbackStarted, v1alpha1.EventRollbackFinished
		}
		add(v1alpha1.Notification{Event: started, Revision: h.Revision, Release: h.Release, Message: h.Reason}, "")
		if h.Revision == cur && !h.Automatic {
			waveEvents(ro, targets, h, add)
		}
		// Gate failures: from the live targets while they still show them (with the
		// measurements), then from the history entry that keeps them once the revision ended.
		if h.Revision == cur {
			for _, t := range targets {
				if t.Spec.Revision == cur && t.Status.Revision == cur && t.Status.Phase == v1alpha1.ClusterFailed && t.Status.Step == stepHealthGate {
					add(v1alpha1.Notification{Event: v1alpha1.EventGateFailed, Revision: cur, Release: h.Release, Cluster: t.Spec.Cluster,
						Message: t.Status.Message, Measurements: failedMeasurements(t.Status.Metrics, cur)}, "cluster="+t.Spec.Cluster)
				}
			}
		}
		for _, f := range h.Failures {
			if f.Step == stepHealthGate {
				add(v1alpha1.Notification{Event: v1alpha1.EventGateFailed, Revision: h.Revision, Release: h.Release, Cluster: f.Cluster,
					Message: f.Message}, "cluster="+f.Cluster)
			}
		}
		if h.FinishedAt != nil {
			add(v1alpha1.Notification{Event: finished, Revision: h.Revision, Release: h.Release, Outcome: h.Outcome, Message: h.Reason}, "")
		}
	}
	if cur >= from && cur > 0 {
		if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
			add(v1alpha1.Notification{Event: v1alpha1.EventStalled, Revision: cur, Release: ro.Status.CurrentRelease, Outcome: c.Reason,
				Message: c.Message}, "reason="+c.Reason)
		}
	}
	return out
}

// waveEvents adds the wave events of the current revision (an upgrade: a rollback runs no
// waves of its own) and the approvals it waits for.
func waveEvents(ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget, h v1alpha1.Revision, add func(v1alpha1.Notification, string)) {
	cur := h.Revision
	var current []v1alpha1.RolloutTarget
	for _, t := range targets {
		if t.Spec.Revision != cur {
			continue
		}
		if t.Spec.Path == v1alpha1.PathRestore && t.Spec.ToRelease == h.Release {
			return // a person's rollback: every cluster at once, no waves
		}
		current = append(current, t)
	}
	for w, wave := range ro.Spec.Waves {
		wi := int32(w)
		opened := ro.Status.CurrentWave > wi || slices.ContainsFunc(current, func(t v1alpha1.RolloutTarget) bool {
			return t.Spec.Wave == wi && t.Spec.Path != v1alpha1.PathNone && t.Status.Revision == cur &&
				t.Status.Phase != "" && t.Status.Phase != v1alpha1.ClusterPending
		})
		if ro.Status.Phase == v1alpha1.RolloutWaitingForApproval && ro.Status.CurrentWave == wi {
			add(v1alpha1.Notification{Event: v1alpha1.EventApprovalNeeded, Revision: cur, Release: h.Release, Wave: wave.Name,
				Message: fmt.Sprintf("wave %q waits for approval: rewind rollout approve %s %s", wave.Name, ro.Name, wave.Name)}, "wave="+wave.Name)
		}
		if opened {
			add(v1alpha1.Notification{Event: v1alpha1.EventWaveStarted, Revision: cur, Release: h.Release, Wave: wave.Name}, "wave="+wave.Name)
		}
		for _, t := range current {
			if t.Spec.Wave == wi && t.Status.Revision == cur && t.Status.WaitingFor == v1alpha1.ReasonAwaitingApproval {
				add(v1alpha1.Notification{Event: v1alpha1.EventApprovalNeeded, Revision: cur, Release: h.Release, Wave: wave.Name,
					Cluster: t.Spec.Cluster, Message: t.Status.Message}, "cluster="+t.Spec.Cluster)
			}
		}
		if ro.Status.CurrentWave > wi {
			add(v1alpha1.Notification{Event: v1alpha1.EventWaveFinished, Revision: cur, Release: h.Release, Wave: wave.Name}, "wave="+wave.Name)
		}
	}
}

// failedMeasurements lists a revision's metrics that did not pass, with their last
// measurement.
func failedMeasurements(results []v1alpha1.MetricResult, revision int32) []string {
	var out []string
	for _, r := range results {
		if r.Revision != revision || r.Phase == v1alpha1.MetricSuccessful || len(out) == 4 {
			continue
		}
		s := r.Name + ": " + r.Phase
		if n := len(r.Measurements); n > 0 {
			m := r.Measurements[n-1]
			if m.Value != "" {
				s += " " + m.Value
			}
			if m.Message != "" {
				s += " (" + truncate(m.Message, 200) + ")"
			}
		}
		out = append(out, s)
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// Selected says whether a policy sends this event.
func Selected(p *v1alpha1.NotificationPolicy, e v1alpha1.NotificationEvent) bool {
	return slices.Contains(p.Spec.Events, e)
}
