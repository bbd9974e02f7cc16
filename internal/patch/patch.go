// Package patch writes the status of an object a reconcile changed, once, as cluster-api's
// util/patch does: a Helper is made from the object as the reconcile read it (a deep copy), and
// Patch writes what the reconcile changed in its status as a JSON merge patch that carries the
// resourceVersion read (an optimistic lock), only when the status changed.
//
// A conflict (another writer changed the object since it was read) is resolved as follows:
//
//   - The object is read again and the conditions this reconcile changed (set, changed or
//     removed, compared with the copy taken at the start) are applied over the fresh object's
//     conditions, three-way: a condition another writer changed in the meantime to something
//     else than this reconcile wants is a conflict, not overwritten. Conditions this reconcile
//     did not touch stay as the fresh object has them.
//   - Status fields other than conditions are written again over the fresh read only when no
//     other writer changed any of them (the fresh object's status, conditions aside, is still
//     the one this reconcile started from): a change of labels, annotations or spec alone does
//     not cost the reconcile its work. When another writer changed them, nothing is written and
//     Patch returns a conflict: what this reconcile computed may rest on what changed (a
//     reconcile that read a stale copy, from before its own last write reached the cache, would
//     otherwise write the old state back), so the reconcile runs again from a fresh read.
//   - The fresh write is tried again (with the fresh resourceVersion) a bounded number of times.
//
// Events and metrics that record what the status write records are given to OnPatched: they run
// once the write went through (or when there was nothing to write), and are dropped when it
// failed, so that a reconcile run again after a conflict does not emit them twice.
//
// A conflict that remains is returned as a *ConflictError (apierrors.IsConflict is true for
// it). Result and Done turn it into a quick requeue without an error, so controller-runtime does
// not log it as a reconcile error (a conflict is an ordinary outcome when several writers share
// an object, as cluster-api treats it): it is logged at V(1) only.
package patch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rewind-dev/rewind/internal/fault"
)

// MaxTries bounds the writes of one Patch: the first, and those over a fresh read after a
// conflict.
const MaxTries = 5

// Helper writes the status of one object a reconcile changes. It is not safe for concurrent
// use; a reconcile's goroutines hand it their after-write actions through OnPatched, which is.
type Helper struct {
	client client.Client
	reader client.Reader
	// before is the object as last read or written.
	before client.Object
	// after are the actions to run once the next write went through.
	after actions
	// wait sleeps between tries after a conflict (tests make it instant).
	wait func(ctx context.Context, try int) error
	// ownWrites: a status already as this write sets it, met after a conflict, is its own
	// (RecognizeOwnWrites).
	ownWrites bool
}

// Option configures a Helper.
type Option func(*Helper)

// WithReader reads the object again after a conflict through r (an uncached reader, such as
// the manager's APIReader) rather than through the helper's client: a cache may still hold the
// copy that conflicted.
func WithReader(r client.Reader) Option {
	return func(h *Helper) {
		if r != nil {
			h.reader = r
		}
	}
}

// RecognizeOwnWrites takes a status found, after a conflict, already as this write sets it
// (its fields other than conditions) for this write's own: done, its answer lost (the
// transport sent it again and the second try met the first). It is for the only writer of an
// object's status that read the object fresh, as `rewind snapshot take` records its snapshot;
// not for a reconcile over a cache, whose stale copy repeating its last write would run that
// write's after-write actions (Events, metrics) again: there it stays a conflict, and the
// reconcile runs again from a fresh read.
func RecognizeOwnWrites() Option { return func(h *Helper) { h.ownWrites = true } }

// NewHelper returns a helper for obj as it is now (it keeps a deep copy). Make it before the
// reconcile changes obj; write obj's status with Patch (or Done) once the reconcile changed it.
// c writes the status (its Status() subresource client) and, unless WithReader says otherwise,
// reads the object again after a conflict.
func NewHelper(obj client.Object, c client.Client, opts ...Option) *Helper {
	h := &Helper{client: c, reader: c, before: obj.DeepCopyObject().(client.Object), wait: backoff}
	for _, o := range opts {
		o(h)
	}
	return h
}

// OnPatched adds fn to the actions run once the next Patch wrote the status (or found nothing
// to write): Events and metrics that record a change of the status. A Patch that fails drops
// them. fn runs on the goroutine that called Patch.
func (h *Helper) OnPatched(fn func()) { h.after.add(fn) }

