package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// DefaultProbeInterval is how often a SnapshotStore is probed when spec.probeInterval is unset.
const DefaultProbeInterval = 5 * time.Minute

// NotReadyReprobe is how soon a SnapshotStore that is not Ready is probed again (its
// spec.probeInterval when shorter): a store that was away, or a bucket or key a person mended,
// is Ready again within it, and targets waiting for it go on. Before, one probe that met a
// blip of the store kept it not Ready, and every cluster's snapshot waiting, for the whole
// interval (5 minutes by default).
const NotReadyReprobe = 30 * time.Second

// FinalizerSnapshotsStored keeps a SnapshotStore while Snapshots of its namespace say their
// payload is in it: without it, they could not be read.
const FinalizerSnapshotsStored = "rewind.dev/snapshots-stored"

// ReasonInUse (SnapshotStore Ready): the store is being deleted but Snapshots still live in it.
const ReasonInUse = "InUse"

// SnapshotStoreReconciler checks each SnapshotStore periodically: a small object is written,
// read back and deleted (Writable), and a data key is wrapped and unwrapped with its key
// (KeyAvailable). Ready is both.
type SnapshotStoreReconciler struct {
	// Client reads and writes SnapshotStores; it must read Secrets from the API server.
	Client client.Client
	// ProbeTimeout bounds each check of a probe, the store's and its key's (default 30s).
	ProbeTimeout time.Duration
	// Now is the clock (tests inject one).
	Now func() time.Time
}

// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores/status,verbs=get;update;patch

// Reconcile probes one store and records the outcome in its status.
func (r *SnapshotStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	st := &v1alpha1.SnapshotStore{}
	if err := r.Client.Get(ctx, req.NamespacedName, st); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if st.Labels[v1alpha1.LabelSourceNamespace] != "" {
		// A pull member's copy of a store: the hub's target relay keeps it, with the Ready
		// condition of its source; the member's agent uses it, the hub does not probe it.
		return ctrl.Result{}, nil
	}
	if !st.DeletionTimestamp.IsZero() {
		return r.deleting(ctx, st)
	}
	if controllerutil.AddFinalizer(st, FinalizerSnapshotsStored) {
		if err := r.Client.Update(ctx, st); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	interval := DefaultProbeInterval
	if st.Spec.ProbeInterval != nil && st.Spec.ProbeInterval.Duration > 0 {
		interval = st.Spec.ProbeInterval.Duration
	}
	// Probed within the interval at this generation (a Snapshot deletion or a restart woke
	// us): the result stands until the next probe is due.
	if st.Status.ObservedGeneration == st.Generation && st.Status.LastProbeTime != nil {
		if wait := st.Status.LastProbeTime.Add(reprobe(st, interval)).Sub(r.now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	// Its own status writes do not wake it (only a generation change does): a write that
	// conflicts is requeued by Done.
	h := patch.NewHelper(st, r.Client)
	defer func() { res, retErr = h.Done(ctx, st, res, retErr) }()
	timeout := r.ProbeTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	r.probe(ctx, st, timeout)
	now := metav1.NewTime(r.now())
	st.Status.LastProbeTime = &now
	st.Status.ObservedGeneration = st.Generation
	return ctrl.Result{RequeueAfter: reprobe(st, interval)}, nil
}

// reprobe is how long after a probe st is probed again: its interval when Ready, at most
// NotReadyReprobe when not.
func reprobe(st *v1alpha1.SnapshotStore, interval time.Duration) time.Duration {
	if !meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady) {
		return min(interval, NotReadyReprobe)
	}
	return interval
}

// probeRetryWindow is how long a probe of a store or of its key that meets faults
// (fault.IsTransient: a 429 or 5xx, a reset, a throttled KMS) is tried again in place: a blip
// does not make the store not Ready, and a store that stays away holds a worker no longer than
// this (it is probed again after NotReadyReprobe).
const probeRetryWindow = 10 * time.Second

// probe sets the Writable, KeyAvailable and Ready conditions of st. The store and its key are
// each checked within timeout, their faults tried again for probeRetryWindow.
func (r *SnapshotStoreReconciler) probe(ctx context.Context, st *v1alpha1.SnapshotStore, timeout time.Duration) {
	set := func(typ string, err error, okReason, okMsg string) {
		c := metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: okReason, Message: okMsg, ObservedGeneration: st.Generation}
		if err != nil {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, snapstore.Reason(err), err.Error()
		}
		meta.SetStatusCondition(&st.Status.Conditions, c)
	}
	st.Status.URL = snapstore.URLOf(st)
	keyName := snapstore.KeyName(st.Namespace, st.Spec.KeyRef)
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := snapstore.StoreOnly(sctx, r.Client, st)
	var storeErr error
	if err != nil {
		storeErr = err
	} else {
		name := snapstore.NewProbeName()
		storeErr = fault.RetryFor(sctx, probeRetryWindow, func() error { return snapstore.ProbeStoreNamed(sctx, s, name) })
	}
	set(v1alpha1.ConditionWritable, storeErr, v1alpha1.ReasonProbeSucceeded, "a probe object was written, read back and deleted at "+st.Status.URL)

	kctx, cancelKey := context.WithTimeout(ctx, timeout)
	defer cancelKey()
	kek, keyErr := snapstore.OpenKey(kctx, r.Client, st.Namespace, st.Spec.KeyRef, st.Spec.CredentialsSecretRef)
	if keyErr == nil {
		st.Status.KeyID = kek.ID()
		if err := fault.RetryFor(kctx, probeRetryWindow, func() error { return snapstore.ProbeKey(kctx, kek) }); err != nil {
			keyErr = &snapstore.KeyError{Key: keyName, Err: err}
		}
	}
	set(v1alpha1.ConditionKeyAvailable, keyErr, v1alpha1.ReasonKeyAvailable, "data keys are wrapped with "+keyName+" (ID "+st.Status.KeyID+")")

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProbeSucceeded,
		Message: fmt.Sprintf("snapshots can be stored at %s, wrapped with %s", st.Status.URL, keyName), ObservedGeneration: st.Generation}
	switch {
	case storeErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, snapstore.Reason(storeErr), storeErr.Error()
	case keyErr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonKeyUnavailable, keyErr.Error()
	}
	meta.SetStatusCondition(&st.Status.Conditions, ready)
}

