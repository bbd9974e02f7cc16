package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
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
	if err != nil {
		r.setUnreachable(mc, v1alpha1.ReasonUnreachable, fmt.Sprintf("cannot reach the member's API server %s: %v", cl.Host(), err))
		return ctrl.Result{RequeueAfter: interval}, nil
	}
	mc.Status.ClusterID = info.ClusterID
	mc.Status.ServerVersion = info.ServerVersion
	mc.Status.Installed = member.Installed(info.Records)
	msg := fmt.Sprintf("API server %s answered (Kubernetes %s)", cl.Host(), info.ServerVersion)
	meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected,
		Message: msg, ObservedGeneration: mc.Generation,
	})
	meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConnected,
		Message: msg, ObservedGeneration: mc.Generation,
	})
	return ctrl.Result{RequeueAfter: interval}, nil
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
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.MemberCluster{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.membersForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: 8}).
		Complete(r)
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
