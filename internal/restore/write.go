package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// forEach runs fn on items with bounded parallelism and returns the errors joined.
func (r *restorer) forEach(ctx context.Context, n int, fn func(i int) error) error {
	sem := make(chan struct{}, r.o.Parallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more errors", len(errs)-10))
	}
	return errors.Join(errs...)
}

// put makes the live object equal desired: create if missing, full update (with the live
// resourceVersion, keeping the live UID) if different, then the status subresource for
// custom resources. Conflicts are retried; an immutable field leads to a recreate.
func (r *restorer) put(ctx context.Context, desired, live *unstructured.Unstructured, hasStatus bool) (string, types.UID, error) {
	ri, err := r.resource(desired)
	if err != nil {
		return "", "", err
	}
	for attempt := 0; ; attempt++ {
		if live == nil {
			created, err := r.create(ctx, ri, desired, hasStatus)
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil {
					return "", "", err
				}
				continue
			}
			if err != nil {
				return "", "", err
			}
			return outCreated, created.GetUID(), nil
		}
		if r.cmp.Equal(desired, live) && ownerUIDsEqual(desired, live) {
			return outUnchanged, live.GetUID(), nil
		}
		want := desired.DeepCopy()
		want.SetUID(live.GetUID())
		want.SetResourceVersion(live.GetResourceVersion())
		keepServerAllocated(want, live)
		if live.GetDeletionTimestamp() != nil {
			// An in-flight deletion keeps every finalizer it waits on.
			want.SetFinalizers(union(want.GetFinalizers(), live.GetFinalizers()))
		}
		updated, err := ri.Update(ctx, want, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err) && attempt < 10:
			if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", "", err
			} else if apierrors.IsNotFound(err) {
				live = nil
			}
			continue
		case apierrors.IsNotFound(err) && attempt < 5:
			live = nil
			continue
		case isImmutable(err):
			uid, rerr := r.recreate(ctx, ri, desired, live, hasStatus, err)
			if rerr != nil {
				return "", "", rerr
			}
			return outRecreated, uid, nil
		case err != nil:
			return "", "", fmt.Errorf("updating %s: %w", keyOf(desired), err)
		}
		if hasStatus {
			if err := r.putStatus(ctx, ri, desired, updated); err != nil {
				if apierrors.IsConflict(err) && attempt < 10 {
					if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil {
						return "", "", err
					}
					continue
				}
				return "", "", err
			}
		}
		return outRestored, updated.GetUID(), nil
	}
}

func (r *restorer) create(ctx context.Context, ri dynamic.ResourceInterface, desired *unstructured.Unstructured, hasStatus bool) (*unstructured.Unstructured, error) {
	c := desired.DeepCopy()
	c.SetUID("")
	c.SetResourceVersion("")
	created, err := ri.Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) && c.GetNamespace() != "" {
		// The namespace itself was deleted since the snapshot: recreate it, as Velero does.
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.GetNamespace()}}}
		if _, nerr := r.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
			return nil, fmt.Errorf("recreating namespace %s for %s: %w", c.GetNamespace(), keyOf(desired), nerr)
		}
		r.rep.note(&r.rep.Notes, fmt.Sprintf("namespace %s was recreated", c.GetNamespace()))
		created, err = ri.Create(ctx, c, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	if hasStatus {
		if err := r.putStatus(ctx, ri, desired, created); err != nil {
			return nil, err
		}
	}
	return created, nil
}

// putStatus writes desired's status through the status subresource when it differs.
func (r *restorer) putStatus(ctx context.Context, ri dynamic.ResourceInterface, desired, live *unstructured.Unstructured) error {
	ds, dok := desired.Object["status"]
	ls, lok := live.Object["status"]
	if dok == lok && jsonEqual(ds, ls) {
		return nil
	}
	u := live.DeepCopy()
	if dok {
		u.Object["status"] = ds
	} else {
		delete(u.Object, "status")
	}
	_, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("restoring the status of %s: %w", keyOf(desired), err)
	}
	return err
}

// recreate deletes and creates an object whose update hit an immutable field.
func (r *restorer) recreate(ctx context.Context, ri dynamic.ResourceInterface, desired, live *unstructured.Unstructured, hasStatus bool, cause error) (types.UID, error) {
	orphan := metav1.DeletePropagationOrphan
	uid := live.GetUID()
	err := ri.Delete(ctx, live.GetName(), metav1.DeleteOptions{PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("deleting %s to recreate it: %w", keyOf(desired), err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := ri.Get(ctx, live.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.GetUID() != uid) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s was not deleted within a minute (finalizers?) so it cannot be recreated", keyOf(desired))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	created, err := r.create(ctx, ri, desired, hasStatus)
	if err != nil {
		return "", fmt.Errorf("recreating %s: %w", keyOf(desired), err)
	}
	r.rep.note(&r.rep.Recreated, fmt.Sprintf("%s (%s)", keyOf(desired), immutableField(cause)))
	return created.GetUID(), nil
}

// isImmutable says whether an update was refused because it changes a field that can only be
// set on create. The API server words it per kind: "field is immutable" (a Deployment's
// selector), "may not change once set" (a Service's clusterIPs), "updates to statefulset spec
// for fields other than ... are forbidden".
func isImmutable(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"immutable", "may not change once set", "are forbidden"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func immutableField(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return msg
}

// keepServerAllocated copies fields the server allocated from live into want, so that an
// update does not try to change them: a Service's cluster IPs (unless the snapshot's is
// headless, which is a real difference).
func keepServerAllocated(want, live *unstructured.Unstructured) {
	gvk := want.GroupVersionKind()
	if gvk.Group == "" && gvk.Kind == "Service" {
		wip, _, _ := unstructured.NestedString(want.Object, "spec", "clusterIP")
		lip, _, _ := unstructured.NestedString(live.Object, "spec", "clusterIP")
		if wip != "None" && lip != "None" && lip != "" {
			_ = unstructured.SetNestedField(want.Object, lip, "spec", "clusterIP")
			if ips, ok, _ := unstructured.NestedStringSlice(live.Object, "spec", "clusterIPs"); ok {
				_ = unstructured.SetNestedStringSlice(want.Object, ips, "spec", "clusterIPs")
			}
		}
	}
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// ownerUIDsEqual compares ownerReference UIDs (Normalize ignores them).
func ownerUIDsEqual(a, b *unstructured.Unstructured) bool {
	ra, rb := a.GetOwnerReferences(), b.GetOwnerReferences()
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if ra[i].UID != rb[i].UID {
			return false
		}
	}
	return true
}
