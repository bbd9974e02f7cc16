// Package rollout orchestrates Rollouts across a fleet: it plans each revision (a pure
// function), writes one RolloutTarget per member cluster, opens waves up to their concurrency,
// aggregates the targets into a bounded status, bakes, takes approvals and applies the failure
// policy. It never talks to a member cluster and never writes a Rollout's spec: the per-cluster
// work runs in the target package, each cluster on its own worker.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/metrics"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// Reconciler drives Rollouts.
type Reconciler struct {
	// Client reads (cached) and writes the hub; Hub reads what the manager does not cache
	// (Secrets holding release manifests, Snapshots) straight from the API server.
	Client client.Client
	Hub    client.Client
	// Live reads straight from the API server (the manager's API reader), for what must
	// include this reconciler's own latest writes, which the cache may not hold yet.
	Live client.Reader
	// Releases caches releases' manifests.
	Releases *release.Cache
	// Probes says which members the health probe finds unreachable (nil: none is); the
	// preflight does not read them.
	Probes *member.Prober
	// Recorder records Events on Rollouts.
	Recorder events.EventRecorder
	// Now is the clock.
	Now func() time.Time

	// seen holds, by Rollout, the resourceVersion this reconciler last read from the API
	// server or wrote (see get).
	seen sync.Map
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// +kubebuilder:rbac:groups=rewind.dev,resources=rollouts,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=rollouts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=rewind.dev,resources=rollouttargets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rewind.dev,resources=operatorreleases;memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshots,verbs=get;list;watch

// Reconcile advances one Rollout. Its status is written once, at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ro, err := r.get(ctx, req.NamespacedName)
	if ro == nil || err != nil {
		return ctrl.Result{}, err
	}
	// The status is written once, at the end, with the resourceVersion read: a reconcile that
	// read the Rollout before its own last status write reached the cache would otherwise write
	// over it (it took a just-started revision for an interrupted one and started it again);
	// such a conflict reconciles again from a fresh read. Events and metrics that tell what
	// the status records are emitted once it went through.
	s := &scope{r: r, ro: ro, helper: patch.NewHelper(ro, r.Client, patch.WithReader(r.Live))}
	res, err := r.reconcile(ctx, s)
	var terminal *stallError
	var waiting *waitError
	switch {
	case errors.As(err, &terminal):
		r.stall(s, terminal.reason, terminal.Error())
		res, err = ctrl.Result{}, nil
	case errors.As(err, &waiting):
		s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, waiting.reason, waiting.Error())
		s.condition(v1alpha1.ConditionReconciling, metav1.ConditionTrue, waiting.reason, waiting.Error())
		meta.RemoveStatusCondition(&s.ro.Status.Conditions, v1alpha1.ConditionStalled)
		res, err = ctrl.Result{}, nil
	case err == nil:
		// Progress: a Stalled condition from a problem that is gone no longer holds.
		s.clearStall()
	}
	s.helper.OnPatched(s.updatePhaseMetrics)
	res, err = s.helper.Done(ctx, s.ro, res, err)
	// The version last read or written: a later read from a cache behind it goes to the API
	// server (get).
	r.seen.Store(req.NamespacedName, s.ro.ResourceVersion)
	return res, err
}

// get reads a Rollout from the cache or, when the cache may be behind this reconciler's own
// last status write (its version is not the one last written or read), from the API server.
// A reconcile of the Rollout as it was before that write would do again what the last one
// did (open a wave again, start a revision again, with their Events) before its status patch
// met the conflict. A Rollout that is gone is nil.
func (r *Reconciler) get(ctx context.Context, key client.ObjectKey) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	err := r.Client.Get(ctx, key, ro)
	if rv, ok := r.seen.Load(key); err == nil && ok && rv != ro.ResourceVersion {
		cached := ro.ResourceVersion
		err = r.Live.Get(ctx, key, ro)
		if err == nil && ro.ResourceVersion == rv {
			ctrl.LoggerFrom(ctx).V(1).Info("the cache is behind this reconciler's last write of the Rollout: read from the API server",
				"cachedVersion", cached, "version", rv)
		}
	}
	if apierrors.IsNotFound(err) {
		r.seen.Delete(key)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return ro, nil
}

