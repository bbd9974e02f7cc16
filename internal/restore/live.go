package restore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rewind-dev/rewind/internal/fault"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/pager"
)

// Reading live objects. A restore never holds a whole LIST: it pages through live objects
// (LIST with limit and continue), reading each page as it arrives, and holds at most a
// working set of them (Options.WorkingSet) between reading and writing them (see batch). A
// page that meets a fault is read again in place.

// pageSize is the most objects a LIST page asks for.
const pageSize = 500

// firstPageSize is the size of the first page of a listing whose pages are sized in bytes
// (listing.pageBytes), before the objects' size is known.
const firstPageSize = 32

// errEnough, returned by the function a listing hands its objects to, ends the listing early
// without an error.
var errEnough = errors.New("enough")

// liveItem is one live object as its LIST page sent it: its JSON, decoded when needed.
type liveItem struct {
	raw []byte
	// gvk is the kind of the list, for the objects of built-in kinds that lists send without
	// their apiVersion and kind.
	gvk schema.GroupVersionKind
}

// object decodes the item: a new object, the caller's. Integers decode as int64, as the
// dynamic client decodes them.
func (it liveItem) object() (*unstructured.Unstructured, error) {
	m := map[string]any{}
	if err := utiljson.Unmarshal(it.raw, &m); err != nil {
		return nil, fmt.Errorf("decoding a live %s: %w", it.gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetKind() == "" && u.GetAPIVersion() == "" {
		u.SetGroupVersionKind(it.gvk)
	}
	return u, nil
}

// listing says what to list.
type listing struct {
	gvr schema.GroupVersionResource
	// gvk is the kind of the objects (see liveItem.gvk).
	gvk schema.GroupVersionKind
	// namespace is the one namespace to list ("": all namespaces, or a cluster-scoped kind).
	namespace string
	// pageBytes, when set, sizes each page to about that many bytes of objects, from the
	// mean size of those read so far; otherwise a page asks for pageSize objects.
	pageBytes int64
	// pageDone, when set, runs after each page, before the next is read.
	pageDone func() error
}

// stopError carries the error of the function a listing hands objects to, which ends the
// listing as it is (it is not a fault of the listing's to ride out: it has no Unwrap, so
// fault.IsTransient does not look into it).
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }

// eachLive pages through the live objects l says and hands each, in order, to fn as its
// page arrives. A page that meets a fault is read again in place, up to tries times; a page
// read with a continue token is the same list again (the continue token holds the
// resourceVersion it started at), but fn may then be handed objects of that page a second
// time: it must take an object twice as it takes it once. An error from fn ends the listing
// and is returned as it is (errEnough: nil).
func (r *restorer) eachLive(ctx context.Context, l listing, fn func(liveItem) error) error {
	cont := ""
	var seen, bytes int64 // objects read so far and their size, for the page size
	for {
		limit := int64(pageSize)
		if l.pageBytes > 0 {
			limit = firstPageSize
			if seen > 0 && bytes > 0 {
				limit = min(max(l.pageBytes*seen/bytes, 1), pageSize)
			}
		}
		var next string
		err := r.try(ctx, func() error {
			var err error
			next, err = r.listPage(ctx, l, limit, cont, func(raw []byte) error {
				seen, bytes = seen+1, bytes+int64(len(raw))
				if err := fn(liveItem{raw: raw, gvk: l.gvk}); err != nil {
					return &stopError{err}
				}
				return nil
			})
			return err
		})
		if err == nil && l.pageDone != nil {
			if perr := l.pageDone(); perr != nil {
				err = &stopError{perr}
			}
		}
		var stop *stopError
		switch {
		case errors.As(err, &stop) && errors.Is(stop.err, errEnough):
			return nil
		case errors.As(err, &stop):
			return stop.err
		case err != nil:
			return fmt.Errorf("listing %s: %w", l.gvr.GroupResource(), err)
		}
		if cont = next; cont == "" {
			return nil
		}
	}
}

// listPage reads one page of a LIST (at most limit objects, from cont) and hands each
// object's JSON to fn as it is read, never holding the page; it returns the continue token.
func (r *restorer) listPage(ctx context.Context, l listing, limit int64, cont string, fn func([]byte) error) (string, error) {
	path := []string{"api"}
	if l.gvr.Group != "" {
		path = []string{"apis", l.gvr.Group}
	}
	path = append(path, l.gvr.Version)
	if l.namespace != "" {
		path = append(path, "namespaces", l.namespace)
	}
	path = append(path, l.gvr.Resource)
	req := r.cl.Lists.Get().AbsPath(path...).Param("limit", strconv.FormatInt(limit, 10))
	if cont != "" {
		req = req.Param("continue", cont)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return "", err
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	if err := expectDelim(dec, '{'); err != nil {
		return "", err
	}
	next := ""
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch t {
		case "metadata":
			var md struct {
				Continue string `json:"continue"`
			}
			if err := dec.Decode(&md); err != nil {
				return "", err
			}
			next = md.Continue
		case "items":
			if t, err = dec.Token(); err != nil {
				return "", err
			}
			if t == nil { // "items": null
				continue
			}
			if t != json.Delim('[') {
				return "", errors.New("the list's items are not an array")
			}
			for dec.More() {
				var raw json.RawMessage // a new one for each object: fn may keep it
				if err := dec.Decode(&raw); err != nil {
					return "", err
				}
				if err := fn(raw); err != nil {
					return "", err
				}
			}
			if err := expectDelim(dec, ']'); err != nil {
				return "", err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", err
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return "", err
	}
	return next, nil
}

func expectDelim(dec *json.Decoder, d json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != d {
		return fmt.Errorf("the list has %v where %v belongs", t, d)
	}
	return nil
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

// eachLiveIn pages through every object of gvr (of kind gvk) in the namespaces given (nil:
// all namespaces at once) and hands each to fn (see eachLive), until fn returns errEnough; it
// reports whether fn saw them all. Only the objects a snapshot holds are compared, so the
// namespaces its objects live in are all a restore needs to read: a kind such as Secret is
// not read in the whole cluster. The namespaces are listed at once; fn is called by one of
// them at a time.
func (r *restorer) eachLiveIn(ctx context.Context, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, namespaces []string, fn func(liveItem) error) (bool, error) {
	if len(namespaces) == 0 {
		namespaces = []string{""} // "": all namespaces
	}
	var mu sync.Mutex
	stopped := false
	g, gctx := errgroup.WithContext(ctx)
	for _, ns := range namespaces {
		g.Go(func() error {
			return r.eachLive(gctx, listing{gvr: gvr, gvk: gvk, namespace: ns}, func(it liveItem) error {
				mu.Lock()
				defer mu.Unlock()
				if stopped {
					return errEnough
				}
				err := fn(it)
				if errors.Is(err, errEnough) {
					stopped = true
				}
				return err
			})
		})
	}
	err := g.Wait()
	if err != nil {
		return false, err
	}
	return !stopped, nil
}

// eachMeta pages through the metadata of every object of gvr (all namespaces), a page at a
// time, each page read again in place when it meets a fault, and hands each to fn until fn
// returns errEnough; it reports whether fn saw them all.
func (r *restorer) eachMeta(ctx context.Context, gvr schema.GroupVersionResource, fn func(*metav1.PartialObjectMetadata) error) (bool, error) {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		var page runtime.Object
		err := r.try(ctx, func() (err error) {
			page, err = r.meta.Resource(gvr).List(ctx, opts)
			return err
		})
		return page, err
	})
	p.PageSize = pageSize
	p.PageBufferSize = 0 // fetch at most one page ahead, so that stopping early saves the rest
	// A continue token that expired fails the listing (the step runs again) rather than
	// falling back to one LIST of everything, held whole.
	p.FullListIfExpired = false
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		return fn(o.(*metav1.PartialObjectMetadata))
	})
	if errors.Is(err, errEnough) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	return true, nil
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

// batch collects the work that objects read from a listing call for, and does it (run)
// whenever the objects held reach the working set (Options.WorkingSet bytes of their JSON),
// when a page ends, and at the end (done): memory held stays one working set, whatever the
// number of objects. An error of the work is kept and the listing goes on, so that every
// refused object is reported; a fault (the member away, most likely) ends it.
type batch[T any] struct {
	r     *restorer
	run   func(ctx context.Context, items []T) error
	items []T
	bytes int64
	errs  []error
}

func newBatch[T any](r *restorer, run func(ctx context.Context, items []T) error) *batch[T] {
	return &batch[T]{r: r, run: run}
}

// add holds item, of size bytes, and does the work held once it reaches the working set.
func (b *batch[T]) add(ctx context.Context, item T, size int64) error {
	b.items = append(b.items, item)
	if b.bytes += size; b.bytes >= b.r.o.WorkingSet {
		return b.flush(ctx)
	}
	return nil
}

// flush does the work held.
func (b *batch[T]) flush(ctx context.Context) error {
	if len(b.items) == 0 {
		return nil
	}
	err := b.run(ctx, b.items)
	clear(b.items)
	b.items, b.bytes = b.items[:0], 0
	if err != nil {
		b.errs = append(b.errs, err)
		if fault.IsTransient(err) || ctx.Err() != nil {
			return err
		}
	}
	return nil
}

// done does the work still held, unless the listing failed (listErr), and returns the
// listing's error and every error the work met.
func (b *batch[T]) done(ctx context.Context, listErr error) error {
	switch {
	case listErr == nil:
		_ = b.flush(ctx) // its error is kept
	case !slices.Contains(b.errs, listErr): // not the work's own error, which ended the listing
		b.errs = append(b.errs, listErr)
	}
	if len(b.errs) > maxErrors {
		b.errs = append(b.errs[:maxErrors], fmt.Errorf("and %d more errors", len(b.errs)-maxErrors))
	}
	return errors.Join(b.errs...)
}
