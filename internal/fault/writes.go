package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
//   - Create: each create names itself as its field manager, uniquely (rewind-write-<random>),
//     unless its caller names one. After a transient error the object is read: there and made
//     by this create (its field manager is on it; without one, or when the server records no
//     field managers, it is exactly as sent), the create was done and obj becomes what the
//     server holds; not there, it is created again; there but someone else's, AlreadyExists,
//     as the create would have been answered.
//   - Update: after a conflict or a transient error, the object is read. The same object (its
//     UID) exactly as the update would leave it (but for the server's own metadata and the
//     status, which an update does not write), the update was done: obj becomes what the
//     server holds. Otherwise the update's error stands (someone else's change: the caller
//     reads again or fails). An update whose content the server rewrites (a Secret's
//     stringData) is never recognised: its error stands.
//
// An object named by generateName and a dry run are not retried: their error stands, as
// without the wrapper. Nothing is copied unless a write met an error (a Secret's key material
// is not duplicated). Other calls go to c untouched.
func KnowsItsWrites(c client.Client) client.Client { return writesKnown{c} }

type writesKnown struct{ client.Client }

// errNotYet says that a create found nothing there, then met its object: the first try's,
// late. The object is read again.
var errNotYet = errors.New("the object appeared meanwhile")

// recoveryTries bounds the reads and creates again after a create's fault: each request goes
// through the client's own retries already.
const recoveryTries = 3

func (c writesKnown) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	co := (&client.CreateOptions{}).ApplyOptions(opts)
	if len(co.DryRun) > 0 || obj.GetName() == "" {
		return c.Client.Create(ctx, obj, opts...)
	}
	token := ""
	if co.FieldManager == "" {
		token = "rewind-write-" + strconv.FormatUint(rand.Uint64(), 36)
		opts = append(slices.Clip(opts), client.FieldOwner(token))
	}
	err := c.Client.Create(ctx, obj, opts...)
	if err == nil || !IsTransient(err) {
		return err
	}
	// A create that failed wrote nothing into obj: it is what was sent.
	sent, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return err
	}
	key := client.ObjectKeyFromObject(sent)
	first := err
	return Policy{Tries: recoveryTries, Retriable: func(err error) bool { return IsTransient(err) || errors.Is(err, errNotYet) }}.Do(ctx, func() error {
		live := EmptyLike(sent)
		switch gerr := c.Client.Get(ctx, key, live); {
		case gerr == nil:
			if !madeBy(live, sent, token) {
				return apierrors.NewAlreadyExists(resourceOf(c.Client, sent), key.Name)
			}
			return Assign(obj, live)
		case IsTransient(gerr):
			return gerr
		case !apierrors.IsNotFound(gerr):
			return first // the read is refused: the create's own error says more
		}
		again := sent.DeepCopyObject().(client.Object)
		switch cerr := c.Client.Create(ctx, again, opts...); {
		case apierrors.IsAlreadyExists(cerr):
			return errNotYet
		case cerr != nil:
			return cerr
		}
		return Assign(obj, again)
	})
}

// madeBy says whether live is the object a create of sent made: its field manager token is on
// it, or, when there is no token or the server records no field managers, it is exactly sent.
func madeBy(live, sent client.Object, token string) bool {
	if token != "" && len(live.GetManagedFields()) > 0 {
		return slices.ContainsFunc(live.GetManagedFields(), func(e metav1.ManagedFieldsEntry) bool { return e.Manager == token })
	}
	return holds(live, sent, false)
}

func (c writesKnown) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := c.Client.Update(ctx, obj, opts...)
	if err == nil || !(apierrors.IsConflict(err) || IsTransient(err)) || len((&client.UpdateOptions{}).ApplyOptions(opts).DryRun) > 0 {
		return err
	}
	// An update that failed wrote nothing into obj: it is what was sent.
	sent, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return err
	}
	live := EmptyLike(sent)
	if gerr := Retry(ctx, recoveryTries, func() error { return c.Client.Get(ctx, client.ObjectKeyFromObject(sent), live) }); gerr != nil || !holds(live, sent, true) {
		return err
	}
	return Assign(obj, live)
}

// EmptyLike is a new empty object of obj's type (an Unstructured of its kind): a Get decodes
// into it without keeping any field of obj.
func EmptyLike(obj client.Object) client.Object {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		e := &unstructured.Unstructured{}
		e.SetGroupVersionKind(u.GroupVersionKind())
		return e
	}
	return reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
}

// Assign makes dst what src is (both pointers to objects of one type); src is not copied.
func Assign(dst, src client.Object) error {
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

// serverMetadata are the fields of metadata that the server sets, not the writer (the UID
// too, but an update names the object it read by it).
var serverMetadata = []string{"resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink"}

// written is obj as its writer gives it: without its type (a typed client's objects may lack
// it), its status (written through its own subresource) and the server's metadata; without
// its UID unless withUID.
func written(obj client.Object, withUID bool) (map[string]any, bool) {
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
		if !withUID {
			delete(md, "uid")
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

// holds says whether live is exactly as sent left it, but for the server's metadata and the
// status (and the UID when sent, a create, has none).
func holds(live, sent client.Object, withUID bool) bool {
	l, ok1 := written(live, withUID)
	s, ok2 := written(sent, withUID)
	return ok1 && ok2 && equality.Semantic.DeepEqual(l, s)
}