// Patch writes what changed in obj's status since the helper was made (or since the last
// Patch that went through), with the resourceVersion obj carries as a precondition. On
// success obj holds the object as written, the helper takes it as its new starting point, and
// the actions given to OnPatched run. A conflict that could not be resolved (see the package
// documentation) is a *ConflictError; any other failure is returned wrapped. Either way the
// OnPatched actions are dropped and obj keeps what the reconcile set.
func (h *Helper) Patch(ctx context.Context, obj client.Object) error {
	pending := h.after.take()
	if err := h.patch(ctx, obj); err != nil {
		return err
	}
	h.before = obj.DeepCopyObject().(client.Object)
	for _, fn := range pending {
		fn()
	}
	return nil
}

// Done writes obj's status at the end of a reconcile that returned res and err, and returns
// what the reconcile should return: see Result.
func (h *Helper) Done(ctx context.Context, obj client.Object, res ctrl.Result, err error) (ctrl.Result, error) {
	return Result(ctx, res, err, h.Patch(ctx, obj))
}

// ConflictRequeue is about how soon a reconcile whose status write conflicted runs again (it is
// jittered): soon, for the object changed and the write is still to be made, but not at once,
// so the cache can catch up.
const ConflictRequeue = 200 * time.Millisecond

// Result folds the outcome of a status write (patchErr, from Patch) into a reconcile's result:
//   - written: res and err as they are;
//   - the object is gone (NotFound): res and err as they are, there is nothing to record;
//   - a conflict: logged at V(1), not as an error; with no other error the reconcile is
//     requeued soon (ConflictRequeue, or res's own requeue if sooner), to run again from a
//     fresh read; with another error, that error is returned (and retried with backoff);
//   - any other failure: joined to err.
func Result(ctx context.Context, res ctrl.Result, err, patchErr error) (ctrl.Result, error) {
	switch {
	case patchErr == nil, apierrors.IsNotFound(patchErr):
		return res, err
	case IsConflict(patchErr):
		ctrl.LoggerFrom(ctx).V(1).Info("status write conflicted: reconciling again from a fresh read", "conflict", patchErr.Error())
		if err != nil {
			return res, err
		}
		d := fault.Backoff(1, ConflictRequeue, ConflictRequeue)
		if res.RequeueAfter > 0 && res.RequeueAfter < d {
			d = res.RequeueAfter
		}
		return ctrl.Result{RequeueAfter: d}, nil
	}
	return ctrl.Result{}, errors.Join(err, patchErr)
}

// ConflictError says a status write met a conflict it could not resolve: another writer
// changed the object's status (fields other than conditions, or a condition this reconcile
// changed too) since it was read, or the object kept changing for MaxTries writes. Unwrap
// gives the API's 409 Conflict status, so apierrors.IsConflict and fault.IsConflict hold.
type ConflictError struct {
	// Object is "Kind namespace/name".
	Object string
	// Err is a 409 Conflict API status.
	Err error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("writing the status of %s: %v", e.Object, e.Err)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// IsConflict says whether err is a conflict of a status write (a *ConflictError, or the API's
// 409 Conflict status).
func IsConflict(err error) bool {
	var ce *ConflictError
	return errors.As(err, &ce) || fault.IsConflict(err)
}

// patch writes obj's status; see Patch.
func (h *Helper) patch(ctx context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, h.client.Scheme())
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", klog.KObj(obj), err)
	}
	what := gvk.Kind + " " + klog.KObj(obj).String()
	before, err := statusOf(h.before)
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	after, err := statusOf(obj)
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	// The status as read, under everything else as the reconcile has it now (its own writes
	// of metadata or spec included): the patch holds the status changes and obj's
	// resourceVersion.
	base, err := withStatus(obj, before)
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	err = h.client.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if err == nil {
		return nil
	}
	if !fault.IsConflict(err) {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	return h.resolve(ctx, obj, gvk, what, before, after, err)
}

