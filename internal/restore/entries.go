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
// objects of each kind are paged through (one LIST per kind, or per namespace) and compared
// with their entries as they arrive: an object that already equals its entry is counted as
// unchanged and dropped; one that differs is kept, as its JSON, until a working set of them
// is held (Options.WorkingSet), and then they are written, in parallel, before more are
// read. Entries with no live object are created at the end. Run again after it was cut half
// way, it finds what it wrote equal and writes the rest.
func (r *restorer) restoreEntries(ctx context.Context, entries []*entry) error {
	type item struct {
		e *entry
		// unchanged says the live object equals e already; uid is then its live UID.
		unchanged bool
		uid       types.UID
		// seen says the live object was found; written says it was handed to a write (a
		// page read again after a fault hands its objects again).
		seen, written bool
	}
	items := make([]item, len(entries))
	byKey := map[schema.GroupVersionResource]map[string][]int{}
	kindOf := map[schema.GroupVersionResource]schema.GroupVersionKind{}
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
			kindOf[gvr] = e.gvk
			kinds = append(kinds, gvr)
		}
		byKey[gvr][key] = append(byKey[gvr][key], i)
	}
	// write makes the live object of items[i] (nil: none) equal its entry.
	write := func(ctx context.Context, i int, live *unstructured.Unstructured) error {
		it := items[i]
		desired, err := r.desiredFrom(ctx, it.e)
		if err != nil {
			return err
		}
		out, uid, err := r.put(ctx, desired, live, !IsBuiltin(it.e.gvk))
		if err != nil {
			return err
		}
		r.setUID(it.e.uid, uid)
		r.rep.count(it.e.gvk, out)
		return nil
	}
	type differs struct {
		i    int
		live liveItem
	}
	b := newBatch(r, func(ctx context.Context, ds []differs) error {
		return r.forEach(ctx, len(ds), func(k int) error {
			live, err := ds[k].live.object()
			if err != nil {
				return err
			}
			return write(ctx, ds[k].i, live)
		})
	})
	var err error
	for _, gvr := range kinds {
		keys := byKey[gvr]
		_, err = r.eachLiveIn(ctx, gvr, kindOf[gvr], namespacesOf(keys), func(l liveItem) error {
			live, err := l.object()
			if err != nil {
				return err
			}
			for _, i := range keys[nsName(live)] {
				if items[i].written {
					continue
				}
				items[i].seen = true
				snap, err := items[i].e.object()
				if err != nil {
					return err
				}
				if r.unchanged(snap, live) {
					items[i].unchanged, items[i].uid = true, live.GetUID()
					continue
				}
				items[i].unchanged, items[i].written = false, true
				if err := b.add(ctx, differs{i: i, live: l}, int64(len(l.raw))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			break
		}
	}
	if err := b.done(ctx, err); err != nil {
		return err
	}
	var missing []int
	for i := range items {
		switch {
		case items[i].unchanged:
			r.setUID(items[i].e.uid, items[i].uid)
			r.rep.count(items[i].e.gvk, outUnchanged)
		case !items[i].seen:
			missing = append(missing, i)
		}
	}
	return r.forEach(ctx, len(missing), func(k int) error { return write(ctx, missing[k], nil) })
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
		live, err := r.get(ctx, ri, ref.Name)
		if apierrors.IsNotFound(err) {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("%s: owner %s %s no longer exists; its ownerReference was dropped so the garbage collector keeps the object", keyOf(u), ref.Kind, ref.Name))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s %s, the owner of %s: %w", ref.Kind, ref.Name, keyOf(u), err)
		}
		r.setUID(ref.UID, live.GetUID())
		ref.UID = live.GetUID()
		out = append(out, ref)
	}
	u.SetOwnerReferences(out)
	return u, nil
}
