package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/analysis"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/health"
	"github.com/rewind-dev/rewind/internal/metrics"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// historyLimit bounds the revisions kept in status.history.
const historyLimit = 20

// startRevision begins rolling out rel: everything that can be checked without a member is
// checked first (the release loads, the CEL checks and the metrics' queries and conditions
// compile, the waves resolve to clusters), so a mistake stops the rollout before any cluster
// changes. Then each cluster's path is planned, a new release is checked against the clusters
// it upgrades (spec.preflight), the targets are written, and the revision is recorded.
// automatic is the reason when the failure policy rolls back (spec.release is left as it is).
func (r *Reconciler) startRevision(ctx context.Context, s *scope, rel, automatic string) error {
	ro := s.ro
	relObjs, plans, revision, err := r.prepareRevision(ctx, s, rel)
	if err != nil {
		return err
	}
	// A new release is checked against every cluster it upgrades before any changes; the way
	// back (an automatic rollback, a person's, a restore) never is: it restores snapshots.
	if automatic == "" && !IsRollback(plans) {
		if err := r.runPreflight(ctx, s, rel, relObjs, plans); err != nil {
			return err
		}
	}
	if err := r.writeTargets(ctx, s, revision, plans, automatic); err != nil {
		return err
	}

	// The revision is on record only once its targets are.
	now := metav1.NewTime(r.now())
	if h := s.revision(); h != nil && h.FinishedAt == nil {
		h.FinishedAt, h.Outcome = &now, "Superseded"
		if automatic != "" {
			h.Outcome, h.Reason = "RolledBack", truncate(automatic, 1024)
			h.Failures = historyFailures(ro.Status.Failures)
		}
		s.observeDuration(h)
	}
	reason := ""
	if automatic != "" {
		ro.Status.FailedRelease, ro.Status.FailureReason = ro.Status.CurrentRelease, truncate(automatic, 1024)
		reason = automatic
		s.afterWrite(func() {
			metrics.Rollbacks.WithLabelValues(ro.Namespace, ro.Name, v1alpha1.ReasonAutomaticRollback).Inc()
		})
	} else if IsRollback(plans) {
		reason = s.manualRollback()
	}
	if rel != ro.Status.CurrentRelease {
		// A retry of the same release keeps the release before it: a failure policy rolls
		// back to it, and rewind rollback goes back to it.
		ro.Status.PreviousRelease = ro.Status.CurrentRelease
	}
	ro.Status.CurrentRelease = rel
	ro.Status.CurrentWave = 0
	ro.Status.BakeStartedAt = nil
	ro.Status.Revision = revision
	ro.Status.Phase = v1alpha1.RolloutProgressing
	ro.Status.Targets = v1alpha1.TargetCounts{Total: int32(len(plans))}
	ro.Status.Failures = nil
	meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	ro.Status.History = append(ro.Status.History, v1alpha1.Revision{Revision: revision, Release: rel, StartedAt: &now, Outcome: "InProgress",
		Reason: truncate(reason, 1024), Automatic: automatic != ""})
	if len(ro.Status.History) > historyLimit {
		ro.Status.History = ro.Status.History[len(ro.Status.History)-historyLimit:]
	}
	s.event("Normal", "RevisionStarted", "rolling out %s (revision %d, from %s)", rel, revision, dash(ro.Status.PreviousRelease))
	return nil
}

// manualRollback records a person's rollback (the rollbacks metric) and returns the reason
// they gave (rewind rollback --reason) when it is new: the revision's history records it once.
func (s *scope) manualRollback() string {
	ro := s.ro
	reason := ""
	if v := ro.Annotations[v1alpha1.AnnotationRollbackReason]; v != "" && v != ro.Status.LastRollbackReason {
		reason = v
	}
	ro.Status.LastRollbackReason = ro.Annotations[v1alpha1.AnnotationRollbackReason]
	s.afterWrite(func() { metrics.Rollbacks.WithLabelValues(ro.Namespace, ro.Name, v1alpha1.ReasonManualRollback).Inc() })
	return reason
}

