package restore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/pager"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

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
