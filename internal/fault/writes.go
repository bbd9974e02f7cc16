package fault

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KnowsItsWrites wraps c so that a create or an update whose answer was lost finds its own
// write done, instead of failing a person's command on a blip of the way to the API server.
//
// A write the server acted on can lose its answer (a connection reset after the request was
// sent). The retrying transport of the hub's and members' clients does not send a POST again
// then (a create is not idempotent), so the create failed with the transport's error, and a
// second try met AlreadyExists. It does send a PUT again, whose second try, carrying the
// resourceVersion the first one replaced, is refused with a conflict. Both said the write had
// failed when it had been done.
//
//   - Create: after a transient error, the object is read. There as sent (every field the
//     create set has the value it sent; the server may have defaulted others), the create was
//     done: obj becomes what the server holds. Not there, it is created again. There but
//     different, someone else's: AlreadyExists, as the create would have been answered.
//   - Update: after a conflict or a transient error, the object is read. Exactly as the update
//     would leave it (but for the server's own metadata and the status, which an update does
//     not write), the update was done: obj becomes what the server holds. Otherwise the
//     update's error stands (someone else's change: the caller reads again or fails).
//
// An object named by generateName, a dry run, and fields the server rewrites (a Secret's
// stringData) are not recognised: their error stands, as without the wrapper. Other calls go
// to c untouched.
func KnowsItsWrites(c client.Client) client.Client { return writesKnown{c} }

type writesKnown struct{ client.Client }

// errNotYet says that a create found nothing there, then met its object: the first try's,
// late. The object is read again.
var errNotYet = errors.New("the object appeared meanwhile")

func (c writesKnown) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	sent, ok := obj.DeepCopyObject().(client.Object)
	err := c.Client.Create(ctx, obj, opts...)
	if err == nil || !ok || !IsTransient(err) || sent.GetName() == "" || len((&client.CreateOptions{}).ApplyOptions(opts).DryRun) > 0 {
		return err
	}
	key := client.ObjectKeyFromObject(sent)
	return Policy{Tries: CreateTries, Retriable: func(err error) bool { return IsTransient(err) || errors.Is(err, errNotYet) }}.Do(ctx, func() error {
		live := emptyLike(sent)
		switch gerr := c.Client.Get(ctx, key, live); {
		case gerr == nil:
			if !holds(live, sent, false) {
				return apierrors.NewAlreadyExists(resourceOf(c.Client, sent), key.Name)
			}
			return assign(obj, live)
		case !apierrors.IsNotFound(gerr):
			return gerr
		}
		again := sent.DeepCopyObject().(client.Object)
		switch cerr := c.Client.Create(ctx, again, opts...); {
		case apierrors.IsAlreadyExists(cerr):
			return errNotYet
		case cerr != nil:
			return cerr
		}
		return assign(obj, again)
	})
}

func (c writesKnown) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	sent, ok := obj.DeepCopyObject().(client.Object)
	err := c.Client.Update(ctx, obj, opts...)
	if err == nil || !ok || !(apierrors.IsConflict(err) || IsTransient(err)) || len((&client.UpdateOptions{}).ApplyOptions(opts).DryRun) > 0 {
		return err
	}
	live := emptyLike(sent)
	if gerr := Retry(ctx, CreateTries, func() error { return c.Client.Get(ctx, client.ObjectKeyFromObject(sent), live) }); gerr != nil || !holds(live, sent, true) {
		return err
	}
	return assign(obj, live)
}

// emptyLike is a new empty object of obj's type (an Unstructured of its kind): a Get decodes
// into it without keeping any field of obj.
func emptyLike(obj client.Object) client.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		e := &unstructured.Unstructured{}
		e.SetGroupVersionKind(u.GroupVersionKind())
		return e
	}
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
}

// assign makes dst what src is (both of one type).
func assign(dst, src client.Object) error {
	d, s := reflect.ValueOf(dst), reflect.ValueOf(src)
	if d.Type() != s.Type() || d.Kind() != reflect.Pointer {
		return fmt.Errorf("cannot assign %T to %T", src, dst)
	}
	d.Elem().Set(s.Elem())
	return nil
}

// resourceOf names obj's resource for an AlreadyExists error, as well as the client knows it.
func resourceOf(c client.Client, obj client.Object) schema.GroupResource {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return schema.GroupResource{}
	}
	if m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		return m.Resource.GroupResource()
	}
	return schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
}

// serverMetadata are the fields of metadata that the server sets, not the writer.
var serverMetadata = []string{"resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "selfLink"}

// written is obj as its writer gives it: without its type (a typed client's objects may lack
// it), its status (written through its own subresource) and the server's metadata.
func written(obj client.Object) (map[string]any, bool) {
	var m map[string]any
	if u, ok := obj.(runtime.Unstructured); ok {
		m = runtime.DeepCopyJSON(u.UnstructuredContent())
	} else {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err != nil {
			return nil, false
		}
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		for _, f := range serverMetadata {
			delete(md, f)
		}
	}
	pruned, _ := prune(m).(map[string]any)
	return pruned, true
}

// prune drops the empty maps and lists and the nulls of v: an empty map of labels a writer
// sent is the same as none, which is what the server keeps.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			if p := prune(item); p != nil {
				out[k] = p
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		if len(x) == 0 {
			return nil
		}
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = prune(item)
		}
		return out
	}
	return v
}

// holds says whether live is as sent left it: every field sent set has the value it sent
// (the server may have defaulted others), or, when exact, live has no field more.
func holds(live, sent client.Object, exact bool) bool {
	l, ok1 := written(live)
	s, ok2 := written(sent)
	if !ok1 || !ok2 {
		return false
	}
	if exact {
		return equality.Semantic.DeepEqual(l, s)
	}
	return contains(l, s)
}

// contains says whether every field of want is in have with the same value; lists match
// item by item.
func contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			hv, ok := h[k]
			if !ok || !contains(hv, v) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !contains(h[i], w[i]) {
				return false
			}
		}
		return true
	}
	return equality.Semantic.DeepEqual(have, want)
}