// prepareRevision checks what can be checked without a member (the release loads, the CEL
// checks and metrics compile, the waves resolve) and plans each cluster's path for the next
// revision of rel: the release's objects, the plans and the revision's number.
func (r *Reconciler) prepareRevision(ctx context.Context, s *scope, rel string) ([]*unstructured.Unstructured, []TargetPlan, int32, error) {
	ro := s.ro
	relObj, relObjs, err := r.Releases.Load(ctx, r.Hub, ro.Namespace, rel)
	if err != nil {
		var notReady *release.NotReadyError
		switch {
		case apierrors.IsNotFound(err):
			field := "spec.release"
			if rel != ro.Spec.Release {
				field = "status.previousRelease" // the release an automatic rollback returns to
			}
			return nil, nil, 0, stallf(v1alpha1.ReasonReleaseNotFound, "%s: release %q does not exist in namespace %s: create it (rewind release create %s -n %s ...) or name another (list them with: kubectl get operatorreleases -n %s)",
				field, rel, ro.Namespace, rel, ro.Namespace, ro.Namespace)
		case errors.As(err, &notReady) && notReady.Stalled:
			// The release's controller could not fetch, verify or render it (it retries what
			// can clear up by itself); the release's Ready condition says what to fix.
			return nil, nil, 0, stallf(v1alpha1.ReasonReleaseNotReady, "%v", err)
		case errors.As(err, &notReady):
			// Being fetched and stored: wait, nothing changes; its status change wakes us.
			return nil, nil, 0, waitf(v1alpha1.ReasonReleaseNotReady, "%v", err)
		case apierrors.IsForbidden(err):
			return nil, nil, 0, stallf(v1alpha1.ReasonForbidden, "%v: the controller may not read releases in namespace %s; enable it with: rewind namespace enable %s", err, ro.Namespace, ro.Namespace)
		}
		return nil, nil, 0, err // transient: retried with backoff
	}
	if _, err := health.CompileCEL(ro.Spec.HealthGates.CEL); err != nil {
		return nil, nil, 0, stallf(v1alpha1.ReasonInvalidSpec, "%v", err)
	}
	if _, err := analysis.Compile(ro.Spec.HealthGates.Metrics); err != nil {
		return nil, nil, 0, stallf(v1alpha1.ReasonInvalidSpec, "%v", err)
	}
	clusters, err := r.resolve(ctx, ro)
	if err != nil {
		return nil, nil, 0, err
	}
	manifests, err := r.clusterManifests(ctx, ro, relObj, clusters)
	if err != nil {
		return nil, nil, 0, err
	}
	snaps, err := r.snapshots(ctx, ro)
	if err != nil {
		return nil, nil, 0, err
	}
	// Planned from the targets on the API server, not in the cache: a target whose spec of the
	// revision before has not reached the cache would be planned from an older one (a cluster
	// changed a moment ago taken for one left as it was, and not rolled back), and one not
	// in the cache yet would be created again.
	if err := s.loadTargets(ctx, r.Live); err != nil {
		return nil, nil, 0, err
	}
	revision := ro.Status.Revision + 1
	prev := map[string]Previous{}
	for name, t := range s.targets {
		if t.Spec.Revision == revision {
			continue // planned already (a start the controller did not finish)
		}
		prev[name] = previousOf(t)
	}
	plans := Plan(PlanInput{Rollout: ro.Name, Revision: revision, Release: rel, PrevRelease: ro.Status.CurrentRelease,
		Clusters: clusters, Previous: prev, Snapshots: snaps, Manifests: manifests})
	return relObjs, plans, revision, nil
}

