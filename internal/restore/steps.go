package restore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/pager"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	serviceGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

func isWebhookConfig(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "admissionregistration.k8s.io" && (gvk.Kind == "ValidatingWebhookConfiguration" || gvk.Kind == "MutatingWebhookConfiguration")
}

func isDeployment(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "apps" && gvk.Kind == "Deployment"
}

// operatorObjects returns the operator's Deployments and webhook configurations known from the
// snapshot (release objects, i.e. those without an owner) and from the current release.
func (r *restorer) operatorObjects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	seen := map[string]bool{}
	add := func(u *unstructured.Unstructured) {
		gvk := u.GroupVersionKind()
		if !isDeployment(gvk) && !isWebhookConfig(gvk) {
			return
		}
		c := u.DeepCopy()
		if isDeployment(gvk) && c.GetNamespace() == "" {
			c.SetNamespace(r.o.Header.Namespace)
		}
		if k := keyOf(c); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	for _, e := range r.entries {
		if e.section == snapshot.SectionAssociated && len(e.owners) == 0 {
			// Only what names it is used: no need to decode the whole object.
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(e.gvk)
			u.SetNamespace(e.namespace)
			u.SetName(e.name)
			add(u)
		}
	}
	for _, u := range r.o.Current {
		add(u)
	}
	return out
}

func (r *restorer) markHeld() {
	for _, u := range r.operatorObjects() {
		r.held[keyOf(u)] = true
	}
}

// listLive lists every object of gvr (all namespaces), keyed by namespace/name.
func (r *restorer) listLive(ctx context.Context, gvr schema.GroupVersionResource) (map[string]*unstructured.Unstructured, error) {
	out := map[string]*unstructured.Unstructured{}
	_, err := r.eachLiveIn(ctx, gvr, nil, func(u *unstructured.Unstructured) bool {
		out[nsName(u)] = u
		return true
	})
	return out, err
}

// eachMeta pages through the metadata of every object of gvr (all namespaces) until fn
// returns false; it reports whether it saw them all.
func (r *restorer) eachMeta(ctx context.Context, gvr schema.GroupVersionResource, fn func(*metav1.PartialObjectMetadata) bool) (bool, error) {
	return eachItem(ctx, func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return r.meta.Resource(gvr).List(ctx, opts)
	}, func(o runtime.Object) bool { return fn(o.(*metav1.PartialObjectMetadata)) })
}

// metaObject returns an object of kind gvk that holds only apiVersion, kind and m's metadata.
func metaObject(m *metav1.PartialObjectMetadata, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m.ObjectMeta)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": md}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// maxNamespaceLists bounds the namespaces a kind is listed in one by one; a kind whose snapshot
// objects live in more is listed in all namespaces at once.
const maxNamespaceLists = 16

