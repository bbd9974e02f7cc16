package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// migrate rewrites every custom resource of gvk (resource gvr, at the storage version it
// must be stored at) as it is, so that the API server stores it at that version: what
// kube-storage-version-migrator does. It pages through them, each page sized to about one
// working set (Options.WorkingSet) from the objects' mean size, and writes every object of a
// page before it reads the next: it holds one working set, however many objects the kind has.
//
// It is idempotent: run again after it was cut half way, it rewrites every object again, and
// rewriting an object already stored at the version changes nothing (the API server does not
// even write it to etcd). An object deleted meanwhile needs nothing; one changed meanwhile
// (a conflict) is read again and rewritten all the same.
func (r *restorer) migrate(ctx context.Context, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) error {
	first := true
	b := newBatch(r, func(ctx context.Context, items []liveItem) error {
		if first && r.o.At != nil {
			first = false
			r.o.At("migrate " + gvr.GroupResource().String())
		}
		return r.forEach(ctx, len(items), func(i int) error { return r.rewrite(ctx, gvr, items[i]) })
	})
	err := r.eachLive(ctx, listing{
		gvr: gvr, gvk: gvk, pageBytes: r.o.WorkingSet,
		pageDone: func() error { return b.flush(ctx) },
	}, func(it liveItem) error {
		return b.add(ctx, it, int64(len(it.raw)))
	})
	if err := b.done(ctx, err); err != nil {
		return fmt.Errorf("migrating %s to %s: %w", gvr.GroupResource(), gvr.Version, err)
	}
	return nil
}

// rewrite writes a live object back unchanged (with the resourceVersion it was read at).
func (r *restorer) rewrite(ctx context.Context, gvr schema.GroupVersionResource, it liveItem) error {
	u, err := it.object()
	if err != nil {
		return err
	}
	ri := r.dyn.Resource(gvr).Namespace(u.GetNamespace())
	for attempt := 0; attempt <= maxConflicts; attempt++ {
		err := r.try(ctx, func() error {
			_, err := ri.Update(ctx, u, metav1.UpdateOptions{})
			return err
		})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			// Changed since it was read (perhaps by an earlier try of this very write, whose
			// answer was lost): read it again and rewrite it.
			var cur *unstructured.Unstructured
			if cur, err = r.get(ctx, ri, u.GetName()); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return fmt.Errorf("reading %s %s: %w", gvr.Resource, nsName(u), err)
			}
			u = cur
			continue
		}
		return fmt.Errorf("rewriting %s %s: %w", gvr.Resource, nsName(u), err)
	}
	return fmt.Errorf("%s %s kept changing while it was rewritten", gvr.Resource, nsName(u))
}
