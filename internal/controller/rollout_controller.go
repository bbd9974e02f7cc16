package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// MaxAttempts bounds the retries of one per-cluster step before the cluster fails.
const MaxAttempts = 5

// ErrCrash is returned when a test's CrashAt hook stops the reconciler at a step.
var ErrCrash = errors.New("crash injected")

// RolloutReconciler drives Rollouts: waves across member clusters, a snapshot before every
// change, staged server-side apply, health gates, and rollback as desired state.
type RolloutReconciler struct {
	client.Client
	// APIReader reads Secrets (member kubeconfigs, stored manifests, snapshots) uncached.
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Now is the clock.
	Now func() time.Time
	// GatePoll is how often an unhealthy cluster is re-checked (default 2s).
	GatePoll time.Duration
	// CrashAt, when it returns true for a cluster and step, makes the reconciler stop right
	// after recording that the step started (tests of crash safety).
	CrashAt func(cluster, step string) bool
	// Members gives access to member clusters.
	Members *member.Cache
}

func (r *RolloutReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// +kubebuilder:rbac:groups=rewind.dev,resources=rollouts;rollouts/status;snapshots;snapshots/status;operatorreleases;memberclusters,verbs=get;list;watch;create;update;patch;delete

// Reconcile advances one Rollout.
func (r *RolloutReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ro := &v1alpha1.Rollout{}
	if err := r.Get(ctx, req.NamespacedName, ro); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &scope{r: r, ro: ro, base: ro.DeepCopy()}
	res, err := r.reconcile(ctx, s)
	if perr := s.patch(ctx); perr != nil && !errors.Is(err, ErrCrash) {
		err = errors.Join(err, perr)
	}
	if errors.Is(err, ErrCrash) {
		return ctrl.Result{}, err
	}
	return res, err
}

// scope carries one reconcile.
type scope struct {
	r    *RolloutReconciler
	ro   *v1alpha1.Rollout
	base *v1alpha1.Rollout
	rel  *v1alpha1.OperatorRelease
	objs []*unstructured.Unstructured
}

// patch writes the status if it changed.
func (s *scope) patch(ctx context.Context) error {
	s.ro.Status.ClustersDone = clustersDone(s.ro.Status.Clusters, s.isRollback())
	if equalStatus(s.base, s.ro) {
		return nil
	}
	if err := s.r.Status().Patch(ctx, s.ro, client.MergeFrom(s.base)); err != nil {
		return fmt.Errorf("patching Rollout status: %w", err)
	}
	s.base = s.ro.DeepCopy()
	return nil
}

// clustersDone counts the clusters that reached the revision's goal, as "N/M": Succeeded,
// or RolledBack in a rollback (a cluster RollbackFailed restored did not reach the goal).
func clustersDone(cs []v1alpha1.ClusterProgress, rollback bool) string {
	done := 0
	for _, c := range cs {
		if c.Phase == v1alpha1.ClusterSucceeded || (rollback && c.Phase == v1alpha1.ClusterRolledBack) {
			done++
		}
	}
	return fmt.Sprintf("%d/%d", done, len(cs))
}

func equalStatus(a, b *v1alpha1.Rollout) bool {
	return equality.Semantic.DeepEqual(a.Status, b.Status)
}

func (s *scope) cluster(name string) *v1alpha1.ClusterProgress {
	for i := range s.ro.Status.Clusters {
		if s.ro.Status.Clusters[i].Cluster == name {
			return &s.ro.Status.Clusters[i]
		}
	}
	return nil
}

func (s *scope) revision() *v1alpha1.Revision {
	h := s.ro.Status.History
	if len(h) == 0 {
		return nil
	}
	return &h[len(h)-1]
}

// isRollback says whether the revision is a rollback: its clusters return to snapshots taken
// under the release it rolls out. The restore of a failed cluster inside an upgrade (failure
// policy RollbackFailed) targets the previous release instead and does not count.
func (s *scope) isRollback() bool {
	for _, c := range s.ro.Status.Clusters {
		if c.Path == v1alpha1.PathRestore && !s.isFailedRestore(&c) {
			return true
		}
	}
	return false
}

func (r *RolloutReconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	ro := s.ro
	ro.Status.ObservedGeneration = ro.Generation
	if ro.Status.CurrentRelease != ro.Spec.Release {
		if err := r.startRevision(ctx, s); err != nil {
			return r.stall(s, err)
		}
	}
	rel, objs, err := release.Load(ctx, r.APIReader, ro.Namespace, ro.Spec.Release)
	if err != nil {
		return r.stall(s, err)
	}
	s.rel, s.objs = rel, objs
	if ro.Spec.Paused {
		r.setPhase(s, v1alpha1.RolloutPaused, "Paused", "spec.paused is true: no new step starts (rewind rollout resume)")
		return ctrl.Result{}, nil
	}
	switch ro.Status.Phase {
	case v1alpha1.RolloutSucceeded, v1alpha1.RolloutRolledBack, v1alpha1.RolloutFailed:
		return ctrl.Result{}, nil
	}
	if s.restoringFailed() {
		return r.restoreFailedClusters(ctx, s)
	}
	rollback := s.isRollback()
	d := Decide(&ro.Spec, &ro.Status, rollback)
	switch {
	case d.Failed != "":
		return r.onFailure(ctx, s, d.Failed)
	case d.AllDone:
		r.finish(s, rollback)
		return ctrl.Result{}, nil
	case d.NeedsApproval:
		w := ro.Spec.Waves[ro.Status.CurrentWave]
		r.setPhase(s, v1alpha1.RolloutWaitingForApproval, v1alpha1.ReasonAwaitingApproval,
			fmt.Sprintf("wave %q waits for approval: rewind rollout approve %s %s", w.Name, ro.Name, w.Name))
		return ctrl.Result{}, nil
	case d.WaveDone:
		return r.bakeOrNextWave(ctx, s, rollback)
	}
	phase := v1alpha1.RolloutProgressing
	if rollback {
		phase = v1alpha1.RolloutRollingBack
	}
	r.setPhase(s, phase, v1alpha1.ReasonProgressing, fmt.Sprintf("wave %d of %d: rolling out %s", ro.Status.CurrentWave+1, len(ro.Spec.Waves), ro.Spec.Release))
	for _, name := range d.Start {
		c := s.cluster(name)
		c.Phase = v1alpha1.ClusterUpgrading
		if c.Path == v1alpha1.PathRestore {
			c.Phase = v1alpha1.ClusterRollingBack
		}
		c.Step = firstStep(c.Path)
		now := metav1.NewTime(r.now())
		c.StartedAt, c.StepStartedAt, c.Attempt, c.NextAttemptAt = &now, &now, 0, nil
		r.event(s, "Normal", "ClusterStarted", "%s: %s %s -> %s", name, c.Path, dash(c.FromRelease), c.ToRelease)
		d.Advance = append(d.Advance, name)
	}
	var requeue time.Duration
	for _, name := range d.Advance {
		after, err := r.advance(ctx, s, name)
		if err != nil {
			return ctrl.Result{}, err
		}
		if after > 0 && (requeue == 0 || after < requeue) {
			requeue = after
		}
	}
	if requeue == 0 {
		requeue = 10 * time.Millisecond
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func dash(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// startRevision begins rolling out spec.release: history entry, the clusters of every wave,
// and each cluster's path (upgrade, restore to the snapshot taken under the release, or none).
func (r *RolloutReconciler) startRevision(ctx context.Context, s *scope) error {
	ro := s.ro
	prevRelease := ro.Status.CurrentRelease
	prevClusters := ro.Status.Clusters
	now := metav1.NewTime(r.now())
	if rev := s.revision(); rev != nil && rev.FinishedAt == nil {
		rev.FinishedAt = &now
		rev.Outcome = "Superseded"
		if reason := ro.Annotations[v1alpha1.AnnotationRollbackReason]; reason != "" {
			rev.Outcome, rev.Reason = "RolledBack", reason
		}
	}
	clusters, err := r.targets(ctx, ro)
	if err != nil {
		return err
	}
	ro.Status.PreviousRelease = prevRelease
	ro.Status.CurrentRelease = ro.Spec.Release
	ro.Status.CurrentWave = 0
	ro.Status.BakeStartedAt = nil
	ro.Status.Revision++
	ro.Status.Phase = v1alpha1.RolloutProgressing
	meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionStalled)
	ro.Status.History = append(ro.Status.History, v1alpha1.Revision{Release: ro.Spec.Release, StartedAt: &now, Outcome: "InProgress", Snapshots: map[string]string{}})
	if len(ro.Status.History) > 20 {
		ro.Status.History = ro.Status.History[len(ro.Status.History)-20:]
	}
	var out []v1alpha1.ClusterProgress
	for _, tc := range clusters {
		c := v1alpha1.ClusterProgress{Cluster: tc.name, Wave: int32(tc.wave), Phase: v1alpha1.ClusterPending, ToRelease: ro.Spec.Release, Path: v1alpha1.PathUpgrade, FromRelease: prevRelease}
		// A cluster the previous revision never started, or restored after its failure
		// (RollbackFailed), still runs (or runs again) the release before it.
		for _, p := range prevClusters {
			if p.Cluster == tc.name && p.Phase == v1alpha1.ClusterPending {
				c.FromRelease = p.FromRelease
			}
			if p.Cluster == tc.name && p.Phase == v1alpha1.ClusterRolledBack {
				c.FromRelease = p.ToRelease
			}
		}
		// Going back: a cluster the previous revision changed returns to the snapshot taken
		// under the desired release before that change.
		for _, p := range prevClusters {
			if p.Cluster == tc.name && p.Snapshot != "" && p.FromRelease == ro.Spec.Release && changed(p) {
				c.Path, c.Snapshot = v1alpha1.PathRestore, p.Snapshot
			}
		}
		// Or further back (v3 -> v1): the snapshot taken when the desired release was last installed.
		if c.Path == v1alpha1.PathUpgrade {
			if snap := r.snapshotUnder(ctx, ro, tc.name, ro.Spec.Release); snap != "" && prevRelease != "" {
				c.Path, c.Snapshot = v1alpha1.PathRestore, snap
			}
		}
		out = append(out, c)
	}
	// Going back: clusters the rolled-back revision never changed need nothing (and are not
	// even contacted, so a lost cluster cannot block the rollback of the others).
	rollingBack := false
	for _, c := range out {
		rollingBack = rollingBack || c.Path == v1alpha1.PathRestore
	}
	for _, p := range prevClusters {
		rollingBack = rollingBack || (p.FromRelease == ro.Spec.Release && prevRelease != "")
	}
	if rollingBack {
		for i := range out {
			c := &out[i]
			if c.Path != v1alpha1.PathUpgrade {
				continue
			}
			for _, p := range prevClusters {
				if p.Cluster == c.Cluster && p.FromRelease == ro.Spec.Release && !changed(p) {
					c.Path, c.Phase, c.Step, c.FinishedAt = v1alpha1.PathNone, v1alpha1.ClusterSucceeded, StepDone, &now
					c.Message = fmt.Sprintf("not changed by %s: nothing to roll back", prevRelease)
				}
			}
		}
	}
	ro.Status.Clusters = out
	r.event(s, "Normal", "RevisionStarted", "rolling out %s (revision %d, from %s)", ro.Spec.Release, ro.Status.Revision, dash(prevRelease))
	return nil
}

// snapshotUnder finds the newest snapshot of a cluster taken (by this rollout) while release
// was installed.
func (r *RolloutReconciler) snapshotUnder(ctx context.Context, ro *v1alpha1.Rollout, cluster, rel string) string {
	var list v1alpha1.SnapshotList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabels{"rewind.dev/cluster": cluster, "rewind.dev/operator": ro.Spec.Operator}); err != nil {
		return ""
	}
	best := ""
	var bestT time.Time
	for _, sn := range list.Items {
		if sn.Spec.Release != rel || sn.Spec.Rollout != ro.Namespace+"/"+ro.Name || !meta.IsStatusConditionTrue(sn.Status.Conditions, v1alpha1.ConditionReady) {
			continue
		}
		t := sn.CreationTimestamp.Time
		if sn.Status.CapturedAt != nil {
			t = sn.Status.CapturedAt.Time
		}
		if best == "" || t.After(bestT) {
			best, bestT = sn.Name, t
		}
	}
	return best
}

type targetCluster struct {
	name string
	wave int
}

// targets resolves every wave's clusters; a cluster belongs to the first wave that selects it.
func (r *RolloutReconciler) targets(ctx context.Context, ro *v1alpha1.Rollout) ([]targetCluster, error) {
	var list v1alpha1.MemberClusterList
	if err := r.List(ctx, &list); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []targetCluster
	for i, w := range ro.Spec.Waves {
		var names []string
		if len(w.Clusters) > 0 {
			for _, n := range w.Clusters {
				found := false
				for _, mc := range list.Items {
					found = found || mc.Name == n
				}
				if !found {
					return nil, fmt.Errorf("spec.waves[%d].clusters names %q, which is not a MemberCluster (register it with rewind clusters add)", i, n)
				}
				names = append(names, n)
			}
		} else {
			sel, err := metav1.LabelSelectorAsSelector(w.Selector)
			if err != nil {
				return nil, fmt.Errorf("spec.waves[%d].selector: %w", i, err)
			}
			for _, mc := range list.Items {
				if sel.Matches(labels.Set(mc.Labels)) {
					names = append(names, mc.Name)
				}
			}
		}
		slices.Sort(names)
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, targetCluster{name: n, wave: i})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no MemberCluster matches any wave of the rollout")
	}
	return out, nil
}

// stall records a problem only a person can fix.
func (r *RolloutReconciler) stall(s *scope, err error) (ctrl.Result, error) {
	meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonReleaseNotFound, Message: err.Error(), ObservedGeneration: s.ro.Generation})
	meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonReleaseNotFound, Message: err.Error(), ObservedGeneration: s.ro.Generation})
	return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
}

