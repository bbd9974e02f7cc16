package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// quiesceStep scales the operator's Deployments to 0 and removes its admission webhooks, so that
// neither the newer operator nor its webhooks interfere with the restore. Deployments that
// serve a conversion webhook the CRD step still needs are scaled down by that step instead.
type quiesceStep struct{}

func (quiesceStep) run(ctx context.Context, r *restorer) error {
	convServers, err := r.conversionServers(ctx)
	if err != nil {
		return err
	}
	for _, u := range r.operatorObjects() {
		gvk := u.GroupVersionKind()
		if isWebhookConfig(gvk) {
			ri, err := r.resource(u)
			if err != nil {
				return err
			}
			err = r.try(ctx, func() error { return ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{}) })
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("neutralizing webhook %s: %w", u.GetName(), err)
			}
			continue
		}
		if convServers[nsName(u)] {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("Deployment %s serves a conversion webhook; it keeps running until the CRDs no longer need it", nsName(u)))
			continue
		}
		if err := r.scaleToZero(ctx, u.GetNamespace(), u.GetName()); err != nil {
			return err
		}
	}
	return nil
}

// scaleToZero scales a Deployment to 0 replicas (one that is not there needs nothing).
func (r *restorer) scaleToZero(ctx context.Context, ns, name string) error {
	patch := []byte(`{"spec":{"replicas":0}}`)
	err := r.try(ctx, func() error {
		_, err := r.dyn.Resource(deploymentGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("scaling Deployment %s/%s to 0: %w", ns, name, err)
	}
	return nil
}
