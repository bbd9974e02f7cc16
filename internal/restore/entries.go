package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// restoreSection restores the entries of one section, kind by kind, owners before children.
func (r *restorer) restoreSection(ctx context.Context, section string) error {
	var entries []*entry
	for _, e := range r.entries {
		if e.section == section && !(section == snapshot.SectionAssociated && r.held[e.key()]) {
			entries = append(entries, e)
		}
	}
	for _, level := range r.levels(entries) {
		if err := r.restoreEntries(ctx, level); err != nil {
			return err
		}
	}
	return nil
}

// levels orders entries so that an object's owners (within the set) come in an earlier level.
func (r *restorer) levels(entries []*entry) [][]*entry {
	inSet := map[types.UID]bool{}
	for _, e := range entries {
		inSet[e.uid] = true
	}
	placed := map[types.UID]bool{}
	var out [][]*entry
	rest := entries
	for len(rest) > 0 {
		var level, next []*entry
		for _, e := range rest {
			ready := true
			for _, ref := range e.owners {
				if inSet[ref.UID] && !placed[ref.UID] {
					ready = false
				}
			}
			if ready {
				level = append(level, e)
			} else {
				next = append(next, e)
			}
		}
		if len(level) == 0 { // an ownership cycle: restore the rest together
			level, next = next, nil
		}
		for _, e := range level {
			placed[e.uid] = true
		}
		out = append(out, level)
		rest = next
	}
	return out
}

// restoreEntries restores a set of entries whose owners are already restored. The live
// objects of each kind are paged through (one LIST per kind) and compared with their entries
// as they arrive: an object that already equals its entry is counted as unchanged and
// dropped, so that only the objects to write are held. Then the writes run in parallel.
func (r *restorer) restoreEntries(ctx context.Context, entries []*entry) error {
	type item struct {
		e    *entry
		live *unstructured.Unstructured
		// unchanged says live equals e already; uid is then its live UID.
		unchanged bool
		uid       types.UID
	}
	items := make([]item, len(entries))
	byKey := map[schema.GroupVersionResource]map[string][]int{}
	var kinds []schema.GroupVersionResource
	for i, e := range entries {
		gvr, namespaced, err := r.gvrFor(e.gvk)
		if err != nil {
			return err
		}
		gvr.Version = e.gvk.Version
		key := e.nsName()
		if !namespaced {
			key = "/" + e.name
		}
		items[i].e = e
		if byKey[gvr] == nil {
			byKey[gvr] = map[string][]int{}
			kinds = append(kinds, gvr)
		}
		byKey[gvr][key] = append(byKey[gvr][key], i)
	}
	for _, gvr := range kinds {
		keys := byKey[gvr]
		var decodeErr error
		_, err := r.eachLiveIn(ctx, gvr, namespacesOf(keys), func(l *unstructured.Unstructured) bool {
			idx := keys[nsName(l)]
			if len(idx) == 0 {
				return true
			}
			// A copy of the item, not a pointer into the page: holding one object must not
			// hold its whole page.
			var kept *unstructured.Unstructured
			for _, i := range idx {
				snap, err := items[i].e.object()
				if err != nil {
					decodeErr = err
					return false
				}
				if r.unchanged(snap, l) {
					items[i].unchanged, items[i].uid = true, l.GetUID()
					continue
				}
				if kept == nil {
					kept = &unstructured.Unstructured{Object: l.Object}
				}
				items[i].live = kept
			}
			return true
		})
		if decodeErr != nil {
			return decodeErr
		}
		if err != nil {
			return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
	}
	var writes []int
	for i := range items {
		if items[i].unchanged {
			r.setUID(items[i].e.uid, items[i].uid)
			r.rep.count(items[i].e.gvk, outUnchanged)
			continue
		}
		writes = append(writes, i)
	}
	return r.forEach(ctx, len(writes), func(i int) error {
		it := items[writes[i]]
		desired, err := r.desiredFrom(ctx, it.e)
		if err != nil {
			return err
		}
		hasStatus := !IsBuiltin(it.e.gvk)
		out, uid, err := r.put(ctx, desired, it.live, hasStatus)
		if err != nil {
			return err
		}
		r.setUID(it.e.uid, uid)
		r.rep.count(it.e.gvk, out)
		return nil
	})
}

// unchanged says whether live already equals the object desiredFrom would make of snap, as
// put decides it, without any request: when an owner's live UID is not known yet, it says
// no and leaves the decision to desiredFrom and put. snap is the caller's own decoded copy
// (entry.object): its ownerReferences are remapped in place.
func (r *restorer) unchanged(snap, live *unstructured.Unstructured) bool {
	if refs := snap.GetOwnerReferences(); len(refs) > 0 {
		for i, ref := range refs {
			uid, ok := r.liveUID(ref.UID)
			if !ok {
				return false
			}
			refs[i].UID = uid
		}
		snap.SetOwnerReferences(refs)
	}
	return r.cmp.Equal(snap, live) && ownerUIDsEqual(snap, live)
}

// desiredFrom prepares the object to write from a snapshot entry: ownerReferences remapped
// to the live owners' UIDs. Owners that do not exist are dropped (and noted), so the garbage
// collector does not delete the restored object.
func (r *restorer) desiredFrom(ctx context.Context, e *entry) (*unstructured.Unstructured, error) {
	u, err := e.object()
	if err != nil {
		return nil, err
	}
	refs := u.GetOwnerReferences()
	if len(refs) == 0 {
		return u, nil
	}
	var out []metav1.OwnerReference
	for _, ref := range refs {
		if live, ok := r.liveUID(ref.UID); ok {
			ref.UID = live
			out = append(out, ref)
			continue
		}
		// Not restored by us: look the owner up by kind, namespace and name.
		owner := &unstructured.Unstructured{}
		owner.SetAPIVersion(ref.APIVersion)
		owner.SetKind(ref.Kind)
		owner.SetName(ref.Name)
		owner.SetNamespace(u.GetNamespace())
		ri, err := r.resource(owner)
		if err != nil {
			return nil, err
		}
		live, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("%s: owner %s %s no longer exists; its ownerReference was dropped so the garbage collector keeps the object", keyOf(u), ref.Kind, ref.Name))
			continue
		}
		if err != nil {
			return nil, err
		}
		r.setUID(ref.UID, live.GetUID())
		ref.UID = live.GetUID()
		out = append(out, ref)
	}
	u.SetOwnerReferences(out)
	return u, nil
}
