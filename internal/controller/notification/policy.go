package notification

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/notify"
)

// PolicyReconciler checks a NotificationPolicy's selector and destinations (their Secrets,
// keys and URLs) and says in its Ready condition what is wrong and how to fix it. Secrets are
// not watched: a policy that is not Ready is checked again every RecheckAfter.
type PolicyReconciler struct {
	Client client.Client
	// Reader reads the Secrets from the API server.
	Reader client.Reader
	// RecheckAfter is how soon a policy that is not Ready is checked again (default 30s).
	RecheckAfter time.Duration
}

// SetupWithManager registers the reconciler.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("notificationpolicy").For(&v1alpha1.NotificationPolicy{}).
		WithOptions(fault.ControllerOptions(1)).Complete(r)
}

// Reconcile sets the policy's Ready (and Stalled) condition.
func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &v1alpha1.NotificationPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	reason, msg, err := r.check(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := p.DeepCopy()
	ready := metav1.ConditionTrue
	if reason != v1alpha1.ReasonDestinationsReady {
		ready = metav1.ConditionFalse
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: reason, Message: msg, ObservedGeneration: p.Generation})
	} else {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1alpha1.ConditionStalled)
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: ready,
		Reason: reason, Message: msg, ObservedGeneration: p.Generation})
	p.Status.ObservedGeneration = p.Generation
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, err
	}
	if ready == metav1.ConditionFalse {
		d := r.RecheckAfter
		if d <= 0 {
			d = 30 * time.Second
		}
		return ctrl.Result{RequeueAfter: d}, nil
	}
	return ctrl.Result{}, nil
}

// check returns the Ready reason and message; an error is the API server's.
func (r *PolicyReconciler) check(ctx context.Context, p *v1alpha1.NotificationPolicy) (string, string, error) {
	if p.Spec.Selector != nil {
		if _, err := metav1.LabelSelectorAsSelector(p.Spec.Selector); err != nil {
			return v1alpha1.ReasonInvalidSpec, fmt.Sprintf("spec.selector: %v; fix the label selector", err), nil
		}
	}
	for i := range p.Spec.Destinations {
		_, err := notify.Resolve(ctx, r.Reader, p.Namespace, i, &p.Spec.Destinations[i])
		var in *notify.InputError
		switch {
		case errors.As(err, &in):
			return in.Reason, in.Error(), nil
		case err != nil:
			return "", "", err
		}
	}
	return v1alpha1.ReasonDestinationsReady, fmt.Sprintf("%d destinations ready", len(p.Spec.Destinations)), nil
}
