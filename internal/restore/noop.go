package restore

import (
	"context"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// alreadyRestored reports whether the live cluster already equals the snapshot (and, with
// Prune, holds nothing created since). It compares page by page and stops at the first
// difference, so a cluster that needs a restore costs one page per kind, not a full LIST.
func (r *restorer) alreadyRestored(ctx context.Context) (bool, error) {
	want := map[schema.GroupVersionResource]map[string]*entry{}
	var order []schema.GroupVersionResource
	for _, e := range r.entries {
		if e.section == snapshot.SectionCRD {
			l, err := r.dyn.Resource(crdGVR).Get(ctx, e.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			snap, err := e.object()
			if err != nil {
				return false, err
			}
			if !crdEqual(snap, l) {
				return false, nil
			}
			continue
		}
		gvr, _, err := r.gvrFor(e.gvk)
		if err != nil {
			return false, nil // the kind is not even served
		}
		gvr.Version = e.gvk.Version
		if want[gvr] == nil {
			want[gvr] = map[string]*entry{}
			order = append(order, gvr)
		}
		want[gvr][e.nsName()] = e
	}
	// After an upgrade the operator's own objects are what differs: a GET or two settles most
	// rollbacks before any LIST.
	for _, e := range r.entries {
		if e.section != snapshot.SectionAssociated || !r.held[e.key()] {
			continue
		}
		snap, err := e.object()
		if err != nil {
			return false, err
		}
		ri, err := r.resource(snap)
		if err != nil {
			return false, nil
		}
		l, err := ri.Get(ctx, e.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !r.cmp.Equal(snap, l) {
			return false, nil
		}
	}
	for _, gvr := range order {
		found := 0
		var decodeErr error
		same, err := r.eachLiveIn(ctx, gvr, namespacesOf(want[gvr]), func(l *unstructured.Unstructured) bool {
			e := want[gvr][nsName(l)]
			if e == nil {
				return true
			}
			found++
			snap, err := e.object()
			if err != nil {
				decodeErr = err
				return false
			}
			return r.cmp.Equal(snap, l)
		})
		if decodeErr != nil {
			return false, decodeErr
		}
		if err != nil || !same || found < len(want[gvr]) {
			return false, nil
		}
	}
	extras, err := r.findCreatedSince(ctx)
	if err != nil {
		return false, err
	}
	for _, x := range extras {
		if r.o.Prune {
			return false, nil
		}
		r.rep.count(x.GroupVersionKind(), outKept)
		r.rep.note(&r.rep.Kept, keyOf(x))
	}
	for _, e := range r.entries {
		r.rep.count(e.gvk, outUnchanged)
	}
	return true, nil
}

// crdEqual compares a snapshot CRD with a live one: spec, labels, annotations and
// status.storedVersions.
func crdEqual(snap, live *unstructured.Unstructured) bool {
	if !Equal(snap, live) {
		return false
	}
	a, _, _ := unstructured.NestedStringSlice(snap.Object, "status", "storedVersions")
	b, _, _ := unstructured.NestedStringSlice(live.Object, "status", "storedVersions")
	return reflect.DeepEqual(a, b)
}