// scope carries one reconcile.
type scope struct {
	r  *Reconciler
	ro *v1alpha1.Rollout
	// helper writes the Rollout's status (with the resourceVersion read) and runs the
	// after-write actions (Events, metrics) once it went through; a conflict drops them and
	// reconciles again.
	helper *patch.Helper
	// targets are the rollout's targets, by cluster.
	targets map[string]*v1alpha1.RolloutTarget
	// stalled says a Stalled condition was set by this reconcile.
	stalled bool
	// retryRollback is the value of a retry annotation a person set on a rollback that ended
	// Failed (a restore failed): the rollback is planned again, so the clusters whose restore
	// failed are restored and the others are left as they run. It is marked handled once the
	// new revision has started, so a start that fails or waits keeps it.
	retryRollback string
}

// stallError is a problem only a person can fix: it is reported as Stalled, not retried.
type stallError struct {
	reason string
	err    error
}

func (e *stallError) Error() string { return e.err.Error() }

func stallf(reason, format string, args ...any) error {
	return &stallError{reason: reason, err: fmt.Errorf(format, args...)}
}

// waitError is a wait for something that will happen by itself (a release being stored): no
// error backoff, no Stalled; the change that ends it wakes the reconciler.
type waitError struct {
	reason string
	err    error
}

func (e *waitError) Error() string { return e.err.Error() }

func waitf(reason, format string, args ...any) error {
	return &waitError{reason: reason, err: fmt.Errorf(format, args...)}
}

