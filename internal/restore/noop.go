package restore

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// alreadyRestored reports whether the live cluster already equals the snapshot (and, with
// Prune, holds nothing created since). It compares page by page and stops at the first
// difference, so a cluster that needs a restore costs one page per kind, not a full LIST.
// A read that fails is returned: only what was read decides.
func (r *restorer) alreadyRestored(ctx context.Context) (bool, error) {
	want := map[schema.GroupVersionResource]map[string]*entry{}
	var order []schema.GroupVersionResource
	for _, e := range r.entries {
		if e.section == snapshot.SectionCRD {
			l, err := r.get(ctx, r.dyn.Resource(crdGVR), e.name)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("reading CRD %s: %w", e.name, err)
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
		if member.IsNotServed(err) {
			return false, nil // the kind is not even served
		}
		if err != nil {
			return false, err
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
		if member.IsNotServed(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		l, err := r.get(ctx, ri, e.name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", e.key(), err)
		}
		if !r.cmp.Equal(snap, l) {
			return false, nil
		}
	}
	for _, gvr := range order {
		found := map[string]bool{} // a page read again after a fault hands its objects again
		var gvk schema.GroupVersionKind
		for _, e := range want[gvr] {
			gvk = e.gvk
			break
		}
		same, err := r.eachLiveIn(ctx, gvr, gvk, namespacesOf(want[gvr]), func(it liveItem) error {
			l, err := it.object()
			if err != nil {
				return err
			}
			e := want[gvr][nsName(l)]
			if e == nil {
				return nil
			}
			found[nsName(l)] = true
			snap, err := e.object()
			if err != nil {
				return err
			}
			if !r.cmp.Equal(snap, l) {
				return errEnough
			}
			return nil
		})
		if apierrors.IsNotFound(err) {
			return false, nil // the kind is not served (its CRD was deleted since)
		}
		if err != nil {
			return false, err
		}
		if !same || len(found) < len(want[gvr]) {
			return false, nil
		}
	}
	type extra struct {
		gvk schema.GroupVersionKind
		key string
	}
	var kept []extra
	complete, err := r.eachCreatedSince(ctx, func(x *unstructured.Unstructured) error {
		if r.o.Prune {
			return errEnough // to be pruned: not restored
		}
		kept = append(kept, extra{x.GroupVersionKind(), keyOf(x)})
		return nil
	})
	if err != nil {
		return false, err
	}
	if !complete {
		return false, nil
	}
	for _, x := range kept {
		r.rep.count(x.gvk, outKept)
		r.rep.note(&r.rep.Kept, x.key)
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