// namespacesOf returns the namespaces of keys ("namespace/name"), or nil (list all
// namespaces) when one is cluster-scoped ("/name") or they are more than maxNamespaceLists.
func namespacesOf[V any](keys map[string]V) []string {
	seen := map[string]bool{}
	for k := range keys {
		ns, _, _ := strings.Cut(k, "/")
		if ns == "" {
			return nil
		}
		if seen[ns] = true; len(seen) > maxNamespaceLists {
			return nil
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// eachLiveIn pages through every object of gvr in the namespaces given (nil: all namespaces
// at once) until fn returns false; it reports whether it saw them all. Objects are decoded one
// at a time as they arrive: no page of them is held in memory. Only the objects a snapshot
// holds are compared, so the namespaces its objects live in are all a restore needs to read: a
// kind such as Secret is not read in the whole cluster. The namespaces are listed at once; fn
// is called by one of them at a time.
func (r *restorer) eachLiveIn(ctx context.Context, gvr schema.GroupVersionResource, namespaces []string, fn func(*unstructured.Unstructured) bool) (bool, error) {
	if len(namespaces) == 0 {
		namespaces = []string{""} // "": all namespaces
	}
	var mu sync.Mutex
	stopped := false
	g, gctx := errgroup.WithContext(ctx)
	for _, ns := range namespaces {
		g.Go(func() error {
			return snapshot.EachObjectIn(gctx, r.cl.Lists, gvr, ns, 500, func(u *unstructured.Unstructured) error {
				mu.Lock()
				defer mu.Unlock()
				if stopped || !fn(u) {
					stopped = true
					return errEnough
				}
				return nil
			})
		})
	}
	err := g.Wait()
	if stopped {
		return false, nil
	}
	return err == nil, err
}

// errEnough stops a paged LIST early.
var errEnough = errors.New("enough")

// eachItem pages through a LIST (500 objects a page) until fn returns false; it reports
// whether fn saw every item.
func eachItem(ctx context.Context, list pager.ListPageFunc, fn func(runtime.Object) bool) (bool, error) {
	p := pager.New(list)
	p.PageSize = 500
	p.PageBufferSize = 0 // fetch at most one page ahead, so that stopping early saves the rest
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		if !fn(o) {
			return errEnough
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		return false, nil
	}
	return err == nil, err
}

func nsName(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }

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

// quiesce scales the operator's Deployments to 0 and removes its admission webhooks, so that
// neither the newer operator nor its webhooks interfere with the restore. Deployments that
// serve a conversion webhook the CRD step still needs are scaled down by that step instead.
func (r *restorer) quiesce(ctx context.Context) error {
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
			if err := ri.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
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

func (r *restorer) scaleToZero(ctx context.Context, ns, name string) error {
	patch := []byte(`{"spec":{"replicas":0}}`)
	_, err := r.dyn.Resource(deploymentGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("scaling Deployment %s/%s to 0: %w", ns, name, err)
	}
	return nil
}

// conversionServers returns the Deployments (namespace/name) that back the conversion
// webhooks of the live CRDs the snapshot holds.
func (r *restorer) conversionServers(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, e := range r.entries {
		if e.section != snapshot.SectionCRD {
			continue
		}
		live, err := r.dyn.Resource(crdGVR).Get(ctx, e.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		strategy, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "strategy")
		if strategy != "Webhook" {
			continue
		}
		svcNS, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace")
		svcName, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name")
		if svcName == "" {
			continue
		}
		svc, err := r.dyn.Resource(serviceGVR).Namespace(svcNS).Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		deps, err := r.dyn.Resource(deploymentGVR).Namespace(svcNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, d := range deps.Items {
			labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			if len(sel) > 0 && matches(sel, labels) {
				out[nsName(&d)] = true
			}
		}
	}
	return out, nil
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// storageVersionHash is the hash discovery publishes for a resource's storage version.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// restoreCRDs brings every CRD back to the snapshot, including its storage version: the
// snapshot's storage version becomes the storage version again (newer versions stay served),
// every CR is rewritten so it is stored at that version, status.storedVersions is trimmed,
// and then the snapshot's definition is applied exactly. A CRD is never deleted.
func (r *restorer) restoreCRDs(ctx context.Context) error {
	for _, e := range r.entries {
		if e.section != snapshot.SectionCRD {
			continue
		}
		snap, err := e.object()
		if err != nil {
			return err
		}
		if err := r.restoreCRD(ctx, snap); err != nil {
			return fmt.Errorf("CRD %s: %w", e.name, err)
		}
	}
	// Conversion webhook servers kept up for the migration can now be quiesced.
	convServers, err := r.conversionServers(ctx)
	if err != nil {
		return err
	}
	for _, u := range r.operatorObjects() {
		if isDeployment(u.GroupVersionKind()) {
			if convServers[nsName(u)] {
				continue // the snapshot's own CRDs still convert through it
			}
			if err := r.scaleToZero(ctx, u.GetNamespace(), u.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *restorer) restoreCRD(ctx context.Context, snap *unstructured.Unstructured) error {
	ri := r.dyn.Resource(crdGVR)
	live, err := ri.Get(ctx, snap.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c := snap.DeepCopy()
		c.SetUID("")
		delete(c.Object, "status")
		if _, err := ri.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return err
		}
		r.rep.count(snap.GroupVersionKind(), outCreated)
		return r.waitEstablished(ctx, snap.GetName())
	}
	if err != nil {
		return err
	}
	if crdEqual(snap, live) {
		r.rep.count(snap.GroupVersionKind(), outUnchanged)
		return nil
	}
	group, _, _ := unstructured.NestedString(snap.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(snap.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(snap.Object, "spec", "names", "plural")
	want := snapshot.StorageVersion(snap)
	wantStored, _, _ := unstructured.NestedStringSlice(snap.Object, "status", "storedVersions")
	liveStored, _, _ := unstructured.NestedStringSlice(live.Object, "status", "storedVersions")

	if snapshot.StorageVersion(live) != want || !reflect.DeepEqual(liveStored, wantStored) {
		// 1. The snapshot's storage version stores again; newer versions stay served.
		if snapshot.StorageVersion(live) != want {
			versions, _, _ := unstructured.NestedSlice(live.Object, "spec", "versions")
			found := false
			for _, v := range versions {
				m := v.(map[string]any)
				m["storage"] = m["name"] == want
				if m["name"] == want {
					m["served"] = true
					found = true
				}
			}
			if !found {
				for _, v := range mustSlice(snap, "spec", "versions") {
					m := v.(map[string]any)
					if m["name"] == want {
						c := deepCopyMap(m)
						c["storage"], c["served"] = true, true
						versions = append(versions, c)
					}
				}
			}
			_ = unstructured.SetNestedSlice(live.Object, versions, "spec", "versions")
			if live, err = ri.Update(ctx, live, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("making %s the storage version again: %w", want, err)
			}
			if err := r.waitStorageVersion(ctx, group, want, plural, kind); err != nil {
				return err
			}
		}
		// 2. Storage migration: read and write back every CR so it is stored at `want`.
		if err := r.migrate(ctx, schema.GroupVersionResource{Group: group, Version: want, Resource: plural}); err != nil {
			return err
		}
		// 3. Trim status.storedVersions to the snapshot's.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := ri.Get(ctx, snap.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			_ = unstructured.SetNestedStringSlice(cur.Object, wantStored, "status", "storedVersions")
			_, err = ri.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				return false, nil
			}
			return err == nil, err
		}); err != nil {
			return fmt.Errorf("trimming status.storedVersions to %v: %w", wantStored, err)
		}
	}
	// 4. The snapshot's definition, exactly.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := ri.Get(ctx, snap.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		w := snap.DeepCopy()
		w.SetUID(cur.GetUID())
		w.SetResourceVersion(cur.GetResourceVersion())
		w.Object["status"] = cur.Object["status"]
		_, err = ri.Update(ctx, w, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("applying the snapshot's definition: %w", err)
	}
	r.rep.count(snap.GroupVersionKind(), outRestored)
	r.cl.ResetMapper()
	return r.waitEstablished(ctx, snap.GetName())
}

func mustSlice(u *unstructured.Unstructured, fields ...string) []any {
	s, _, _ := unstructured.NestedSlice(u.Object, fields...)
	return s
}

func deepCopyMap(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// waitStorageVersion waits until discovery publishes version as the storage version of the
// resource, i.e. the API server writes new objects at it.
func (r *restorer) waitStorageVersion(ctx context.Context, group, version, plural, kind string) error {
	want := storageVersionHash(group, version, kind)
	dc := r.cl.LiveDiscovery()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(group + "/" + version)
		if err != nil {
			return false, nil
		}
		for _, res := range list.APIResources {
			if res.Name == plural {
				last = res.StorageVersionHash
				return res.StorageVersionHash == want, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("the API server did not switch the storage version of %s to %s (hash %s, want %s)", plural, version, last, want)
	}
	return nil
}

func (r *restorer) waitEstablished(ctx context.Context, name string) error {
	crd := &unstructured.Unstructured{}
	crd.SetName(name)
	return apply.WaitEstablished(ctx, r.cl.Client, []*unstructured.Unstructured{crd}, time.Minute)
}

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

// restoreCRs fully replaces every custom resource from the snapshot.
func (r *restorer) restoreCRs(ctx context.Context) error {
	if err := r.restoreSection(ctx, snapshot.SectionCR); err != nil {
		return err
	}
	r.crUIDsKnown = true
	return nil
}

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

// restoreAssociated fully replaces the associated resources (operator Deployments and
// webhooks wait for the Resume step).
func (r *restorer) restoreAssociated(ctx context.Context) error {
	r.ensureUIDs(ctx)
	return r.restoreSection(ctx, snapshot.SectionAssociated)
}

// ensureUIDs fills the snapshot-to-live UID map for CRs when the CR step ran in an earlier
// (interrupted) run; when it ran in this one, the map is complete already. Only names and
// UIDs are read: metadata-only lists, not held.
func (r *restorer) ensureUIDs(ctx context.Context) {
	if r.crUIDsKnown {
		return
	}
	for gk, gvr := range r.crdGVR {
		snapUIDs := map[string][]types.UID{}
		for _, e := range r.entries {
			if e.section == snapshot.SectionCR && e.gvk.GroupKind() == gk {
				snapUIDs[e.nsName()] = append(snapUIDs[e.nsName()], e.uid)
			}
		}
		if len(snapUIDs) == 0 {
			continue
		}
		// An error (the kind is not served) leaves the owners to be looked up by name.
		_, _ = r.eachMeta(ctx, gvr, func(m *metav1.PartialObjectMetadata) bool {
			for _, uid := range snapUIDs[m.Namespace+"/"+m.Name] {
				r.setUID(uid, m.UID)
			}
			return true
		})
	}
}

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

// createdSince keeps (and reports) or prunes the objects created after the snapshot.
func (r *restorer) createdSince(ctx context.Context) error {
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

// resume restores the operator Deployments and webhooks the quiesce step took over, from the
// snapshot. Those the snapshot lacks stay quiesced (a rollout applies the old release's
// manifests next).
func (r *restorer) resume(ctx context.Context) error {
	var entries []*entry
	for _, e := range r.entries {
		if e.section == snapshot.SectionAssociated && r.held[e.key()] {
			entries = append(entries, e)
		}
	}
	return r.restoreEntries(ctx, entries)
}
