package restore

import (
	"context"
	"errors"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// findCreatedSince returns live objects the snapshot does not hold: CRs of the snapshot's
// kinds, children (among the owned kinds) of the snapshot's CRs, and objects the current
// release defines.
func (r *restorer) findCreatedSince(ctx context.Context) ([]*unstructured.Unstructured, error) {
	inSnap := map[string]bool{}
	for _, e := range r.entries {
		inSnap[e.key()] = true
	}
	var out []*unstructured.Unstructured
	seen := map[string]bool{}
	add := func(u *unstructured.Unstructured) {
		k := keyOf(u)
		if !inSnap[k] && !seen[k] {
			seen[k] = true
			out = append(out, u)
		}
	}
	// listNew pages through the metadata of gvr and returns the objects the snapshot does not
	// hold among those pick selects (made into objects only then), without holding the list.
	listNew := func(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, pick func(*metav1.PartialObjectMetadata) bool) ([]*unstructured.Unstructured, error) {
		var found []*unstructured.Unstructured
		var convErr error
		_, err := r.eachMeta(ctx, gvr, func(m *metav1.PartialObjectMetadata) bool {
			if !pick(m) || inSnap[keyFor(gvk.GroupKind(), m.Namespace, m.Name)] {
				return true
			}
			u, err := metaObject(m, gvk)
			if err != nil {
				convErr = err
				return false
			}
			found = append(found, u)
			return true
		})
		return found, errors.Join(err, convErr)
	}
	// Only metadata decides (names, UIDs, owners): metadata-only lists cost the API server
	// and this process a fraction of full ones, and they are not held.
	crUIDs := map[types.UID]bool{}
	for gk, gvr := range r.crdGVR {
		uids := map[types.UID]bool{}
		found, err := listNew(gvr, gk.WithVersion(gvr.Version), func(m *metav1.PartialObjectMetadata) bool {
			uids[m.UID] = true
			return true
		})
		if err != nil {
			continue // the kind is not served (yet): nothing of it was created since
		}
		maps.Copy(crUIDs, uids)
		for _, u := range found {
			add(u)
		}
	}
	for _, gvr := range r.o.OwnedKinds {
		gvk, err := r.cl.Mapper().KindFor(gvr)
		if err != nil {
			return nil, fmt.Errorf("mapping %s: %w", gvr, err)
		}
		found, err := listNew(gvr, gvk, func(m *metav1.PartialObjectMetadata) bool {
			for _, ref := range m.OwnerReferences {
				if crUIDs[ref.UID] {
					return true
				}
			}
			return false
		})
		if err != nil {
			return nil, err
		}
		for _, u := range found {
			add(u)
		}
	}
	for _, c := range r.o.Current {
		if c.GetKind() == "CustomResourceDefinition" {
			continue
		}
		probe := c.DeepCopy()
		_, namespaced, err := r.gvrFor(probe.GroupVersionKind())
		if err != nil {
			continue
		}
		switch {
		case !namespaced:
			probe.SetNamespace("")
		case probe.GetNamespace() == "":
			probe.SetNamespace(r.o.Header.Namespace)
		}
		ri, err := r.resource(probe)
		if err != nil {
			continue
		}
		l, err := ri.Get(ctx, probe.GetName(), metav1.GetOptions{})
		if err == nil {
			add(l)
		}
	}
	return out, nil
}

// createdSinceStep keeps (and reports) or prunes the objects created after the snapshot.
type createdSinceStep struct{}

func (createdSinceStep) run(ctx context.Context, r *restorer) error {
	extras, err := r.findCreatedSince(ctx)
	if err != nil {
		return err
	}
	for _, x := range extras {
		if !r.o.Prune {
			r.rep.count(x.GroupVersionKind(), outKept)
			r.rep.note(&r.rep.Kept, keyOf(x))
			continue
		}
		ri, err := r.resource(x)
		if err != nil {
			return err
		}
		bg := metav1.DeletePropagationBackground
		if err := ri.Delete(ctx, x.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning %s: %w", keyOf(x), err)
		}
		r.rep.count(x.GroupVersionKind(), outPruned)
		r.rep.note(&r.rep.Pruned, keyOf(x))
	}
	return nil
}
