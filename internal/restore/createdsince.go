package restore

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/member"
)

// createdSinceStep keeps (and reports) or, with Options.Prune, deletes the objects created
// after the snapshot. Run again after it was cut half way, it finds what it did not delete
// yet (what it deleted is gone, or terminating: deleted again, which changes nothing).
type createdSinceStep struct{}

func (createdSinceStep) run(ctx context.Context, r *restorer) error {
	if !r.o.Prune {
		return createdSinceStep{}.report(ctx, r)
	}
	_, err := r.eachCreatedSince(ctx, func(x *unstructured.Unstructured) error {
		ri, err := r.resource(x)
		if err != nil {
			return err
		}
		bg := metav1.DeletePropagationBackground
		err = r.try(ctx, func() error {
			return ri.Delete(ctx, x.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("pruning %s: %w", keyOf(x), err)
		}
		r.rep.count(x.GroupVersionKind(), outPruned)
		r.rep.note(&r.rep.Pruned, keyOf(x))
		return nil
	})
	return err
}

// report lists the objects created since the snapshot that the step keeps, reading only: a
// restore resumed past the step (its journal says it is done) reports them all the same.
// What an earlier run pruned is gone; a resumed run says so.
func (createdSinceStep) report(ctx context.Context, r *restorer) error {
	if r.o.Prune {
		r.rep.note(&r.rep.Notes, "objects created since the snapshot were pruned by an earlier run of this restore")
		return nil
	}
	_, err := r.eachCreatedSince(ctx, func(x *unstructured.Unstructured) error {
		r.rep.count(x.GroupVersionKind(), outKept)
		r.rep.note(&r.rep.Kept, keyOf(x))
		return nil
	})
	return err
}

// eachCreatedSince hands fn, one at a time as they are found, the live objects the snapshot
// does not hold: custom resources of the snapshot's kinds, objects of the owned kinds
// (Options.OwnedKinds) owned by a custom resource of those kinds, and objects the release
// installed now defines (Options.Current). The first two are paged through as metadata only
// (names, owners: what decides) and handed as objects that hold only their metadata; none is
// held. fn's errEnough ends it early, and it then reports false. A read that fails is
// returned: only a kind that is not served (a CRD deleted since, a version no longer served)
// is taken to hold nothing created since.
func (r *restorer) eachCreatedSince(ctx context.Context, fn func(*unstructured.Unstructured) error) (bool, error) {
	inSnap := map[string]bool{}
	for _, e := range r.entries {
		inSnap[e.key()] = true
	}
	// The objects the release installed now defines that the snapshot lacks, named as they
	// live (a namespaced object without a namespace goes to the release's); read last, and
	// left out of the lists so that none is handed twice.
	var current []*unstructured.Unstructured
	for _, c := range r.o.Current {
		if c.GetKind() == "CustomResourceDefinition" {
			continue
		}
		probe := c.DeepCopy()
		_, namespaced, err := r.gvrFor(probe.GroupVersionKind())
		if member.IsNotServed(err) {
			continue // not served: none of it exists
		}
		if err != nil {
			return false, err
		}
		switch {
		case !namespaced:
			probe.SetNamespace("")
		case probe.GetNamespace() == "":
			probe.SetNamespace(r.o.Header.Namespace)
		}
		if k := keyOf(probe); !inSnap[k] {
			inSnap[k] = true
			current = append(current, probe)
		}
	}
	crKinds := map[schema.GroupKind]bool{}
	for gk := range r.crdGVR {
		crKinds[gk] = true
	}
	// each hands fn the objects of gvr the snapshot does not hold among those pick selects.
	each := func(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, pick func(*metav1.PartialObjectMetadata) bool) (bool, error) {
		return r.eachMeta(ctx, gvr, func(m *metav1.PartialObjectMetadata) error {
			if !pick(m) || inSnap[keyFor(gvk.GroupKind(), m.Namespace, m.Name)] {
				return nil
			}
			u, err := metaObject(m, gvk)
			if err != nil {
				return err
			}
			return fn(u)
		})
	}
	for gk, gvr := range r.crdGVR {
		complete, err := each(gvr, gk.WithVersion(gvr.Version), func(*metav1.PartialObjectMetadata) bool { return true })
		if apierrors.IsNotFound(err) {
			continue // the kind is not served: nothing of it was created since
		}
		if err != nil || !complete {
			return false, err
		}
	}
	for _, gvr := range r.o.OwnedKinds {
		gvk, err := r.cl.Mapper().KindFor(gvr)
		if err != nil {
			return false, fmt.Errorf("mapping %s: %w", gvr, err)
		}
		complete, err := each(gvr, gvk, func(m *metav1.PartialObjectMetadata) bool {
			for _, ref := range m.OwnerReferences {
				if crKinds[schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind).GroupKind()] {
					return true
				}
			}
			return false
		})
		if err != nil || !complete {
			return false, err
		}
	}
	for _, probe := range current {
		ri, err := r.resource(probe)
		if err != nil {
			return false, err
		}
		l, err := r.get(ctx, ri, probe.GetName())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading %s, which the release installed now defines: %w", keyOf(probe), err)
		}
		if err := fn(l); errors.Is(err, errEnough) {
			return false, nil
		} else if err != nil {
			return false, err
		}
	}
	return true, nil
}
