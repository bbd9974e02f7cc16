package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// Reasons of SnapshotSchedule conditions.
const (
	// ReasonCaptured: the last run took a snapshot of every selected cluster.
	ReasonCaptured = "Captured"
	// ReasonCaptureFailed: the last run could not take a snapshot of some clusters.
	ReasonCaptureFailed = "CaptureFailed"
	// ReasonNoClusters: the selector picks no MemberCluster.
	ReasonNoClusters = "NoClusters"
	// ReasonSuspended: spec.suspend is set.
	ReasonSuspended = "Suspended"
	// ReasonWaiting: no run yet.
	ReasonWaiting = "Waiting"
)

// storeRetry is how soon a run held by a store that is not Ready is tried again.
const storeRetry = 30 * time.Second

// SnapshotScheduleReconciler takes the snapshots of SnapshotSchedules when they are due, and
// deletes those whose TTL ran out or that are beyond the schedule's retention, never one a
// Rollout references.
type SnapshotScheduleReconciler struct {
	// Client reads and writes the hub; it must read Secrets from the API server.
	Client client.Client
	// Members gives access to member clusters; Releases caches releases' manifests.
	Members  *member.Cache
	Releases *release.Cache
	// Now is the clock (tests inject one).
	Now func() time.Time
}

// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotschedules/status,verbs=get;update;patch

func (r *SnapshotScheduleReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// ParseSchedule parses a schedule and its time zone; errors name the field and the fix.
func ParseSchedule(spec v1alpha1.SnapshotScheduleSpec) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if spec.TimeZone != "" {
		l, err := time.LoadLocation(spec.TimeZone)
		if err != nil {
			return nil, nil, fmt.Errorf("spec.timeZone %q is not a time zone: use an IANA name such as Europe/Paris or UTC", spec.TimeZone)
		}
		loc = l
	}
	s, err := cron.ParseStandard(spec.Schedule)
	if err != nil {
		return nil, nil, fmt.Errorf("spec.schedule %q: %v: use 5 cron fields (minute hour day-of-month month day-of-week, e.g. \"0 3 * * *\") or a descriptor such as @hourly or @every 6h", spec.Schedule, err)
	}
	return s, loc, nil
}

// Due returns the latest scheduled time after last and at or before now (missed runs are
// not made up, as a CronJob does), and the next one after now. ok is false when none is due.
func Due(s cron.Schedule, loc *time.Location, last, now time.Time) (due, next time.Time, ok bool) {
	t := s.Next(last.In(loc))
	for i := 0; !t.IsZero() && !t.After(now) && i < 100000; i++ {
		due, ok = t, true
		t = s.Next(t)
	}
	return due, t, ok
}