// previousOf is what a target says its cluster last ran: its journal (status), which says
// what it changes and how far it got, even when the spec holds a newer revision its executor
// has not started (or refused: StalePlan). A journal an older controller started does not say
// what it changes: then the spec's plan, when the journal is of it. With no journal of its
// spec's plan, the spec's plan not started.
func previousOf(t *v1alpha1.RolloutTarget) Previous {
	st := &t.Status
	if st.Revision != 0 && st.ToRelease != "" {
		return Previous{Path: st.Path, Phase: st.Phase, Step: st.Step, FromRelease: st.FromRelease, ToRelease: st.ToRelease,
			FromManifests: st.FromManifests, Manifests: st.Manifests, Snapshot: st.Snapshot}
	}
	p := Previous{Path: t.Spec.Path, Phase: v1alpha1.ClusterPending, FromRelease: t.Spec.FromRelease, ToRelease: t.Spec.ToRelease,
		FromManifests: t.Spec.FromManifests, Manifests: t.Spec.Manifests, Snapshot: snapshotOf(t)}
	if st.Revision == t.Spec.Revision && st.Path == t.Spec.Path {
		p.Phase, p.Step = st.Phase, st.Step
	}
	return p
}

// basisOf is what a plan made from t's journal records of it (spec.basis): its executor
// refuses the plan when the journal changed the cluster since (target.StalePlan).
func basisOf(t *v1alpha1.RolloutTarget) *v1alpha1.PlanBasis {
	if t == nil {
		return &v1alpha1.PlanBasis{}
	}
	return &v1alpha1.PlanBasis{Revision: t.Status.Revision, Path: t.Status.Path, Phase: t.Status.Phase, Step: t.Status.Step}
}

// snapshotOf is the snapshot a target took or restored.
func snapshotOf(t *v1alpha1.RolloutTarget) string {
	if t.Status.Revision == t.Spec.Revision && t.Status.Snapshot != "" {
		return t.Status.Snapshot
	}
	if t.Spec.Path == v1alpha1.PathRestore {
		return t.Spec.Snapshot
	}
	return ""
}