// deleting lets a store go once no Snapshot of its namespace is stored in it; until then it
// says which ones hold it.
func (r *SnapshotStoreReconciler) deleting(ctx context.Context, st *v1alpha1.SnapshotStore) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(st, FinalizerSnapshotsStored) {
		return ctrl.Result{}, nil
	}
	var snaps v1alpha1.SnapshotList
	if err := r.Client.List(ctx, &snaps, client.InNamespace(st.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var using []string
	for _, s := range snaps.Items {
		if s.Status.Store == st.Name && s.DeletionTimestamp.IsZero() {
			using = append(using, s.Name)
		}
	}
	if len(using) == 0 {
		controllerutil.RemoveFinalizer(st, FinalizerSnapshotsStored)
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, st))
	}
	h := patch.NewHelper(st, r.Client)
	shown := using
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(using)-5))
	}
	meta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonInUse,
		ObservedGeneration: st.Generation,
		Message:            fmt.Sprintf("being deleted, but %d Snapshots are stored in it (%s): delete them first (rewind snapshot list; kubectl delete snapshot NAME), or remove the finalizer %s to keep their payloads unreachable", len(using), strings.Join(shown, ", "), FinalizerSnapshotsStored)})
	return h.Done(ctx, st, ctrl.Result{RequeueAfter: time.Minute}, nil)
}

func (r *SnapshotStoreReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager registers the reconciler. Only spec changes and deletion (and the periodic
// requeue) trigger a probe, not its own status writes.
func (r *SnapshotStoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.SnapshotStore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A store being deleted waits for its last Snapshot: its deletion lets the store go.
		Watches(&v1alpha1.Snapshot{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			s, ok := o.(*v1alpha1.Snapshot)
			if !ok || s.Status.Store == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: s.Status.Store}}}
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(event.CreateEvent) bool { return false },
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return true },
		})).
		Named("snapshotstore").
		// A store that does not answer holds its worker for its probe (probeRetryWindow, its
		// timeout): the others are probed meanwhile.
		WithOptions(fault.ControllerOptions(4)).
		Complete(r)
}