// resolve writes the status again over fresh reads after a conflict; see the package
// documentation.
func (h *Helper) resolve(ctx context.Context, obj client.Object, gvk schema.GroupVersionKind, what string, before, after map[string]any, conflict error) error {
	beforeConds, err := conditionsOf(before)
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	afterConds, err := conditionsOf(after)
	if err != nil {
		return fmt.Errorf("writing the status of %s: %w", what, err)
	}
	changes := diffConditions(beforeConds, afterConds)
	beforeRest, afterRest := withoutConditions(before), withoutConditions(after)
	restChanged := !equality.Semantic.DeepEqual(beforeRest, afterRest)
	conflictErr := func(format string, args ...any) error {
		gr := schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}
		return &ConflictError{Object: what, Err: apierrors.NewConflict(gr, obj.GetName(), fmt.Errorf(format, args...))}
	}
	for try := 1; ; try++ {
		latest := newObject(obj)
		if err := h.reader.Get(ctx, client.ObjectKeyFromObject(obj), latest); err != nil {
			return fmt.Errorf("writing the status of %s: reading it again after a conflict: %w", what, err)
		}
		status, err := statusOf(latest)
		if err != nil {
			return fmt.Errorf("writing the status of %s: %w", what, err)
		}
		rest := withoutConditions(status)
		if restChanged {
			// Changed since the read: another writer's change, or, with RecognizeOwnWrites and
			// changed to what this write sets, its own whose answer was lost.
			own := h.ownWrites && equality.Semantic.DeepEqual(rest, afterRest)
			if !equality.Semantic.DeepEqual(rest, beforeRest) && !own {
				return conflictErr("another writer changed its status since it was read (%v)", conflict)
			}
			rest = afterRest
		}
		conds, err := conditionsOf(status)
		if err != nil {
			return fmt.Errorf("writing the status of %s: %w", what, err)
		}
		merged, err := changes.apply(conds)
		if err != nil {
			return conflictErr("%v", err)
		}
		want, err := setConditions(rest, merged)
		if err != nil {
			return fmt.Errorf("writing the status of %s: %w", what, err)
		}
		if equality.Semantic.DeepEqual(want, status) {
			setObject(obj, latest) // already as this reconcile wants it
			return nil
		}
		target, err := withStatus(latest, want)
		if err != nil {
			return fmt.Errorf("writing the status of %s: %w", what, err)
		}
		err = h.client.Status().Patch(ctx, target, client.MergeFromWithOptions(latest, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			setObject(obj, target)
			return nil
		case !fault.IsConflict(err):
			return fmt.Errorf("writing the status of %s: %w", what, err)
		case try+1 >= MaxTries:
			return conflictErr("it changed again on each of %d writes (%v)", MaxTries, err)
		}
		conflict = err
		if err := h.wait(ctx, try); err != nil {
			return conflictErr("%v", conflict)
		}
	}
}

// backoff waits a little before try+1: a cached reader may not have the newer copy yet.
func backoff(ctx context.Context, try int) error {
	t := time.NewTimer(fault.Backoff(try, 20*time.Millisecond, 500*time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newObject returns a new, empty object of obj's type (a decoder leaves the fields of an
// object it decodes into that the answer does not have).
func newObject(obj client.Object) client.Object { return fault.EmptyLike(obj) }

// setObject makes dst (a pointer to a typed object) a copy of src, of the same type.
func setObject(dst, src client.Object) { _ = fault.Assign(dst, src.DeepCopyObject().(client.Object)) }

// statusOf returns obj's status as unstructured content (nil when it has none).
func statusOf(obj client.Object) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	s, _ := u["status"].(map[string]any)
	return s, nil
}

// withStatus returns a copy of obj with status in place of its own.
func withStatus(obj client.Object, status map[string]any) (client.Object, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	if status == nil {
		delete(u, "status")
	} else {
		u["status"] = runtime.DeepCopyJSONValue(status)
	}
	out := newObject(obj)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, out); err != nil {
		return nil, err
	}
	return out, nil
}

// withoutConditions returns status without its conditions.
func withoutConditions(status map[string]any) map[string]any {
	out := make(map[string]any, len(status))
	for k, v := range status {
		if k != "conditions" {
			out[k] = v
		}
	}
	return out
}

// conditionList is how conditions sit in a status.
type conditionList struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// conditionsOf reads status.conditions.
func conditionsOf(status map[string]any) ([]metav1.Condition, error) {
	var l conditionList
	if c, ok := status["conditions"]; ok && c != nil {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"conditions": c}, &l); err != nil {
			return nil, fmt.Errorf("reading status.conditions: %w", err)
		}
	}
	return l.Conditions, nil
}

// setConditions returns a copy of rest (a status without conditions) with conds.
func setConditions(rest map[string]any, conds []metav1.Condition) (map[string]any, error) {
	out := runtime.DeepCopyJSON(rest)
	if len(conds) == 0 {
		return out, nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditionList{Conditions: conds})
	if err != nil {
		return nil, err
	}
	out["conditions"] = u["conditions"]
	return out, nil
}

// actions are the after-write actions of a Helper.
type actions struct {
	mu  sync.Mutex
	fns []func()
}

func (a *actions) add(fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fns = append(a.fns, fn)
}

// take returns the actions and forgets them.
func (a *actions) take() []func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	fns := a.fns
	a.fns = nil
	return fns
}
