package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/patch"
)

// DefaultCheckInterval is how often a member is checked when spec.checkInterval is unset.
const DefaultCheckInterval = 30 * time.Second

// MemberClusterReconciler checks each member cluster: reachable, its cluster ID and server
// version, and its installed-version records, mirrored into status.
type MemberClusterReconciler struct {
	client.Client
	// Members gives access to member clusters (it reads kubeconfig Secrets uncached).
	Members *member.Cache
	// APIReader reads pull members' Leases uncached (nil: Client).
	APIReader client.Reader
	// Probes is the health probe whose verdict is the Reachable condition (nil: the check's
	// own outcome decides, as for a member checked outside the controller).
	Probes *member.Prober
	// CheckTimeout bounds one check of a member.
	CheckTimeout time.Duration
	// Now is the clock (tests inject one).
	Now func() time.Time
}

// Reconcile checks one member.
func (r *MemberClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	mc := &v1alpha1.MemberCluster{}
	if err := r.Get(ctx, req.NamespacedName, mc); err != nil {
		if apierrors.IsNotFound(err) {
			// A deleted member's clients are dropped: a fleet whose members come and go does
			// not keep every past member's connections and discovery.
			r.Members.Forget(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	h := patch.NewHelper(mc, r.Client)
	defer func() { res, retErr = h.Done(ctx, mc, res, retErr) }()

	interval := DefaultCheckInterval
	if mc.Spec.CheckInterval != nil && mc.Spec.CheckInterval.Duration > 0 {
		interval = mc.Spec.CheckInterval.Duration
	}
	now := metav1.NewTime(r.now())
	mc.Status.LastCheckTime = &now
	mc.Status.ObservedGeneration = mc.Generation

	if mc.Spec.Mode == v1alpha1.ModePull {
		// The hub cannot reach a pull member: what it knows comes from the member's agent.
		return r.checkPull(ctx, mc, interval)
	}
	cl, err := r.Members.For(ctx, mc)
	if err != nil {
		var se *member.SecretError
		if errors.As(err, &se) {
			r.setUnreachable(mc, se.Reason, se.Message)
			// A person must fix the Secret; its change triggers a new check.
			return ctrl.Result{RequeueAfter: interval}, nil
		}
		return ctrl.Result{}, err
	}
	timeout := r.CheckTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	checkCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := cl.Check(checkCtx)
	probed := r.setProbe(mc, cl.Host())
	if err != nil {
		msg := fmt.Sprintf("cannot check the member's API server %s: %v", cl.Host(), err)
		if probed {
			// One failed check is not a verdict on reachability: the probe gives it.
			meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonUnreachable,
				Message: msg, ObservedGeneration: mc.Generation,
			})
		} else {
			r.setUnreachable(mc, v1alpha1.ReasonUnreachable, msg)
		}
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	mc.Status.ClusterID = info.ClusterID
	mc.Status.ServerVersion = info.ServerVersion
	mc.Status.Installed = member.Installed(info.Records)
	msg := fmt.Sprintf("API server %s answered (Kubernetes %s)", cl.Host(), info.ServerVersion)
	if !probed {
		meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected,
			Message: msg, ObservedGeneration: mc.Generation,
		})
	}
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected,
		Message: msg, ObservedGeneration: mc.Generation}
	if c := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable); c != nil && c.Status == metav1.ConditionFalse {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, c.Reason, c.Message
	}
	meta.SetStatusCondition(&mc.Status.Conditions, ready)
	return ctrl.Result{RequeueAfter: interval}, nil
}