// Reconcile runs a schedule: expiry and retention, then the run that is due, if any.
func (r *SnapshotScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	sc := &v1alpha1.SnapshotSchedule{}
	if err := r.Client.Get(ctx, req.NamespacedName, sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Its own status writes do not wake it (only a generation change does): a write that
	// conflicts is requeued by Done.
	h := patch.NewHelper(sc, r.Client)
	defer func() { res, retErr = h.Done(ctx, sc, res, retErr) }()
	now := r.now()
	sc.Status.ObservedGeneration = sc.Generation
	sched, loc, err := ParseSchedule(sc.Spec)
	if err == nil {
		_, err = metav1.LabelSelectorAsSelector(&sc.Spec.ClusterSelector)
		if err != nil {
			err = fmt.Errorf("spec.clusterSelector: %v", err)
		}
	}
	if err != nil {
		r.condition(sc, v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, err.Error())
		r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonInvalidSpec, err.Error())
		return ctrl.Result{}, nil // a spec change triggers the next reconcile
	}
	meta.RemoveStatusCondition(&sc.Status.Conditions, v1alpha1.ConditionStalled)

	hub := &snapshot.Hub{Client: r.Client}
	owned := client.MatchingLabels{v1alpha1.LabelSchedule: sc.Name}
	expired, nextExpiry, err := hub.Expire(ctx, sc.Namespace, owned, now)
	sc.Status.Expired += int64(len(expired))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("expiring snapshots: %w", err)
	}

	last := sc.CreationTimestamp.Time
	if sc.Status.LastScheduleTime != nil {
		last = sc.Status.LastScheduleTime.Time
	}
	due, next, ok := Due(sched, loc, last, now)
	requeue := func() ctrl.Result {
		wait := next.Sub(now)
		if !nextExpiry.IsZero() && nextExpiry.Sub(now) < wait {
			wait = nextExpiry.Sub(now)
		}
		return ctrl.Result{RequeueAfter: max(wait, time.Second)}
	}
	if !next.IsZero() {
		n := metav1.NewTime(next)
		sc.Status.NextScheduleTime = &n
	}
	if sc.Spec.Suspend {
		r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonSuspended, "suspended: no snapshot is taken (expiry still runs)")
		return requeue(), nil
	}
	if !ok {
		if meta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionReady) == nil {
			r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionUnknown, ReasonWaiting, "the first run is at "+next.Format(time.RFC3339))
		}
		return requeue(), nil
	}

	var store *snapstore.Store
	if sc.Spec.Store != "" {
		st, err := snapstore.GetReady(ctx, r.Client, sc.Namespace, sc.Spec.Store, false)
		if err == nil {
			store, err = snapstore.FromObject(ctx, r.Client, st)
		}
		if err != nil {
			r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonStoreNotReady,
				fmt.Sprintf("the run due at %s waits: %v", due.Format(time.RFC3339), err))
			return ctrl.Result{RequeueAfter: storeRetry}, nil
		}
	}

	results, err := r.run(ctx, hub, sc, store, due)
	if err != nil {
		return ctrl.Result{}, err
	}
	d := metav1.NewTime(due)
	sc.Status.LastScheduleTime = &d
	sc.Status.LastRun = results
	if len(sc.Status.LastRun) > 50 {
		sc.Status.LastRun = sc.Status.LastRun[:50]
	}
	var failed []string
	for _, res := range results {
		if res.Error != "" {
			failed = append(failed, res.Cluster+": "+res.Error)
		}
	}
	switch {
	case len(results) == 0:
		r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNoClusters, "spec.clusterSelector picks no MemberCluster")
	case len(failed) > 0:
		r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonCaptureFailed,
			captureFailedMessage(failed, len(results), due))
	default:
		r.condition(sc, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonCaptured,
			fmt.Sprintf("%d clusters captured at %s", len(results), due.Format(time.RFC3339)))
	}
	// Retention by count, per cluster, among this schedule's snapshots.
	keep := int(sc.Spec.Retention)
	if keep <= 0 {
		keep = 7
	}
	for _, res := range results {
		if _, err := hub.PruneMatching(ctx, sc.Namespace, client.MatchingLabels{v1alpha1.LabelSchedule: sc.Name, snapshot.LabelCluster: res.Cluster}, keep); err != nil {
			return ctrl.Result{}, fmt.Errorf("retention of cluster %s: %w", res.Cluster, err)
		}
	}
	if sc.Spec.TTL != nil && (nextExpiry.IsZero() || due.Add(sc.Spec.TTL.Duration).Before(nextExpiry)) {
		nextExpiry = due.Add(sc.Spec.TTL.Duration)
	}
	return requeue(), nil
}