func (r *RolloutReconciler) setPhase(s *scope, phase, reason, msg string) {
	if s.ro.Status.Phase != phase {
		r.event(s, "Normal", "Phase"+phase, "%s", msg)
	}
	s.ro.Status.Phase = phase
	progressing := metav1.ConditionTrue
	if phase == v1alpha1.RolloutPaused || phase == v1alpha1.RolloutWaitingForApproval {
		progressing = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: progressing, Reason: reason, Message: msg, ObservedGeneration: s.ro.Generation})
	meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: s.ro.Generation})
}

func (r *RolloutReconciler) event(s *scope, typ, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(s.ro, nil, typ, reason, "Reconcile", format, args...)
	}
	clusterPhaseTransitions.WithLabelValues(reason).Inc()
}

// bakeOrNextWave waits the wave's bake time, re-checking health, then moves to the next wave.
func (r *RolloutReconciler) bakeOrNextWave(ctx context.Context, s *scope, rollback bool) (ctrl.Result, error) {
	ro := s.ro
	order := waveOrder(len(ro.Spec.Waves), rollback)
	w := ro.Spec.Waves[order[ro.Status.CurrentWave]]
	if !rollback && w.BakeTime != nil && w.BakeTime.Duration > 0 {
		now := r.now()
		if ro.Status.BakeStartedAt == nil {
			t := metav1.NewTime(now)
			ro.Status.BakeStartedAt = &t
		}
		// Health is re-checked during the bake.
		for _, c := range ro.Status.Clusters {
			if int(c.Wave) != order[ro.Status.CurrentWave] || c.Phase != v1alpha1.ClusterSucceeded || c.Path == v1alpha1.PathNone {
				continue
			}
			res, err := r.checkHealth(ctx, s, c.Cluster)
			if err == nil && !res.Healthy() {
				cp := s.cluster(c.Cluster)
				cp.Phase, cp.Step, cp.Message = v1alpha1.ClusterFailed, StepHealthGate, "health lost during bake: "+res.Summary()
				return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
			}
		}
		if left := ro.Status.BakeStartedAt.Add(w.BakeTime.Duration).Sub(now); left > 0 {
			r.setPhase(s, v1alpha1.RolloutBaking, "Baking", fmt.Sprintf("wave %q baking, %s left", w.Name, left.Round(time.Second)))
			return ctrl.Result{RequeueAfter: min(left, 2*time.Second)}, nil
		}
	}
	ro.Status.BakeStartedAt = nil
	ro.Status.CurrentWave++
	return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
}

