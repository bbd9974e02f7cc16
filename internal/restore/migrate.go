package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// migrate rewrites every object of gvr unchanged, so the API server stores it at the current
// storage version (what kube-storage-version-migrator does).
func (r *restorer) migrate(ctx context.Context, gvr schema.GroupVersionResource) error {
	live, err := r.listLive(ctx, gvr)
	if err != nil {
		return fmt.Errorf("listing %s for the storage migration: %w", gvr.Resource, err)
	}
	items := make([]*unstructured.Unstructured, 0, len(live))
	for _, u := range live {
		items = append(items, u)
	}
	return r.forEach(ctx, len(items), func(i int) error {
		u := items[i]
		ri := r.dyn.Resource(gvr).Namespace(u.GetNamespace())
		for attempt := 0; ; attempt++ {
			_, err := ri.Update(ctx, u, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if apierrors.IsConflict(err) && attempt < 10 {
				if u, err = ri.Get(ctx, u.GetName(), metav1.GetOptions{}); err != nil {
					if apierrors.IsNotFound(err) {
						return nil
					}
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("migrating %s %s/%s: %w", gvr.Resource, u.GetNamespace(), u.GetName(), err)
			}
			return nil
		}
	})
}