// setProbe writes the health probe's verdict (the Reachable condition, the last success and
// the failures since) and says whether there was one.
func (r *MemberClusterReconciler) setProbe(mc *v1alpha1.MemberCluster, host string) bool {
	pr, ok := r.Probes.Get(mc.Name)
	if !ok {
		return false
	}
	mc.Status.ConsecutiveProbeFailures = int32(pr.ConsecutiveFailures)
	if !pr.LastSuccess.IsZero() {
		t := metav1.NewTime(pr.LastSuccess)
		mc.Status.LastProbeSuccessTime = &t
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected,
		Message: fmt.Sprintf("API server %s answers the health probe", host), ObservedGeneration: mc.Generation}
	if pr.ConsecutiveFailures >= r.Probes.Threshold() {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonUnreachable
		cond.Message = fmt.Sprintf("the health probe of API server %s failed %d times in a row since %s: %s",
			host, pr.ConsecutiveFailures, pr.FailingSince.UTC().Format(time.RFC3339), pr.LastError)
	} else if pr.ConsecutiveFailures > 0 {
		cond.Message = fmt.Sprintf("API server %s answered the health probe at %s; %d probes failed since (%s)",
			host, pr.LastSuccess.UTC().Format(time.RFC3339), pr.ConsecutiveFailures, pr.LastError)
	}
	meta.SetStatusCondition(&mc.Status.Conditions, cond)
	return true
}

func (r *MemberClusterReconciler) setUnreachable(mc *v1alpha1.MemberCluster, reason, msg string) {
	for _, t := range []string{v1alpha1.ConditionReachable, v1alpha1.ConditionReady} {
		meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
			Type: t, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: mc.Generation,
		})
	}
}

func (r *MemberClusterReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// +kubebuilder:rbac:groups=rewind.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=memberclusters/status,verbs=get;update;patch

// SetupWithManager registers the reconciler. A change to a kubeconfig Secret re-checks the
// members that use it. Several members are checked at once so that an unreachable one never
// holds up the others.
func (r *MemberClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.MemberCluster{}, builder.WithPredicates(predicate.Funcs{UpdateFunc: notOwnCheck})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.membersForSecret)).
		WithOptions(fault.ControllerOptions(8))
	if r.Probes != nil {
		// A member whose probe verdict changed is written at once, not at its next check.
		changed := make(chan event.GenericEvent, 1024)
		r.Probes.Changed = func(name string) {
			select {
			case changed <- event.GenericEvent{Object: &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}}:
			default: // full: its next check writes it
			}
		}
		b = b.WatchesRawSource(source.Channel(changed, &handler.EnqueueRequestForObject{}))
		if err := mgr.Add(r.Probes); err != nil {
			return err
		}
	}
	return b.Complete(r)
}

// notOwnCheck passes a MemberCluster's update unless it changed only what a check writes
// itself (status.lastCheckTime, observedGeneration, the conditions, the probe's and the
// heartbeat's times): its own write must not start the next check. Before, a check that
// changed more than its time (a pull member's heartbeat time and message, a push member's
// probe time) started a second check at once, which wrote again: two Lease reads and two
// status writes per check, a sixth of the hub controller's requests at 1,000 pull members. A
// change of the spec, the metadata or anything else in the status, such as an agent's write
// (cluster ID, version) or a join's (status.agent), still checks the member.
func notOwnCheck(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*v1alpha1.MemberCluster)
	cur, ok2 := e.ObjectNew.(*v1alpha1.MemberCluster)
	if !ok1 || !ok2 {
		return true
	}
	a, b := old.DeepCopy(), cur.DeepCopy()
	for _, mc := range []*v1alpha1.MemberCluster{a, b} {
		mc.ResourceVersion, mc.ManagedFields = "", nil
		st := &mc.Status
		st.LastCheckTime, st.ObservedGeneration, st.Conditions = nil, 0, nil
		st.LastProbeSuccessTime, st.ConsecutiveProbeFailures = nil, 0
		if st.Agent != nil {
			st.Agent.LastHeartbeatTime = nil
		}
	}
	return !equality.Semantic.DeepEqual(a, b)
}

func (r *MemberClusterReconciler) membersForSecret(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.MemberClusterList
	if err := r.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, mc := range list.Items {
		ref := mc.Spec.KubeconfigSecretRef
		if ref.Namespace == o.GetNamespace() && ref.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: mc.Name}})
		}
	}
	return out
}