// finish closes the revision.
func (r *RolloutReconciler) finish(s *scope, rollback bool) {
	ro := s.ro
	now := metav1.NewTime(r.now())
	rev := s.revision()
	if rev != nil && rev.FinishedAt == nil {
		rev.FinishedAt = &now
		rev.Outcome = "Succeeded"
		for _, c := range ro.Status.Clusters {
			if c.Snapshot != "" {
				recordSnapshot(rev, c.Cluster, c.Snapshot)
			}
		}
		if rev.StartedAt != nil {
			rolloutDuration.Observe(now.Sub(rev.StartedAt.Time).Seconds())
		}
	}
	if rollback {
		reason := ro.Annotations[v1alpha1.AnnotationRollbackReason]
		condReason, msg := v1alpha1.ReasonManualRollback, fmt.Sprintf("rolled back to %s", ro.Spec.Release)
		if reason != "" {
			condReason, msg = v1alpha1.ReasonAutomaticRollback, fmt.Sprintf("rolled back to %s automatically: %s", ro.Spec.Release, reason)
		}
		ro.Status.Phase = v1alpha1.RolloutRolledBack
		meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionRolledBack, Status: metav1.ConditionTrue, Reason: condReason, Message: msg, ObservedGeneration: ro.Generation})
		rollbacksTotal.WithLabelValues(condReason).Inc()
		r.event(s, "Warning", "RolledBack", "%s", msg)
	} else {
		ro.Status.Phase = v1alpha1.RolloutSucceeded
		meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionRolledBack)
		r.event(s, "Normal", "Succeeded", "%s is installed on every cluster", ro.Spec.Release)
	}
	msg := fmt.Sprintf("%s is installed on all %d clusters", ro.Spec.Release, len(ro.Status.Clusters))
	meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSucceeded, Message: msg, ObservedGeneration: ro.Generation})
	meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSucceeded, Message: msg, ObservedGeneration: ro.Generation})
	meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionStalled)
}