// replanRefused plans again each target of the current revision whose executor refused its
// plan (target.Refused: its journal changed the cluster after the plan read it), from the
// journal as it is now, and writes it with that journal as its basis. A plan that now has
// something to do is opened by the decision that follows, in its group's turn; one opened
// before (not a None) stays open.
func (r *Reconciler) replanRefused(ctx context.Context, s *scope) error {
	ro := s.ro
	var refused []*v1alpha1.RolloutTarget
	for _, t := range s.current() {
		if target.Refused(t) && !s.isFailedRestore(t) {
			refused = append(refused, t)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	relObj, _, err := r.Releases.Load(ctx, r.Hub, ro.Namespace, ro.Status.CurrentRelease)
	if err != nil {
		return fmt.Errorf("planning again the clusters that refused revision %d: %w", ro.Status.Revision, err)
	}
	clusters := make([]WaveCluster, 0, len(refused))
	prev := map[string]Previous{}
	for _, t := range refused {
		clusters = append(clusters, WaveCluster{Name: t.Spec.Cluster, Wave: t.Spec.Wave})
		prev[t.Spec.Cluster] = previousOf(t)
	}
	manifests, err := r.clusterManifests(ctx, ro, relObj, clusters)
	if err != nil {
		return err
	}
	snaps, err := r.snapshots(ctx, ro)
	if err != nil {
		return err
	}
	// PrevRelease only matters to a cluster without a previous revision; each of these has one.
	plans := Plan(PlanInput{Rollout: ro.Name, Revision: ro.Status.Revision, Release: ro.Status.CurrentRelease, PrevRelease: ro.Status.PreviousRelease,
		Clusters: clusters, Previous: prev, Snapshots: snaps, Manifests: manifests})
	automatic := ""
	if h := s.revision(); h != nil && h.Automatic {
		automatic = h.Reason
	}
	wasRollback := s.isRollback()
	err = eachTarget(ctx, plans, func(ctx context.Context, p TargetPlan) error {
		t := s.targets[p.Cluster]
		was, basis := t.Spec.Path, basisOf(t)
		changed, err := s.updateTarget(ctx, p.Cluster, func(t *v1alpha1.RolloutTarget) {
			start := p.Path == v1alpha1.PathNone || (t.Spec.Start && t.Spec.Path != v1alpha1.PathNone)
			t.Spec.Path, t.Spec.FromRelease, t.Spec.ToRelease, t.Spec.Snapshot = p.Path, p.FromRelease, p.ToRelease, p.Snapshot
			t.Spec.Manifests, t.Spec.FromManifests, t.Spec.Start, t.Spec.Basis = p.Manifests, p.FromManifests, start, basis
			t.Spec.Reason = automatic
			if p.Message != "" && automatic == "" {
				t.Spec.Reason = p.Message
			}
		})
		if err == nil && changed {
			s.event("Normal", "Replanned", "%s: its revision %d reached %s after revision %d was planned from it: planned again, %s (was %s)",
				p.Cluster, basis.Revision, basis.Step, ro.Status.Revision, p.Path, was)
		}
		return err
	})
	if !wasRollback && automatic == "" && s.isRollback() {
		// A person's rollback planned "nothing to roll back" everywhere goes back only now:
		// recorded as startRevision records one planned so.
		reason := s.manualRollback()
		if h := s.revision(); h != nil && h.Reason == "" {
			h.Reason = truncate(reason, 1024)
		}
	}
	return err
}

func dash(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// writeTargets creates or updates one RolloutTarget per planned cluster, and deletes the
// targets of clusters the rollout no longer selects.
func (r *Reconciler) writeTargets(ctx context.Context, s *scope, revision int32, plans []TargetPlan, reason string) error {
	ro := s.ro
	planned := map[string]bool{}
	// The writes run at once; s.targets is read by them and changed only after them.
	var mu sync.Mutex
	created := map[string]*v1alpha1.RolloutTarget{}
	var todo []TargetPlan
	for _, p := range plans {
		planned[p.Cluster] = true
		if t := s.targets[p.Cluster]; t == nil || t.Spec.Revision != revision {
			todo = append(todo, p)
		}
	}
	open := openedAtOnce(&ro.Spec, plans)
	err := eachTarget(ctx, todo, func(ctx context.Context, p TargetPlan) error {
		spec := v1alpha1.RolloutTargetSpec{
			Rollout: ro.Name, Cluster: p.Cluster, Revision: revision, Wave: p.Wave, Path: p.Path,
			FromRelease: p.FromRelease, ToRelease: p.ToRelease, Snapshot: p.Snapshot,
			Manifests: p.Manifests, FromManifests: p.FromManifests,
			Operator: ro.Spec.Operator, InstallNamespace: ro.Spec.InstallNamespace, HealthGates: ro.Spec.HealthGates,
			PruneOnRollback: ro.Spec.PruneOnRollback, SnapshotRetention: ro.Spec.SnapshotRetention, SnapshotStore: ro.Spec.SnapshotStore,
			UnreachablePolicy: ro.Spec.UnreachablePolicy,
			// A cluster with nothing to do is opened at once: its executor only records it;
			// so is each cluster a rollback's first group restores now (openedAtOnce).
			Start:  p.Path == v1alpha1.PathNone || open[p.Cluster],
			Reason: reason,
			// What the plan saw of the cluster: its executor refuses a plan its journal has
			// outrun (target.StalePlan), and replanRefused plans it again.
			Basis: basisOf(s.targets[p.Cluster]),
		}
		if p.Message != "" && reason == "" {
			spec.Reason = p.Message
		}
		if t := s.targets[p.Cluster]; t != nil {
			_, err := s.updateTarget(ctx, p.Cluster, func(t *v1alpha1.RolloutTarget) { t.Spec = spec })
			return err
		}
		t := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ro.Namespace, Name: TargetName(ro.Name, p.Cluster),
			Labels: map[string]string{v1alpha1.LabelRollout: ro.Name, v1alpha1.LabelCluster: p.Cluster}}, Spec: spec}
		if err := controllerutil.SetControllerReference(ro, t, r.Client.Scheme()); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, t); err != nil {
			return fmt.Errorf("creating RolloutTarget %s: %w", t.Name, err)
		}
		mu.Lock()
		created[p.Cluster] = t
		mu.Unlock()
		return nil
	})
	maps.Copy(s.targets, created)
	if err != nil {
		return err
	}
	for name, t := range s.targets {
		if planned[name] {
			continue
		}
		if err := r.Client.Delete(ctx, t); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting RolloutTarget %s of a cluster no wave selects: %w", t.Name, err)
		}
		delete(s.targets, name)
	}
	return nil
}