func (r *Reconciler) reconcile(ctx context.Context, s *scope) (ctrl.Result, error) {
	ro := s.ro
	ro.Status.ObservedGeneration = ro.Generation
	if err := s.loadTargets(ctx, r.Client); err != nil {
		return ctrl.Result{}, err
	}
	s.handleRequests()

	if ro.Spec.DryRun {
		// spec.release is planned, not rolled out: nothing changes on any cluster. A revision
		// already under way goes on below.
		if err := r.dryRun(ctx, s); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		clearPlan(ro)
	}
	switch {
	case !ro.Spec.DryRun && ro.Status.CurrentRelease != ro.Spec.Release && ro.Status.FailedRelease != ro.Spec.Release:
		// A new release was asked for (or a retry of one that failed).
		if err := r.startRevision(ctx, s, ro.Spec.Release, ""); err != nil {
			return ctrl.Result{}, err
		}
	case s.retryRollback != "":
		// A retry of a rollback that failed: the release it returns to, planned again from
		// what each cluster runs now.
		rev := ro.Status.Revision
		if err := r.startRevision(ctx, s, ro.Status.CurrentRelease, ""); err != nil {
			return ctrl.Result{}, err
		}
		ro.Status.LastHandledRetry = s.retryRollback
		s.event("Normal", "RetryRequested", "retrying the rollback to %s of revision %d, in which a restore failed", ro.Status.CurrentRelease, rev)
	default:
		if rel, reason, ok := s.interruptedStart(); ok {
			// The controller stopped while it wrote a revision's targets: start it again (the
			// targets already written keep their plan).
			if err := r.startRevision(ctx, s, rel, reason); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if ro.Status.Revision == 0 {
		return ctrl.Result{}, nil
	}
	unseen, err := s.observeRevision(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := s.hold(ctx, ro.Spec.Paused); err != nil {
		return ctrl.Result{}, err
	}
	if err := r.replanRefused(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if unseen > 0 {
		// Every target of the revision was written before the revision was recorded, so the
		// API server holds them all: one was deleted or rewritten by hand. The rollout cannot
		// tell what its cluster did, and counts neither it nor its wave.
		return ctrl.Result{}, stallf(ReasonTargetsMissing, "revision %d planned %d RolloutTargets, but the hub holds %d of them at that revision (one was deleted or changed by hand): no wave opens until each is back; start a new revision (a new spec.release) to plan every cluster again",
			ro.Status.Revision, ro.Status.Targets.Total, int(ro.Status.Targets.Total)-unseen)
	}
	if ro.Spec.Paused {
		s.setPhase(v1alpha1.RolloutPaused, v1alpha1.ReasonPaused, "spec.paused is true: no new step starts (rewind rollout resume)")
		s.aggregate()
		return ctrl.Result{}, nil
	}
	s.aggregate()
	switch ro.Status.Phase {
	case v1alpha1.RolloutSucceeded, v1alpha1.RolloutRolledBack, v1alpha1.RolloutFailed:
		return ctrl.Result{}, nil
	}
	if s.restoringFailed() {
		return r.restoreFailedClusters(ctx, s)
	}
	rollback := s.isRollback()
	var d Decision
	for {
		d = Decide(&ro.Spec, ro.Status.CurrentWave, s.approved, s.clusters(), int(ro.Status.Targets.Total), rollback)
		switch {
		case d.Unseen > 0:
			// observeRevision saw them all: not reached (a guard for Decide's contract).
			return ctrl.Result{}, fmt.Errorf("revision %d: %d of its targets are not seen", ro.Status.Revision, d.Unseen)
		case len(d.Failed) > 0 && !rollback:
			return r.onFailure(ctx, s, d.Failed)
		case d.AllDone:
			r.finish(s, rollback, d.Failed)
			return ctrl.Result{}, nil
		case d.NeedsApproval:
			w := ro.Spec.Waves[ro.Status.CurrentWave]
			s.setPhase(v1alpha1.RolloutWaitingForApproval, v1alpha1.ReasonAwaitingApproval,
				fmt.Sprintf("wave %q waits for approval of revision %d: rewind rollout approve %s %s", w.Name, ro.Status.Revision, ro.Name, w.Name))
			return ctrl.Result{}, nil
		case d.GroupDone:
			res, next, err := r.bakeOrNextGroup(ctx, s, rollback)
			if err != nil || !next {
				return res, err
			}
			// The next group is decided now, from this reconcile's view, which holds every
			// write it made: a requeue would read the cache, maybe before the new wave
			// reached it.
			continue
		}
		break
	}
	phase, what := v1alpha1.RolloutProgressing, "rolling out"
	if rollback {
		phase, what = v1alpha1.RolloutRollingBack, "rolling back to"
	}
	groups := Groups(&ro.Spec, rollback)
	s.setPhase(phase, v1alpha1.ReasonProgressing, fmt.Sprintf("%s %s: group %d of %d, %d/%d clusters done",
		what, ro.Status.CurrentRelease, ro.Status.CurrentWave+1, len(groups), ro.Status.Targets.Succeeded+ro.Status.Targets.RolledBack, ro.Status.Targets.Total))
	if len(d.Start) > 0 && ro.Spec.SnapshotStore != "" && s.takesSnapshots(d.Start) {
		// No cluster starts a change whose snapshot cannot be stored.
		if _, err := snapstore.GetReady(ctx, r.Hub, ro.Namespace, ro.Spec.SnapshotStore, false); err != nil {
			msg := fmt.Sprintf("spec.snapshotStore: %v; no cluster starts until its snapshot can be stored", err)
			s.condition(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonStoreNotReady, msg)
			s.condition(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonStoreNotReady, msg)
			return ctrl.Result{RequeueAfter: 30 * time.Second}, nil
		}
	}
	err = eachTarget(ctx, d.Start, func(ctx context.Context, name string) error {
		return s.startTarget(ctx, name, true)
	})
	return ctrl.Result{}, err
}

// takesSnapshots says whether any of the clusters will take a snapshot (an upgrade).
func (s *scope) takesSnapshots(clusters []string) bool {
	for _, name := range clusters {
		if t := s.targets[name]; t != nil && t.Spec.Path == v1alpha1.PathUpgrade {
			return true
		}
	}
	return false
}

// handleRequests takes the annotations a person set: a retry of a failed release, and a new
// spec.release clears a failure held for another one.
func (s *scope) handleRequests() {
	ro := s.ro
	if v := ro.Annotations[v1alpha1.AnnotationRetry]; v != "" && v != ro.Status.LastHandledRetry {
		switch {
		case ro.Status.Phase == v1alpha1.RolloutFailed && s.isRollback():
			// A rollback (a person's or an automatic one) in which a restore failed: it runs
			// again; a failed release it returns from stays held.
			s.retryRollback = v
		case ro.Status.FailedRelease != "":
			ro.Status.LastHandledRetry = v
			s.event("Normal", "RetryRequested", "retrying %s, which failed: %s", ro.Status.FailedRelease, truncate(ro.Status.FailureReason, 512))
			ro.Status.FailedRelease, ro.Status.FailureReason = "", ""
		default:
			ro.Status.LastHandledRetry = v // nothing to retry
		}
	}
	if ro.Status.FailedRelease != "" && ro.Status.FailedRelease != ro.Spec.Release {
		ro.Status.FailedRelease, ro.Status.FailureReason = "", ""
		if ro.Spec.Release == ro.Status.CurrentRelease && ro.Status.Phase == v1alpha1.RolloutRolledBack {
			// A person (or a commit) set spec.release to what the clusters run after the
			// automatic rollback: that is the desired state now, and it holds.
			msg := fmt.Sprintf("%s is installed on all %d clusters", ro.Status.CurrentRelease, ro.Status.Targets.Total)
			s.condition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded, msg)
			meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionStalled)
		}
	}
}

// ReasonTargetsMissing says a RolloutTarget the revision planned is gone from the hub.
const ReasonTargetsMissing = "TargetsMissing"

// loadTargets reads the rollout's targets from the cache (r.Client) or the API server (r.Live).
func (s *scope) loadTargets(ctx context.Context, from client.Reader) error {
	var list v1alpha1.RolloutTargetList
	if err := from.List(ctx, &list, client.InNamespace(s.ro.Namespace), client.MatchingLabels{v1alpha1.LabelRollout: s.ro.Name}); err != nil {
		return fmt.Errorf("listing the rollout's targets: %w", err)
	}
	s.targets = map[string]*v1alpha1.RolloutTarget{}
	for i := range list.Items {
		t := &list.Items[i]
		if metav1.IsControlledBy(t, s.ro) {
			s.targets[t.Spec.Cluster] = t
		}
	}
	return nil
}

// observeRevision makes sure the view holds every target the current revision planned
// (status.targets.total of them) at that revision. The cache may not: a target's spec written
// for the revision a moment ago may not have reached it, and a missing or stale target would
// make its wave look done. Then the targets are read from the API server, which holds every
// write made before the revision was recorded. It returns how many are still not seen.
func (s *scope) observeRevision(ctx context.Context) (unseen int, err error) {
	want := int(s.ro.Status.Targets.Total)
	cached := len(s.current())
	if cached >= want {
		return 0, nil
	}
	ctrl.LoggerFrom(ctx).V(1).Info("the cache holds fewer targets at the revision than it planned: read from the API server",
		"revision", s.ro.Status.Revision, "planned", want, "cached", cached)
	if err := s.loadTargets(ctx, s.r.Live); err != nil {
		return 0, err
	}
	return max(want-len(s.current()), 0), nil
}

// current returns the targets of the current revision, by cluster name.
func (s *scope) current() []*v1alpha1.RolloutTarget {
	var out []*v1alpha1.RolloutTarget
	for _, t := range s.targets {
		if t.Spec.Revision == s.ro.Status.Revision {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.Cluster < out[j].Spec.Cluster })
	return out
}

// phaseOf is a target's phase for its current plan ("" while its executor has not seen it).
func phaseOf(t *v1alpha1.RolloutTarget) string {
	if t.Status.Revision != t.Spec.Revision || t.Status.Path != t.Spec.Path {
		return v1alpha1.ClusterPending
	}
	return t.Status.Phase
}

// clusters is what Decide needs of every target the view holds; a target not at the current
// revision is Stale.
func (s *scope) clusters() []Cluster {
	out := make([]Cluster, 0, len(s.targets))
	for _, t := range s.targets {
		c := Cluster{Name: t.Spec.Cluster, Wave: t.Spec.Wave, Phase: phaseOf(t), Started: t.Spec.Start,
			Stale: t.Spec.Revision != s.ro.Status.Revision, Bakes: t.Spec.Path != v1alpha1.PathNone}
		if t.Status.Revision == t.Spec.Revision && t.Status.HealthCheckedAt != nil {
			c.HealthCheckedAt = t.Status.HealthCheckedAt.Time
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (s *scope) approved(wave string) bool {
	return s.ro.Annotations[v1alpha1.AnnotationApprovedPrefix+wave] == strconv.Itoa(int(s.ro.Status.Revision))
}

// isRollback says whether the revision goes back: its clusters return to snapshots taken under
// the release it rolls out. The restore of a failed cluster inside an upgrade (failure policy
// RollbackFailed) targets the release before and does not count.
func (s *scope) isRollback() bool {
	for _, t := range s.current() {
		if t.Spec.Path == v1alpha1.PathRestore && t.Spec.ToRelease == s.ro.Status.CurrentRelease {
			return true
		}
	}
	return false
}

// isFailedRestore says whether a target restores a failed cluster of an upgrade
// (RollbackFailed): a restore to another release than the revision's.
func (s *scope) isFailedRestore(t *v1alpha1.RolloutTarget) bool {
	return t.Spec.Path == v1alpha1.PathRestore && t.Spec.ToRelease != s.ro.Status.CurrentRelease
}

func (s *scope) restoringFailed() bool {
	for _, t := range s.current() {
		if s.isFailedRestore(t) {
			return true
		}
	}
	return false
}

// interruptedStart finds a revision whose targets were being written when the controller
// stopped: targets of the revision after the current one. It returns what that revision
// rolls out and why.
func (s *scope) interruptedStart() (release, reason string, ok bool) {
	for _, t := range s.targets {
		if t.Spec.Revision != s.ro.Status.Revision+1 {
			continue
		}
		release, ok = t.Spec.ToRelease, true
		// An automatic revision's reason is on every target; a cluster with nothing to do
		// carries its plan's message instead when the revision is a person's.
		if t.Spec.Path != v1alpha1.PathNone {
			return release, t.Spec.Reason, true
		}
	}
	return release, "", ok
}

// updateTarget changes a target's spec. It says whether the target changed: a view behind the
// API server may ask for a change the target already has.
//
// The spec is written whole, on condition that it is still the one read (patch.Spec tests its
// generation), not under the optimistic lock on resourceVersion: the status of a target is
// written often by its executor, an agent or the relay of a pull member, and a revision's
// writes to a fleet's targets would otherwise conflict with them, each conflict costing a read
// and a write again. A spec that did change since (this controller's own last write, not yet in
// its cache) is read again from the API server and the change made over it.
func (s *scope) updateTarget(ctx context.Context, cluster string, mutate func(*v1alpha1.RolloutTarget)) (changed bool, err error) {
	t := s.targets[cluster]
	if t == nil {
		return false, fmt.Errorf("no target for cluster %s", cluster)
	}
	for attempt := 0; ; attempt++ {
		base := t.DeepCopy()
		mutate(t)
		if equality.Semantic.DeepEqual(base.Spec, t.Spec) {
			return false, nil
		}
		p, err := patch.Spec(t, base.Generation)
		if err != nil {
			return false, err
		}
		err = s.r.Client.Patch(ctx, t, p)
		if err != nil && attempt < 5 {
			// Read from the API server: the cache may still hold the spec that was replaced.
			stale, gerr := patch.StaleSpec(ctx, s.r.Live, t, base.Generation, err)
			if gerr != nil {
				return false, gerr
			}
			if stale {
				continue
			}
		}
		if err != nil {
			return false, fmt.Errorf("updating RolloutTarget %s: %w", t.Name, err)
		}
		return true, nil
	}
}

// startTarget sets a target's spec.start.
func (s *scope) startTarget(ctx context.Context, cluster string, start bool) error {
	_, err := s.updateTarget(ctx, cluster, func(t *v1alpha1.RolloutTarget) { t.Spec.Start = start })
	return err
}

// hold closes (paused) or reopens the revision's targets in progress.
func (s *scope) hold(ctx context.Context, paused bool) error {
	var clusters []string
	for _, t := range s.current() {
		// Only those to change: every reconcile holds, and a wave of 1,000 in progress cost a
		// goroutine and a copy of each target for nothing.
		if target.Active(phaseOf(t)) && t.Spec.Start == paused {
			clusters = append(clusters, t.Spec.Cluster)
		}
	}
	return eachTarget(ctx, clusters, func(ctx context.Context, cluster string) error {
		return s.startTarget(ctx, cluster, !paused)
	})
}

// targetWrites is how many RolloutTarget writes a reconcile has in flight at once: a wave of
// many clusters opens in a few round trips to the hub, not in one per cluster after another.
const targetWrites = 16

// eachTarget runs write for each item (a cluster, or a cluster's plan), targetWrites at once;
// the first error cancels the others and is returned. Each write touches its own target only.
func eachTarget[T any](ctx context.Context, items []T, write func(ctx context.Context, item T) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(targetWrites)
	for _, it := range items {
		g.Go(func() error { return write(ctx, it) })
	}
	return g.Wait()
}

// SetupWithManager registers the reconciler: a change of a Rollout or of any of its targets
// reconciles the Rollout.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Rollout{}).
		Owns(&v1alpha1.RolloutTarget{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !target.OnlyProgress(e) }})).
		// A release created after the Rollout that asks for it (it was Stalled) starts it.
		Watches(&v1alpha1.OperatorRelease{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsOf)).
		// A member bound to a namespace (spec.boundNamespaces) starts the Rollouts stalled on it.
		Watches(&v1alpha1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.stalledRollouts),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(fault.ControllerOptions(4)).
		Complete(r)
}

// rolloutsOf returns the Rollouts of a release's namespace that ask for it.
// stalledRollouts are the Rollouts stalled on their spec, which a member's change may fix.
func (r *Reconciler) stalledRollouts(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.RolloutList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, ro := range list.Items {
		if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonInvalidSpec {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ro)})
		}
	}
	return out
}

