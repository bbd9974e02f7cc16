package patch

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Spec is a JSON patch (RFC 6902) that replaces obj's whole spec with the one obj holds, on
// condition that the stored spec is still the one read at generation: its first operation tests
// metadata.generation. The API server moves an object's generation only when its spec changes
// (for a custom resource with a status subresource), so status writes by other writers (an
// agent, a relay), and label, annotation or finalizer changes, do not refuse it, as the optimistic
// lock on resourceVersion would; a spec written by someone else since, or by this writer from a
// cached copy that had not seen its own last write yet, does. A failed test is answered with 422
// (Invalid); StaleSpec tells it from a spec the API server refuses.
//
// The whole spec is replaced, so the patch needs no base to diff against and removes what the
// new spec leaves out. A generation of 0 (an object not read from an API server) adds no test.
func Spec(obj client.Object, generation int64) (client.Patch, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", obj.GetName(), err)
	}
	spec, ok := u["spec"]
	if !ok {
		return nil, fmt.Errorf("%s has no spec", obj.GetName())
	}
	var ops []map[string]any
	if generation > 0 {
		ops = append(ops, map[string]any{"op": "test", "path": "/metadata/generation", "value": generation})
	}
	ops = append(ops, map[string]any{"op": "replace", "path": "/spec", "value": spec})
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return client.RawPatch(types.JSONPatchType, data), nil
}

// StaleSpec says whether err, returned by a Spec patch made with generation, is the failed test
// of a spec that changed since it was read: the error is Invalid and the object, read again
// through r into fresh, has another generation. Any other error, and an Invalid one over an
// unchanged generation (a spec the API server refuses), is not: the caller returns it.
func StaleSpec(ctx context.Context, r client.Reader, fresh client.Object, generation int64, err error) (bool, error) {
	if !apierrors.IsInvalid(err) || generation == 0 {
		return false, nil
	}
	if gerr := r.Get(ctx, client.ObjectKeyFromObject(fresh), fresh); gerr != nil {
		return false, gerr
	}
	return fresh.GetGeneration() != generation, nil
}
