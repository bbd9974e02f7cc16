package restore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rewind-dev/rewind/internal/fault"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// tries is how many times one request of a restore is sent when it meets a fault
// (fault.IsTransient) before its error is returned: about 6 s of backoff in all, which rides
// out a reset connection, a load balancer's failover or a busy API server. A step that still
// meets the fault returns it, and the caller runs the step again as a whole.
const tries = 6

// try sends one request (fn), again in place while it meets a fault, up to tries times.
func (r *restorer) try(ctx context.Context, fn func() error) error {
	return fault.Retry(ctx, tries, fn)
}

// get reads one object, riding out faults.
func (r *restorer) get(ctx context.Context, ri dynamic.ResourceInterface, name string) (*unstructured.Unstructured, error) {
	var u *unstructured.Unstructured
	err := r.try(ctx, func() (err error) {
		u, err = ri.Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return u, err
}

// maxErrors bounds the errors forEach returns (it says how many more there were).
const maxErrors = 10

// forEach runs fn(0), ..., fn(n-1), at most Parallelism at once, and returns their errors
// joined. Once one has returned a fault it could not ride out (the member is away, most
// likely), no more are started: the step returns, and is run again as a whole.
func (r *restorer) forEach(ctx context.Context, n int, fn func(i int) error) error {
	sem := make(chan struct{}, r.o.Parallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	stopped := false
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		mu.Lock()
		stop := stopped
		mu.Unlock()
		if stop {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				stopped = stopped || fault.IsTransient(err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > maxErrors {
		errs = append(errs[:maxErrors], fmt.Errorf("and %d more errors", len(errs)-maxErrors))
	}
	return errors.Join(errs...)
}

// maxConflicts bounds how often put reads an object again because it changed meanwhile.
const maxConflicts = 10

// put makes the live object equal desired: create if missing, full update (with the live
// resourceVersion, keeping the live UID) if different, then the status subresource for
// custom resources. Each request rides out faults in place; a conflict (the object changed
// since it was read, or an earlier try of our own write did land) reads it again and
// compares again. An update refused because it changes a field of a built-in kind that only
// a create may set leads to a recreate (see recreatable); any other refusal is returned.
// It returns the outcome of the last write it made (unchanged when it wrote nothing), and
// the live UID.
func (r *restorer) put(ctx context.Context, desired, live *unstructured.Unstructured, hasStatus bool) (string, types.UID, error) {
	ri, err := r.resource(desired)
	if err != nil {
		return "", "", err
	}
	outcome := outUnchanged
	// reread reads the object again after a conflict or a create that found it existing.
	reread := func() error {
		var err error
		live, err = r.get(ctx, ri, desired.GetName())
		if apierrors.IsNotFound(err) {
			live, err = nil, nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", keyOf(desired), err)
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		if attempt > maxConflicts {
			return "", "", fmt.Errorf("%s kept changing while it was restored (%d tries)", keyOf(desired), attempt)
		}
		if live == nil {
			outcome = outCreated
			created, err := r.createObject(ctx, ri, desired)
			if apierrors.IsAlreadyExists(err) {
				if err := reread(); err != nil {
					return "", "", err
				}
				continue
			}
			if err != nil {
				return "", "", fmt.Errorf("creating %s: %w", keyOf(desired), err)
			}
			live = created
		} else {
			if r.cmp.Equal(desired, live) && ownerUIDsEqual(desired, live) {
				return outcome, live.GetUID(), nil
			}
			want := desired.DeepCopy()
			want.SetUID(live.GetUID())
			want.SetResourceVersion(live.GetResourceVersion())
			keepServerAllocated(want, live)
			if live.GetDeletionTimestamp() != nil {
				// An in-flight deletion keeps every finalizer it waits on.
				want.SetFinalizers(union(want.GetFinalizers(), live.GetFinalizers()))
			}
			outcome = outRestored
			var updated *unstructured.Unstructured
			err := r.try(ctx, func() (err error) {
				updated, err = ri.Update(ctx, want, metav1.UpdateOptions{})
				return err
			})
			switch {
			case apierrors.IsConflict(err):
				if err := reread(); err != nil {
					return "", "", err
				}
				continue
			case apierrors.IsNotFound(err):
				live = nil
				continue
			case err != nil:
				why, ok := recreatable(desired.GroupVersionKind(), err)
				if !ok {
					return "", "", fmt.Errorf("updating %s: %w", keyOf(desired), refusal(err))
				}
				created, err := r.recreate(ctx, ri, desired, live, why, err)
				if apierrors.IsAlreadyExists(err) {
					if err := reread(); err != nil {
						return "", "", err
					}
					continue
				}
				if err != nil {
					return "", "", err
				}
				r.rep.note(&r.rep.Recreated, fmt.Sprintf("%s (%s)", keyOf(desired), why))
				outcome, updated = outRecreated, created
			}
			live = updated
		}
		if hasStatus {
			err := r.putStatus(ctx, ri, desired, live)
			if apierrors.IsConflict(err) {
				if err := reread(); err != nil {
					return "", "", err
				}
				continue
			}
			if err != nil {
				return "", "", err
			}
		}
		return outcome, live.GetUID(), nil
	}
}

// createObject creates desired (without its UID and resourceVersion), and its namespace if
// that was deleted since the snapshot, riding out faults. An AlreadyExists is returned as is
// (an earlier try whose answer was lost may have created it).
func (r *restorer) createObject(ctx context.Context, ri dynamic.ResourceInterface, desired *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c := desired.DeepCopy()
	c.SetUID("")
	c.SetResourceVersion("")
	var created *unstructured.Unstructured
	post := func() error {
		return r.try(ctx, func() (err error) {
			created, err = ri.Create(ctx, c, metav1.CreateOptions{})
			return err
		})
	}
	err := post()
	if apierrors.IsNotFound(err) && c.GetNamespace() != "" {
		// The namespace itself was deleted since the snapshot: recreate it, as Velero does.
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.GetNamespace()}}}
		nerr := r.try(ctx, func() error {
			_, err := r.dyn.Resource(namespaceGVR).Create(ctx, ns, metav1.CreateOptions{})
			return err
		})
		if nerr != nil && !apierrors.IsAlreadyExists(nerr) {
			return nil, fmt.Errorf("recreating namespace %s for %s: %w", c.GetNamespace(), keyOf(desired), nerr)
		}
		if nerr == nil {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("namespace %s was recreated", c.GetNamespace()))
		}
		err = post()
	}
	return created, err
}

// putStatus writes desired's status through the status subresource when it differs from
// live's, riding out faults. A conflict is returned as is (put reads the object again).
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
	err := r.try(ctx, func() error {
		_, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("restoring the status of %s: %w", keyOf(desired), err)
	}
	return err
}

// recreateTimeout bounds the wait for a deleted object to be gone before it is created again.
const recreateTimeout = time.Minute

// recreate deletes live (its dependents orphaned, so that the new object adopts them) and
// creates desired, because an update was refused for why (a field only a create may set).
// An object with finalizers is not deleted: they could hold its deletion for as long as
// whatever acts on them is away (an operator quiesced by this very restore), and the object
// would be left terminating. If the object was deleted but not created again (the step was
// cut), the step's next run finds it missing and creates it.
func (r *restorer) recreate(ctx context.Context, ri dynamic.ResourceInterface, desired, live *unstructured.Unstructured, why string, refused error) (*unstructured.Unstructured, error) {
	if f := live.GetFinalizers(); len(f) > 0 {
		return nil, fmt.Errorf("updating %s was refused (%s), and it is not deleted to be created again while it has finalizers %v: %w", keyOf(desired), why, f, refused)
	}
	orphan := metav1.DeletePropagationOrphan
	uid := live.GetUID()
	err := r.try(ctx, func() error {
		return ri.Delete(ctx, live.GetName(), metav1.DeleteOptions{PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &uid}})
	})
	// NotFound: gone already. Conflict: the UID precondition failed, another object of the
	// name replaced it.
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return nil, fmt.Errorf("deleting %s to recreate it: %w", keyOf(desired), err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, recreateTimeout, true, func(ctx context.Context) (bool, error) {
		cur, err := ri.Get(ctx, live.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err == nil:
			return cur.GetUID() != uid, nil
		case fault.IsTransient(err):
			return false, nil // polled again
		}
		return false, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s was not deleted within %s so it cannot be recreated: %w", keyOf(desired), recreateTimeout, err)
	}
	created, err := r.createObject(ctx, ri, desired)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("recreating %s: %w", keyOf(desired), err)
	}
	return created, err
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

// neverRecreated are built-in kinds a restore never deletes to create again, whatever an
// update says: deleting them deletes what they hold (a namespace's objects, a claim's volume,
// a CRD's custom resources).
var neverRecreated = map[schema.GroupKind]bool{
	{Kind: "Namespace"}:             true,
	{Kind: "PersistentVolumeClaim"}: true,
	{Kind: "PersistentVolume"}:      true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: true,
}

// The cause types of field errors (apimachinery's field.ErrorType, as StatusCause types).
const (
	causeInvalid   = metav1.CauseType(field.ErrorTypeInvalid)
	causeForbidden = metav1.CauseType(field.ErrorTypeForbidden)
)

// createOnlyField is a field of a built-in kind that only a create may set, with the type of
// the cause the API server gives when an update changes it.
type createOnlyField struct {
	cause metav1.CauseType
	field string
}

// createOnly lists, per built-in kind, the create-only fields whose refusal is not worded by
// apimachinery's ValidateImmutableField (which createOnlyCause knows for every built-in
// kind). A cause at the field or below it (spec.clusterIPs[0]) counts.
var createOnly = map[schema.GroupKind][]createOnlyField{
	// "may not change once set".
	{Kind: "Service"}: {
		{causeInvalid, "spec.clusterIPs"},
		{causeInvalid, "spec.ipFamilies"},
		{causeInvalid, "spec.loadBalancerClass"},
	},
	// Members before Kubernetes 1.3x refuse any change but a few fields in one cause: "updates
	// to statefulset spec for fields other than 'replicas', ... are forbidden".
	{Group: "apps", Kind: "StatefulSet"}: {{causeForbidden, "spec"}},
	// "field is immutable when `immutable` is set".
	{Kind: "ConfigMap"}: {
		{causeForbidden, "data"},
		{causeForbidden, "binaryData"},
		{causeForbidden, "immutable"},
	},
	{Kind: "Secret"}: {
		{causeForbidden, "data"},
		{causeForbidden, "immutable"},
	},
}

// recreatable says whether an update refused with err may be made by deleting the object and
// creating it again, and why (the refused fields, for the report). It may only for a
// built-in kind (IsBuiltin, not in neverRecreated), on a typed Invalid error every cause of
// which is a create-only field (createOnlyCause): a cause of any other kind is a real
// refusal, which a recreate would meet too, after the delete. A custom resource is never
// recreated: its CRD's validation messages are its author's words ("immutable" may mean
// anything), and deleting it would orphan its children and, with its operator quiesced,
// leave it terminating on its finalizers.
func recreatable(gvk schema.GroupVersionKind, err error) (string, bool) {
	gk := gvk.GroupKind()
	if !IsBuiltin(gvk) || neverRecreated[gk] || !apierrors.IsInvalid(err) {
		return "", false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil || len(status.Status().Details.Causes) == 0 {
		return "", false
	}
	var why []string
	for _, c := range status.Status().Details.Causes {
		if !createOnlyCause(gk, c) {
			return "", false
		}
		why = append(why, c.Field+": "+c.Message)
	}
	return strings.Join(why, "; "), true
}

// createOnlyCause says whether a cause of an Invalid error of a built-in kind says a
// create-only field changed: a FieldValueInvalid cause worded by ValidateImmutableField
// ("<Invalid value: ...>: field is immutable", apimachinery's FieldImmutableErrorMsg), or a
// cause createOnly lists for the kind.
func createOnlyCause(gk schema.GroupKind, c metav1.StatusCause) bool {
	if c.Type == causeInvalid && strings.HasSuffix(c.Message, ": "+validation.FieldImmutableErrorMsg) {
		return true
	}
	for _, f := range createOnly[gk] {
		if c.Type == f.cause && (c.Field == f.field || strings.HasPrefix(c.Field, f.field+".") || strings.HasPrefix(c.Field, f.field+"[")) {
			return true
		}
	}
	return false
}

// refusal names the fields of an update the API server refused as Invalid (the error kept,
// wrapped); other errors are returned as they are.
func refusal(err error) error {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return err
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		if c.Field != "" && !slices.Contains(fields, c.Field) {
			fields = append(fields, c.Field)
		}
	}
	if len(fields) == 0 {
		return err
	}
	return fmt.Errorf("refused at %s: %w", strings.Join(fields, ", "), err)
}