// run takes one snapshot per selected cluster for the run due at due. Snapshot names derive
// from the schedule, the cluster and the time, so a run repeated after a crash takes nothing
// twice.
func (r *SnapshotScheduleReconciler) run(ctx context.Context, hub *snapshot.Hub, sc *v1alpha1.SnapshotSchedule, store *snapstore.Store, due time.Time) ([]v1alpha1.ScheduledClusterResult, error) {
	sel, _ := metav1.LabelSelectorAsSelector(&sc.Spec.ClusterSelector)
	var clusters v1alpha1.MemberClusterList
	if err := r.Client.List(ctx, &clusters, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	sort.Slice(clusters.Items, func(i, j int) bool { return clusters.Items[i].Name < clusters.Items[j].Name })
	var annotations map[string]string
	if sc.Spec.TTL != nil {
		annotations = map[string]string{v1alpha1.AnnotationExpiresAt: due.Add(sc.Spec.TTL.Duration).UTC().Format(time.RFC3339)}
	}
	results := make([]v1alpha1.ScheduledClusterResult, 0, len(clusters.Items))
	for i := range clusters.Items {
		mc := &clusters.Items[i]
		res := v1alpha1.ScheduledClusterResult{Cluster: mc.Name}
		name := scheduledName(sc.Name, mc.Name, due)
		snap, err := r.takeOne(ctx, hub, sc, mc, store, name, annotations)
		if err != nil {
			res.Error = err.Error()
		} else {
			res.Snapshot = snap.Name
		}
		results = append(results, res)
	}
	return results, nil
}

func (r *SnapshotScheduleReconciler) takeOne(ctx context.Context, hub *snapshot.Hub, sc *v1alpha1.SnapshotSchedule, mc *v1alpha1.MemberCluster, store *snapstore.Store, name string, annotations map[string]string) (*v1alpha1.Snapshot, error) {
	cl, err := r.Members.For(ctx, mc)
	if err != nil {
		return nil, err
	}
	rec, err := member.ReadRecord(ctx, cl.Client, sc.Spec.Operator)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%s has no installed-version record on this member: nothing to capture", sc.Spec.Operator)
	}
	rel, objs, err := r.Releases.Load(ctx, r.Client, sc.Namespace, rec.Release)
	if err != nil {
		return nil, err
	}
	return hub.Take(ctx, cl, snapshot.Request{
		Name: name, Namespace: sc.Namespace, Cluster: mc.Name, Store: store, Retention: -1,
		Reason: fmt.Sprintf("scheduled by %s (%s)", sc.Name, sc.Spec.Schedule),
		Capture: snapshot.Options{
			Operator: sc.Spec.Operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: rec.Namespace, Manifests: objs,
		},
		Labels:      map[string]string{v1alpha1.LabelSchedule: sc.Name},
		Annotations: annotations,
	})
}

// scheduledName is the snapshot name of a schedule's run on a cluster.
func scheduledName(schedule, cluster string, due time.Time) string {
	n := fmt.Sprintf("%s-%s-%s", schedule, cluster, due.UTC().Format("20060102-1504"))
	if len(n) > 180 {
		n = n[len(n)-180:]
	}
	return strings.Trim(n, "-.")
}

// maxListedFailures is how many failed clusters the Ready condition names; the rest are
// counted (status.lastRun has them all, up to its own bound).
const maxListedFailures = 5

// captureFailedMessage is the Ready message of a run where some of total clusters failed:
// the first maxListedFailures failures, then how many more there are.
func captureFailedMessage(failed []string, total int, due time.Time) string {
	listed := failed
	more := ""
	if len(failed) > maxListedFailures {
		listed = failed[:maxListedFailures]
		more = fmt.Sprintf("; and %d more", len(failed)-maxListedFailures)
	}
	return fmt.Sprintf("%d of %d clusters not captured at %s: %s%s", len(failed), total, due.Format(time.RFC3339), strings.Join(listed, "; "), more)
}

func (r *SnapshotScheduleReconciler) condition(sc *v1alpha1.SnapshotSchedule, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&sc.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: sc.Generation})
}

// SetupWithManager registers the reconciler; its requeues carry it from run to run.
func (r *SnapshotScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.SnapshotSchedule{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("snapshotschedule").
		WithOptions(fault.ControllerOptions(1)).
		Complete(r)
}