// onFailure applies the failure policy once a cluster failed. No later wave starts.
func (r *RolloutReconciler) onFailure(ctx context.Context, s *scope, failed string) (ctrl.Result, error) {
	ro := s.ro
	c := s.cluster(failed)
	reason := fmt.Sprintf("cluster %s failed at %s: %s", failed, c.Step, c.Message)
	rev := s.revision()
	now := metav1.NewTime(r.now())
	policy := ro.Spec.FailurePolicy
	if policy == "" {
		policy = v1alpha1.FailurePolicyRollbackAll
	}
	if s.isRollback() || (policy != v1alpha1.FailurePolicyPause && ro.Status.PreviousRelease == "") {
		policy = v1alpha1.FailurePolicyPause // nothing to roll back to, or the rollback itself failed
	}
	switch policy {
	case v1alpha1.FailurePolicyRollbackAll:
		// Rollback is a desired state: set spec.release back and say why.
		if rev != nil {
			rev.FinishedAt, rev.Outcome, rev.Reason = &now, "RolledBack", reason
			for _, cp := range ro.Status.Clusters {
				if cp.Snapshot != "" {
					recordSnapshot(rev, cp.Cluster, cp.Snapshot)
				}
			}
		}
		patch := client.MergeFrom(ro.DeepCopy())
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		ro.Annotations[v1alpha1.AnnotationRollbackReason] = reason
		ro.Spec.Release = ro.Status.PreviousRelease
		status := ro.Status.DeepCopy()
		if err := r.Patch(ctx, ro, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing the automatic rollback to spec.release: %w", err)
		}
		ro.Status = *status
		r.event(s, "Warning", "AutomaticRollback", "%s; rolling every changed cluster back to %s", reason, ro.Spec.Release)
		r.setPhase(s, v1alpha1.RolloutRollingBack, v1alpha1.ReasonAutomaticRollback, reason+"; rolling back to "+ro.Spec.Release)
		return ctrl.Result{RequeueAfter: 10 * time.Millisecond}, nil
	case v1alpha1.FailurePolicyRollbackFailed:
		if rev != nil && rev.Reason == "" {
			rev.Reason = reason
		}
		return r.restoreFailedClusters(ctx, s)
	}
	return r.stopFailed(s, policy, failureReason(c), reason)
}