func (r *Reconciler) rolloutsOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.RolloutList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, ro := range list.Items {
		if ro.Spec.Release == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ro)})
		}
	}
	return out
}

// event records an Event on the Rollout and counts it, once the status write that records what
// it tells went through: a reconcile run again after a conflict would otherwise emit it twice.
func (s *scope) event(typ, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.afterWrite(func() { s.eventNow(typ, reason, "%s", msg) })
}

// eventNow records an Event on the Rollout and counts it at once: for what a write other than
// the Rollout's status (a target's spec) recorded.
func (s *scope) eventNow(typ, reason, format string, args ...any) {
	metrics.Transitions.WithLabelValues(reason).Inc()
	if s.r.Recorder != nil {
		// events.k8s.io/v1 refuses a note over 1 KiB: the Event would be lost.
		s.r.Recorder.Eventf(s.ro, nil, typ, reason, "Reconcile", "%s", truncate(fmt.Sprintf(format, args...), 1024))
	}
}

// afterWrite runs fn once the Rollout's status is written (at once for a scope without a
// helper, as pure tests build).
func (s *scope) afterWrite(fn func()) {
	if s.helper == nil {
		fn()
		return
	}
	s.helper.OnPatched(fn)
}

func (s *scope) updatePhaseMetrics() {
	ro := s.ro
	for _, p := range []string{v1alpha1.RolloutProgressing, v1alpha1.RolloutWaitingForApproval, v1alpha1.RolloutBaking, v1alpha1.RolloutSucceeded,
		v1alpha1.RolloutFailed, v1alpha1.RolloutRollingBack, v1alpha1.RolloutRolledBack, v1alpha1.RolloutPaused} {
		v := 0.0
		if ro.Status.Phase == p {
			v = 1
		}
		metrics.RolloutPhase.WithLabelValues(ro.Namespace, ro.Name, p).Set(v)
	}
	metrics.RolloutStalled.DeletePartialMatch(map[string]string{"namespace": ro.Namespace, "rollout": ro.Name})
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); c != nil && c.Status == metav1.ConditionTrue {
		metrics.RolloutStalled.WithLabelValues(ro.Namespace, ro.Name, c.Reason).Set(1)
	}
}