// openedAtOnce returns the clusters of a rollback that its first write opens: those the first
// group would start as soon as the revision is recorded (Decide on the plan, every cluster
// pending), unless spec.paused holds the rollout. A rollback needs no approval and takes no
// snapshot, so nothing can come between; opening them in the write that plans them spares
// every cluster a second write of its target (and a pull member's copy, a second relay),
// and the time for the cache to hold the whole revision: a RollbackAll of 1,000 clusters
// is told to restore in one write each. An upgrade is opened by the reconcile as before: a
// wave may wait for approval or for its snapshot store.
func openedAtOnce(spec *v1alpha1.RolloutSpec, plans []TargetPlan) map[string]bool {
	if !IsRollback(plans) || spec.Paused {
		return nil
	}
	clusters := make([]Cluster, 0, len(plans))
	for _, p := range plans {
		clusters = append(clusters, Cluster{Name: p.Cluster, Wave: p.Wave, Phase: v1alpha1.ClusterPending, Started: p.Path == v1alpha1.PathNone})
	}
	d := Decide(spec, 0, nil, clusters, len(plans), true)
	open := make(map[string]bool, len(d.Start))
	for _, c := range d.Start {
		open[c] = true
	}
	return open
}

// TargetName names the target of a cluster in a rollout.
func TargetName(rollout, cluster string) string {
	n := rollout + "-" + cluster
	if len(n) > 253 {
		n = n[:253]
	}
	return n
}

// resolve returns every wave's clusters; a cluster belongs to the first wave that selects it.
func (r *Reconciler) resolve(ctx context.Context, ro *v1alpha1.Rollout) ([]WaveCluster, error) {
	var list v1alpha1.MemberClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	seen := map[string]bool{}
	var out []WaveCluster
	for i, w := range ro.Spec.Waves {
		var names []string
		if len(w.Clusters) > 0 {
			for _, n := range w.Clusters {
				j := slices.IndexFunc(list.Items, func(mc v1alpha1.MemberCluster) bool { return mc.Name == n })
				if j < 0 {
					return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.waves[%d].clusters names %q, which is not a MemberCluster (register it with rewind clusters add)", i, n)
				}
				if mc := &list.Items[j]; !mc.Bound(ro.Namespace) {
					return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.waves[%d].clusters names %q, which is not bound to namespace %s: its spec.boundNamespaces (%s) leaves this namespace out; its owner binds it with: kubectl patch membercluster %s --type=json -p '[{\"op\":\"add\",\"path\":\"/spec/boundNamespaces/-\",\"value\":\"%s\"}]'",
						i, n, ro.Namespace, boundList(mc), n, ro.Namespace)
				}
				names = append(names, n)
			}
		} else {
			sel, err := metav1.LabelSelectorAsSelector(w.Selector)
			if err != nil {
				return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.waves[%d].selector: %v", i, err)
			}
			for _, mc := range list.Items {
				if sel.Matches(labels.Set(mc.Labels)) && mc.Bound(ro.Namespace) {
					names = append(names, mc.Name)
				}
			}
		}
		slices.Sort(names)
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, WaveCluster{Name: n, Wave: int32(i)})
			}
		}
	}
	if len(out) == 0 {
		return nil, stallf(v1alpha1.ReasonInvalidSpec, "no MemberCluster bound to namespace %s matches any wave of the rollout (spec.waves; a member's spec.boundNamespaces says which namespaces may target it)", ro.Namespace)
	}
	return out, nil
}

