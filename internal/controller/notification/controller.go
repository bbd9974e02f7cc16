// Package notification sends the events of Rollouts to the destinations of the
// NotificationPolicies that select them, at most once as far as the receiver can tell: each
// notification carries an idempotency key and is recorded as delivered, in a
// NotificationRecord written with an optimistic lock, before the next one is sent.
//
// Two reconcilers share the work, each on its own queue, apart from the Rollout and
// RolloutTarget controllers. Reconciler computes a Rollout's events from its and its targets'
// status (internal/notify), never from memory, and adds the new ones to the record: it makes
// no network call, so it keeps up with the rollout whatever the receivers do. Deliverer sends
// a record's undelivered notifications and records each delivery: a receiver that is slow or
// down holds only its own notifications back. A restarted or newly elected controller
// computes the events again, and the record says which were sent.
package notification

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/rewind-dev/rewind/internal/notify"
)

// ErrCrash is returned when a test's CrashAfterSend hook stops the reconciler between a
// delivery and its record.
var ErrCrash = errors.New("crash injected between send and record")

// Reconciler records the notifications of one Rollout (the request) for every policy that
// selects it.
type Reconciler struct {
	// Client reads Rollouts, targets and policies from the cache and writes records.
	Client client.Client
	// Reader reads records from the API server: a record read from a cache that lags the last
	// write would lose a delivery recorded meanwhile.
	Reader client.Reader
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Deliverer sends the undelivered notifications of one NotificationRecord (the request).
type Deliverer struct {
	// Client reads policies from the cache and writes records.
	Client client.Client
	// Reader reads records and Secrets from the API server.
	Reader client.Reader
	// HTTP sends the notifications (default: http.DefaultClient; each attempt has the
	// destination's timeout).
	HTTP *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
	// CrashAfterSend, when it returns true for a key and destination, stops the deliverer
	// right after the receiver accepted the notification and before it is recorded (tests).
	CrashAfterSend func(key, destination string) bool
	// Workers is how many records are delivered at once (default 4).
	Workers int

	// crashed: CrashAfterSend stopped the deliverer; like a killed process, it does nothing
	// more.
	crashed atomic.Bool
}

// The notification controller's permissions: read policies, write their status; own the
// records.
// +kubebuilder:rbac:groups=rewind.dev,resources=notificationpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=notificationpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=rewind.dev,resources=notificationrecords,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=rewind.dev,resources=notificationrecords/status,verbs=get;update;patch

// SetupWithManager registers the reconciler: a Rollout is reconciled when it, one of its
// targets or a policy of its namespace changes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("notification").
		For(&v1alpha1.Rollout{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		Watches(&v1alpha1.RolloutTarget{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			t := o.(*v1alpha1.RolloutTarget)
			if target.IsCopy(t) {
				return nil // a pull member's copy: its source target follows it
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.Rollout}}}
		}), builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !target.OnlyProgress(e) }})).
		Watches(&v1alpha1.NotificationPolicy{}, handler.EnqueueRequestsFromMapFunc(r.rolloutsOfPolicy)).
		WithOptions(fault.ControllerOptions(2)).
		Complete(r)
}

// SetupWithManager registers the deliverer: a record is delivered when it or its policy
// changes, and when a failed delivery's backoff ends.
func (r *Deliverer) SetupWithManager(mgr ctrl.Manager) error {
	if r.Workers <= 0 {
		r.Workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("notificationdelivery").
		For(&v1alpha1.NotificationRecord{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		Watches(&v1alpha1.NotificationPolicy{}, handler.EnqueueRequestsFromMapFunc(r.recordsOfPolicy)).
		WithOptions(fault.ControllerOptions(r.Workers)).
		Complete(r)
}

func (r *Deliverer) recordsOfPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.NotificationRecordList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, rec := range list.Items {
		if rec.Spec.Policy == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rec)})
		}
	}
	return out
}