// failureReason is the condition reason for a failed cluster.
func failureReason(c *v1alpha1.ClusterProgress) string {
	switch {
	case c.Attempt >= MaxAttempts:
		return v1alpha1.ReasonRetriesExhausted
	case c.Step == StepHealthGate:
		return v1alpha1.ReasonHealthGateFailed
	case c.Step == StepPrecheck:
		return v1alpha1.ReasonPrecheckFailed
	}
	return v1alpha1.ReasonStepFailed
}

// isFailedRestore says whether a cluster is restored by the RollbackFailed policy: a restore
// path inside an upgrade revision, back to the release before it.
func (s *scope) isFailedRestore(c *v1alpha1.ClusterProgress) bool {
	return c.Path == v1alpha1.PathRestore && c.ToRelease != s.ro.Status.CurrentRelease
}

// restoringFailed says whether the RollbackFailed policy is at work in this revision.
func (s *scope) restoringFailed() bool {
	for i := range s.ro.Status.Clusters {
		if s.isFailedRestore(&s.ro.Status.Clusters[i]) {
			return true
		}
	}
	return false
}

// restoreFailedClusters carries out the RollbackFailed policy. No cluster starts any more;
// clusters already in flight finish their upgrade; every cluster that failed after changing
// anything goes back to its pre-change snapshot and the release before. Then the rollout
// stops as Failed, the clusters that passed keeping the new release.
func (r *RolloutReconciler) restoreFailedClusters(ctx context.Context, s *scope) (ctrl.Result, error) {
	ro := s.ro
	now := metav1.NewTime(r.now())
	for i := range ro.Status.Clusters {
		c := &ro.Status.Clusters[i]
		if c.Phase != v1alpha1.ClusterFailed || c.Path != v1alpha1.PathUpgrade || c.Snapshot == "" || !changed(*c) {
			continue
		}
		why := fmt.Sprintf("cluster %s failed at %s: %s", c.Cluster, c.Step, c.Message)
		c.Path, c.Phase, c.Step, c.RestoreSteps = v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, StepRestore, nil
		c.FromRelease, c.ToRelease = ro.Status.CurrentRelease, ro.Status.PreviousRelease
		c.StepStartedAt, c.Attempt, c.NextAttemptAt, c.FinishedAt = &now, 0, nil, nil
		c.Message = why + "; restoring it to " + c.ToRelease
		r.event(s, "Warning", "ClusterRollback", "%s", c.Message)
	}
	var moving, restored, failed []string
	for _, c := range ro.Status.Clusters {
		switch {
		case active(c.Phase):
			moving = append(moving, c.Cluster)
		case s.isFailedRestore(&c) && c.Phase == v1alpha1.ClusterRolledBack:
			restored = append(restored, c.Cluster)
		case c.Phase == v1alpha1.ClusterFailed:
			failed = append(failed, c.Cluster)
		}
	}
	why := ""
	if rev := s.revision(); rev != nil && rev.Reason != "" {
		why = rev.Reason + "; "
	}
	if len(moving) > 0 {
		r.setPhase(s, v1alpha1.RolloutRollingBack, v1alpha1.ReasonProgressing,
			fmt.Sprintf("%sfailure policy RollbackFailed: finishing %s", why, strings.Join(moving, ", ")))
		upgrade, upgradeObjs := s.rel, s.objs
		var requeue time.Duration
		for _, name := range moving {
			c := s.cluster(name)
			s.rel, s.objs = upgrade, upgradeObjs
			if s.isFailedRestore(c) {
				// The steps after the restore apply and record the release it goes back to.
				rel, objs, err := release.Load(ctx, r.APIReader, ro.Namespace, c.ToRelease)
				if err != nil {
					return r.stall(s, err)
				}
				s.rel, s.objs = rel, objs
			}
			after, err := r.advance(ctx, s, name)
			if err != nil {
				return ctrl.Result{}, err
			}
			if requeue == 0 || (after > 0 && after < requeue) {
				requeue = after
			}
		}
		s.rel, s.objs = upgrade, upgradeObjs
		return ctrl.Result{RequeueAfter: max(requeue, 10*time.Millisecond)}, nil
	}
	parts := []string{}
	if len(restored) > 0 {
		parts = append(parts, fmt.Sprintf("restored %s to %s", strings.Join(restored, ", "), ro.Status.PreviousRelease))
	}
	// A failed restore outranks the rest; with nothing restored, the first failure says why.
	condReason, failedRestore := v1alpha1.ReasonFailedClusterRestored, false
	for _, name := range failed {
		c := s.cluster(name)
		what := "cluster"
		if s.isFailedRestore(c) {
			what = "the restore of cluster"
		}
		parts = append(parts, fmt.Sprintf("%s %s failed at %s: %s", what, name, c.Step, c.Message))
		if s.isFailedRestore(c) && !failedRestore {
			condReason, failedRestore = failureReason(c), true
		} else if len(restored) == 0 && condReason == v1alpha1.ReasonFailedClusterRestored {
			condReason = failureReason(c)
		}
	}
	return r.stopFailed(s, v1alpha1.FailurePolicyRollbackFailed, condReason, why+strings.Join(parts, "; "))
}

// stopFailed ends a failed revision: the rollout stays where it is, Stalled, for a person.
func (r *RolloutReconciler) stopFailed(s *scope, policy, condReason, reason string) (ctrl.Result, error) {
	ro := s.ro
	now := metav1.NewTime(r.now())
	ro.Status.Phase = v1alpha1.RolloutFailed
	if rev := s.revision(); rev != nil && rev.FinishedAt == nil {
		rev.FinishedAt, rev.Outcome, rev.Reason = &now, "Failed", reason
	}
	meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: condReason, Message: reason, ObservedGeneration: ro.Generation})
	meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: condReason, Message: reason, ObservedGeneration: ro.Generation})
	meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionProgressing, Status: metav1.ConditionFalse, Reason: condReason, Message: reason, ObservedGeneration: ro.Generation})
	r.event(s, "Warning", "Failed", "%s (failure policy %s)", reason, policy)
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler.
func (r *RolloutReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Rollout{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Complete(r)
}