// boundList words a member's spec.boundNamespaces.
func boundList(mc *v1alpha1.MemberCluster) string {
	if len(mc.Spec.BoundNamespaces) == 0 {
		return "unset: a pull member is bound to no namespace until its owner binds it"
	}
	return strings.Join(mc.Spec.BoundNamespaces, ", ")
}

// snapshots lists the complete snapshots this rollout took: in its namespace, and (a pull
// member's agent takes its snapshots in the member's hub namespace) in its pull members'
// namespaces. One list of the operator's snapshots in every namespace, not one per member.
func (r *Reconciler) snapshots(ctx context.Context, ro *v1alpha1.Rollout) ([]SnapshotRef, error) {
	var members v1alpha1.MemberClusterList
	if err := r.Client.List(ctx, &members); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	pullNamespace := map[string]string{} // namespace -> its pull member
	for _, mc := range members.Items {
		if mc.Spec.Mode == v1alpha1.ModePull {
			pullNamespace[v1alpha1.MemberNamespace(mc.Name)] = mc.Name
		}
	}
	opts := []client.ListOption{client.MatchingLabels{snapshot.LabelOperator: ro.Spec.Operator}}
	if len(pullNamespace) == 0 {
		opts = append(opts, client.InNamespace(ro.Namespace))
	}
	var all v1alpha1.SnapshotList
	if err := r.Hub.List(ctx, &all, opts...); err != nil {
		return nil, fmt.Errorf("listing the rollout's snapshots: %w", err)
	}
	var out []SnapshotRef
	for _, sn := range all.Items {
		// A snapshot in a pull member's namespace counts only for that member.
		if sn.Namespace != ro.Namespace && (pullNamespace[sn.Namespace] == "" || pullNamespace[sn.Namespace] != sn.Spec.Cluster) {
			continue
		}
		if sn.Spec.Rollout != ro.Namespace+"/"+ro.Name || !meta.IsStatusConditionTrue(sn.Status.Conditions, v1alpha1.ConditionReady) {
			continue
		}
		t := sn.CreationTimestamp.Time
		if sn.Status.CapturedAt != nil {
			t = sn.Status.CapturedAt.Time
		}
		out = append(out, SnapshotRef{Name: sn.Name, Cluster: sn.Spec.Cluster, Release: sn.Spec.Release, CapturedAt: t})
	}
	return out, nil
}

// revision returns the newest history entry.
func (s *scope) revision() *v1alpha1.Revision {
	h := s.ro.Status.History
	if len(h) == 0 {
		return nil
	}
	return &h[len(h)-1]
}

// observeDuration records a finished revision's duration once the status that finishes it is
// written.
func (s *scope) observeDuration(h *v1alpha1.Revision) {
	if h.StartedAt != nil && h.FinishedAt != nil {
		outcome, d := h.Outcome, h.FinishedAt.Sub(h.StartedAt.Time).Seconds()
		s.afterWrite(func() { metrics.RolloutDuration.WithLabelValues(s.ro.Namespace, s.ro.Name, outcome).Observe(d) })
	}
}

// historyFailures keeps the first failed clusters of a revision in its history entry.
func historyFailures(f []v1alpha1.ClusterFailure) []v1alpha1.ClusterFailure {
	if len(f) > maxHistoryFailures {
		f = f[:maxHistoryFailures]
	}
	return slices.Clone(f)
}

// maxHistoryFailures bounds the failed clusters a history entry keeps.
const maxHistoryFailures = 3