func (r *Deliverer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile sends the record's undelivered notifications to each destination of its policy.
func (r *Deliverer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.crashed.Load() {
		return ctrl.Result{}, nil
	}
	rec := &v1alpha1.NotificationRecord{}
	if err := r.Reader.Get(ctx, req.NamespacedName, rec); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	p := &v1alpha1.NotificationPolicy{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rec.Namespace, Name: rec.Spec.Policy}, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if p.Spec.Suspend {
		return ctrl.Result{}, nil
	}
	ref := notify.RolloutRef{Namespace: rec.Namespace, Name: rec.Spec.Rollout, UID: string(rec.Spec.RolloutUID)}
	var res ctrl.Result
	for i := range p.Spec.Destinations {
		dr, err := r.deliver(ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("policy", p.Name)), p, i, ref, rec)
		if errors.Is(err, ErrCrash) {
			return ctrl.Result{}, reconcile.TerminalError(err)
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		res = lowest(res, dr)
	}
	return res, nil
}

func (r *Reconciler) rolloutsOfPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.RolloutList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, ro := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ro)})
	}
	return out
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile records the Rollout's new notifications for each policy that selects it.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ro := &v1alpha1.Rollout{}
	if err := r.Client.Get(ctx, req.NamespacedName, ro); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ro.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var policies v1alpha1.NotificationPolicyList
	if err := r.Client.List(ctx, &policies, client.InNamespace(ro.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var selected []*v1alpha1.NotificationPolicy
	for i := range policies.Items {
		if selects(&policies.Items[i], ro) {
			selected = append(selected, &policies.Items[i])
		}
	}
	if len(selected) == 0 {
		return ctrl.Result{}, nil // nothing to notify: the Rollout's targets are not read
	}
	// The targets are only read (notify.Compute): the cache's own objects, not copies of a
	// whole fleet's targets at every change.
	var targets v1alpha1.RolloutTargetList
	if err := r.Client.List(ctx, &targets, client.InNamespace(ro.Namespace), client.MatchingLabels{v1alpha1.LabelRollout: ro.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	var errs []error
	for _, p := range selected {
		if err := r.forPolicy(ctx, p, ro, targets.Items); err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", p.Name, err))
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

func lowest(a, b ctrl.Result) ctrl.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		return b
	}
	return a
}

// selects says whether a policy's selector matches a Rollout (an empty one matches all).
func selects(p *v1alpha1.NotificationPolicy, ro *v1alpha1.Rollout) bool {
	if p.Spec.Selector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
	if err != nil {
		return false // the policy's condition says so
	}
	return sel.Matches(labels.Set(ro.Labels))
}

// RecordName is the name of a policy's record about a Rollout.
func RecordName(policy, rollout string) string {
	n := rollout + "." + policy
	if len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(n))
	return n[:200] + "." + hex.EncodeToString(sum[:])[:16]
}

// forPolicy records one policy's new notifications about a Rollout. The write is locked by
// the record's resourceVersion: a delivery recorded meanwhile makes it conflict, and the
// reconcile runs again on a fresh read.
func (r *Reconciler) forPolicy(ctx context.Context, p *v1alpha1.NotificationPolicy, ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget) error {
	rec, err := r.record(ctx, p, ro)
	if err != nil {
		return err
	}
	if r.addNew(rec, p, ro, targets) {
		if err := r.Client.Status().Update(ctx, rec); err != nil {
			return fmt.Errorf("recording notifications: %w", err)
		}
	}
	return nil
}

// record reads (or makes) the policy's record about the Rollout from the API server. A record
// left by an earlier Rollout of the same name is replaced.
func (r *Reconciler) record(ctx context.Context, p *v1alpha1.NotificationPolicy, ro *v1alpha1.Rollout) (*v1alpha1.NotificationRecord, error) {
	key := client.ObjectKey{Namespace: ro.Namespace, Name: RecordName(p.Name, ro.Name)}
	rec := &v1alpha1.NotificationRecord{}
	err := r.Reader.Get(ctx, key, rec)
	switch {
	case err == nil && rec.Spec.RolloutUID == ro.UID:
		return rec, nil
	case err == nil:
		if err := r.Client.Delete(ctx, rec, client.Preconditions{UID: &rec.UID}); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		return nil, fmt.Errorf("replaced the record %s of an earlier Rollout %s", key.Name, ro.Name)
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	rec = &v1alpha1.NotificationRecord{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{v1alpha1.LabelRollout: ro.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Rollout", Name: ro.Name, UID: ro.UID}}},
		Spec: v1alpha1.NotificationRecordSpec{Policy: p.Name, Rollout: ro.Name, RolloutUID: ro.UID, FromRevision: ro.Status.Revision},
	}
	if err := r.Client.Create(ctx, rec); err != nil {
		return nil, err
	}
	// A policy made after the Rollout sends from its current revision on (spec.fromRevision,
	// written with the record); the status says so too, and moves on past pruned revisions.
	rec.Status.FromRevision = ro.Status.Revision
	if err := r.Client.Status().Update(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// maxNotifications bounds a record; delivered notifications of earlier revisions are pruned
// past it.
const maxNotifications = 200

// addNew appends the notifications the Rollout shows that the record does not hold yet, and
// prunes the oldest revisions' finished ones. It says whether the record changed.
func (r *Reconciler) addNew(rec *v1alpha1.NotificationRecord, p *v1alpha1.NotificationPolicy, ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget) bool {
	have := map[string]bool{}
	for _, n := range rec.Status.Notifications {
		have[n.Key] = true
	}
	changed := false
	// From the revision the record was made at (its spec), or later once pruned (its status);
	// a record made before the spec held it has its status only.
	from := max(rec.Spec.FromRevision, rec.Status.FromRevision)
	for _, n := range notify.Compute(ro, targets, from, metav1.NewTime(r.now())) {
		if have[n.Key] || !notify.Selected(p, n.Event) {
			continue
		}
		for _, d := range p.Spec.Destinations {
			n.Deliveries = append(n.Deliveries, v1alpha1.Delivery{Destination: d.Name})
		}
		rec.Status.Notifications = append(rec.Status.Notifications, n)
		changed = true
	}
	for len(rec.Status.Notifications) > maxNotifications {
		oldest := rec.Status.Notifications[0].Revision
		if oldest >= ro.Status.Revision || slices.ContainsFunc(rec.Status.Notifications, func(n v1alpha1.Notification) bool {
			return n.Revision == oldest && slices.ContainsFunc(n.Deliveries, func(d v1alpha1.Delivery) bool { return d.DeliveredAt == nil && !d.GaveUp })
		}) {
			break
		}
		rec.Status.Notifications = slices.DeleteFunc(rec.Status.Notifications, func(n v1alpha1.Notification) bool { return n.Revision <= oldest })
		rec.Status.FromRevision = oldest + 1
		changed = true
	}
	return changed
}

// deliver sends one destination's undelivered notifications in order, recording each before
// the next; a failed one waits its backoff (and holds the later ones back, to keep the order).
func (r *Deliverer) deliver(ctx context.Context, p *v1alpha1.NotificationPolicy, i int, ref notify.RolloutRef, rec *v1alpha1.NotificationRecord) (ctrl.Result, error) {
	dest := &p.Spec.Destinations[i]
	log := ctrl.LoggerFrom(ctx).WithValues("destination", dest.Name)
	var target *notify.Target
	for {
		idx := slices.IndexFunc(rec.Status.Notifications, func(n v1alpha1.Notification) bool {
			d := deliveryOf(&n, dest.Name)
			return d != nil && d.DeliveredAt == nil && !d.GaveUp
		})
		if idx < 0 {
			return ctrl.Result{}, nil
		}
		n := &rec.Status.Notifications[idx]
		d := deliveryOf(n, dest.Name)
		now := r.now()
		if d.NextAttemptAt != nil && d.NextAttemptAt.After(now) {
			return ctrl.Result{RequeueAfter: d.NextAttemptAt.Sub(now)}, nil
		}
		var sendErr error
		if target == nil {
			t, err := notify.Resolve(ctx, r.Reader, p.Namespace, i, dest)
			var in *notify.InputError
			switch {
			case errors.As(err, &in):
				sendErr = err // the policy's Ready condition says it too; retried with backoff
			case err != nil:
				return ctrl.Result{}, err
			default:
				target = &t
			}
		}
		if sendErr == nil {
			body, ctype, err := notify.Body(dest.Type, notify.NewPayload(ref, n))
			if err != nil {
				return ctrl.Result{}, reconcile.TerminalError(err)
			}
			sendErr = notify.Send(ctx, r.httpClient(), *target, n.Key, body, ctype)
			if sendErr == nil && r.CrashAfterSend != nil && r.CrashAfterSend(n.Key, dest.Name) {
				r.crashed.Store(true)
				return ctrl.Result{}, ErrCrash
			}
		}
		key := n.Key
		attempt := func(d *v1alpha1.Delivery) {
			d.Attempts++
			if sendErr == nil {
				t := metav1.NewTime(r.now())
				d.DeliveredAt, d.NextAttemptAt, d.LastError = &t, nil, ""
				return
			}
			d.LastError = truncate(sendErr.Error(), 512)
			if d.Attempts >= notify.MaxAttempts {
				d.GaveUp, d.NextAttemptAt = true, nil
				return
			}
			// Status times are stored to the second: rounded up, the wait is never shorter.
			next := metav1.NewTime(r.now().Add(notify.Backoff(d.Attempts)).Truncate(time.Second).Add(time.Second))
			d.NextAttemptAt = &next
		}
		if err := r.writeDelivery(ctx, rec, key, dest.Name, attempt); err != nil {
			return ctrl.Result{}, err
		}
		if sendErr != nil {
			log.Info("notification not delivered; retrying with backoff", "key", key, "error", sendErr.Error())
		} else {
			log.V(1).Info("notification delivered", "key", key)
		}
	}
}

// writeDelivery applies an attempt's outcome to the record and writes it, with the record's
// resourceVersion as the lock. Faults (a reset, a timeout, a 5xx) are retried in place, and a
// conflict (another writer) by reading the record again: a delivery that is not recorded would
// be sent again.
func (r *Deliverer) writeDelivery(ctx context.Context, rec *v1alpha1.NotificationRecord, key, dest string, apply func(*v1alpha1.Delivery)) error {
	base := rec.DeepCopy()
	try := func() error {
		n := slices.IndexFunc(rec.Status.Notifications, func(n v1alpha1.Notification) bool { return n.Key == key })
		if n < 0 {
			return nil // pruned meanwhile
		}
		d := deliveryOf(&rec.Status.Notifications[n], dest)
		if d == nil || d.DeliveredAt != nil {
			return nil // a write that was reported failed had been applied
		}
		apply(d)
		return r.Client.Status().Update(ctx, rec)
	}
	var err error
	for n := 1; ; n++ {
		err = try()
		switch {
		case err == nil:
			return nil
		case fault.IsConflict(err):
			fresh := &v1alpha1.NotificationRecord{}
			if gerr := fault.Retry(ctx, 0, func() error { return r.Reader.Get(ctx, client.ObjectKeyFromObject(rec), fresh) }); gerr != nil {
				return gerr
			}
			*rec = *fresh
			base = fresh.DeepCopy()
		case fault.IsTransient(err):
			*rec = *base.DeepCopy() // the same write again: its resourceVersion still locks it
			// A write that timed out may have been applied: the retry then conflicts, and the
			// fresh read shows it.
		default:
			return err
		}
		if n >= 30 {
			return fmt.Errorf("recording the delivery of %s: %w", key, err)
		}
		t := time.NewTimer(fault.Backoff(n, 100*time.Millisecond, 3*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func deliveryOf(n *v1alpha1.Notification, dest string) *v1alpha1.Delivery {
	for i := range n.Deliveries {
		if n.Deliveries[i].Destination == dest {
			return &n.Deliveries[i]
		}
	}
	return nil
}

func (r *Deliverer) httpClient() *http.Client {
	if r.HTTP != nil {
		return r.HTTP
	}
	return http.DefaultClient
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
