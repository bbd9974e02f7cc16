package preflight

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/member"
)

// CheckApplyRefused: the API server (validation, admission, webhooks) refuses an object of the
// release in a server-side dry run of its apply.
const CheckApplyRefused Check = "ApplyRefused"

// ObjectChange is what applying a release does to one of its objects on a member.
type ObjectChange struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Action is Create, Update or Unchanged.
	Action string `json:"action"`
	// Diff lists the changed fields of an Update ("~ .spec.replicas: 1 -> 3"); Secret values
	// are never shown.
	Diff []string `json:"diff,omitempty"`
	// Refused is the API server's refusal of the dry run ("" when it accepted it).
	Refused string `json:"refused,omitempty"`
	// Note says what could not be dry-run (a kind whose CRD the release creates).
	Note string `json:"note,omitempty"`
}

// maxDiffLines bounds the changed fields listed per object.
const maxDiffLines = 20

// DryRun server-side-applies each of objs to the member with dryRun=All, as rewind's apply does
// (field manager rewind, forced), and says what it would create or update, with a diff against
// the live object; what the API server refuses is in Refused. Nothing is changed.
func DryRun(ctx context.Context, cl *member.Cluster, objs []*unstructured.Unstructured, namespace string) ([]ObjectChange, error) {
	scoped, err := cl.Scoped(objs, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]ObjectChange, 0, len(scoped))
	for _, u := range scoped {
		ch := ObjectChange{Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
		ri, _, err := cl.ResourceClient(cl.Dynamic, u)
		if member.IsNotServed(err) {
			ch.Action, ch.Note = ActionCreate, "its kind is served only once the release's CRDs are applied: not dry-run"
			out = append(out, ch)
			continue
		}
		if err != nil {
			return nil, err
		}
		var live *unstructured.Unstructured
		err = retryRequest(ctx, func() (err error) {
			live, err = ri.Get(ctx, u.GetName(), metav1.GetOptions{})
			return err
		})
		switch {
		case apierrors.IsNotFound(err):
			live = nil
		case err != nil:
			return nil, fmt.Errorf("reading %s %s: %w", u.GetKind(), objectName(u), err)
		}
		obj := u.DeepCopy()
		obj.SetResourceVersion("")
		obj.SetManagedFields(nil)
		var result *unstructured.Unstructured
		err = retryRequest(ctx, func() (err error) {
			result, err = ri.Apply(ctx, u.GetName(), obj, metav1.ApplyOptions{FieldManager: apply.FieldManager, Force: true, DryRun: []string{metav1.DryRunAll}})
			return err
		})
		switch {
		case err == nil:
		case live == nil && apierrors.IsNotFound(err):
			// Its namespace is created by the apply.
			ch.Action, ch.Note = ActionCreate, "its namespace is created by the apply: not dry-run"
			out = append(out, ch)
			continue
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err) || apierrors.IsConflict(err) || apierrors.IsInternalError(err):
			ch.Refused = err.Error()
		default:
			return nil, fmt.Errorf("dry run of %s %s: %w", u.GetKind(), objectName(u), err)
		}
		switch {
		case live == nil:
			ch.Action = ActionCreate
		case result == nil:
			ch.Action = ActionUpdate
		default:
			ch.Diff = Diff(live, result)
			ch.Action = ActionUnchanged
			if len(ch.Diff) > 0 {
				ch.Action = ActionUpdate
			}
		}
		out = append(out, ch)
	}
	return out, nil
}

// Diff lists the fields that differ between a live object and what it becomes (labels,
// annotations and everything outside metadata), one line each: "+ path: value" added,
// "- path" removed, "~ path: old -> new" changed. A Secret's data values are shown as
// (redacted).
func Diff(live, after *unstructured.Unstructured) []string {
	secret := live.GetAPIVersion() == "v1" && live.GetKind() == "Secret"
	show := func(path string, v any) string {
		if secret && (pathUnder(path, ".data") || pathUnder(path, ".stringData")) {
			return "(redacted)"
		}
		return fmt.Sprintf("%v", v)
	}
	a, b := objectLeaves(live), objectLeaves(after)
	var out []string
	for _, p := range sortedKeys(a) {
		v, ok := b[p]
		switch {
		case !ok:
			out = append(out, "- "+p)
		case !reflect.DeepEqual(a[p], v):
			out = append(out, fmt.Sprintf("~ %s: %s -> %s", p, show(p, a[p]), show(p, v)))
		}
	}
	for _, p := range sortedKeys(b) {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("+ %s: %s", p, show(p, b[p])))
		}
	}
	if len(out) > maxDiffLines {
		out = append(out[:maxDiffLines], fmt.Sprintf("... and %d more", len(out)-maxDiffLines))
	}
	return out
}

func pathUnder(path, prefix string) bool {
	return path == prefix || (len(path) > len(prefix) && path[:len(prefix)] == prefix && (path[len(prefix)] == '.' || path[len(prefix)] == '['))
}

// objectLeaves is leaves plus the object's labels and annotations.
func objectLeaves(u *unstructured.Unstructured) map[string]any {
	out := leaves(u.Object)
	for k, v := range u.GetLabels() {
		out[childPath(".metadata.labels", k)] = v
	}
	for k, v := range u.GetAnnotations() {
		out[childPath(".metadata.annotations", k)] = v
	}
	return out
}
