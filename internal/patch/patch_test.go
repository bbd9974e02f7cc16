package patch

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// These tests use controller-runtime's fake client (with the status subresource, and its
// resourceVersion check on patches) for the helper's own logic; patch_testbed_test.go shows
// the optimistic lock against a real API server.

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}()

func cond(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason, LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))}
}

func snapshot() *v1alpha1.Snapshot {
	return &v1alpha1.Snapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"},
		Spec:       v1alpha1.SnapshotSpec{Cluster: "c", Operator: "o"},
		Status: v1alpha1.SnapshotStatus{
			Location:   "secrets://ns#s",
			Conditions: []metav1.Condition{cond("Kept", metav1.ConditionTrue, "Kept"), cond("Gone", metav1.ConditionTrue, "Gone")},
		},
	}
}

// counting wraps a fake client: it counts status patches, and before the first `writes` of
// them it runs writer (another writer changing the object in between) on the stored object.
type counting struct {
	client.WithWatch
	patches int
}

func newClient(t *testing.T, obj client.Object, writes int, writer func(*v1alpha1.Snapshot), fail error) *counting {
	t.Helper()
	c := &counting{}
	c.WithWatch = fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.Snapshot{}).WithObjects(obj).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				c.patches++
				if fail != nil {
					return fail
				}
				if c.patches <= writes && writer != nil {
					cur := &v1alpha1.Snapshot{}
					if err := cl.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
						return err
					}
					writer(cur)
					status := cur.Status.DeepCopy()
					if err := cl.Update(ctx, cur); err != nil {
						return err
					}
					cur.Status = *status // Update answers with the stored status
					if err := cl.Status().Update(ctx, cur); err != nil {
						return err
					}
				}
				return cl.Status().Patch(ctx, o, p, opts...)
			},
		}).Build()
	return c
}

func read(t *testing.T, c client.Client) *v1alpha1.Snapshot {
	t.Helper()
	s := &v1alpha1.Snapshot{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "ns", Name: "s"}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func noWait(context.Context, int) error { return nil }

func TestPatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		// reconcile changes the object as a reconcile would.
		reconcile func(*v1alpha1.Snapshot)
		// writer is another writer, changing the stored object before each of the first
		// `writes` status patches.
		writer func(*v1alpha1.Snapshot)
		writes int
		// wantConflict: Patch returns a *ConflictError.
		wantConflict bool
		// wantPatches is how many status patches were sent.
		wantPatches int
		// check checks the stored object.
		check func(t *testing.T, got *v1alpha1.Snapshot)
	}{{
		name:        "nothing changed: nothing written",
		reconcile:   func(s *v1alpha1.Snapshot) { s.Labels = map[string]string{"only": "metadata"} },
		wantPatches: 0,
	}, {
		name: "a condition set, no conflict: written once",
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
		},
		wantPatches: 1,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if !meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
				t.Errorf("Ready not written: %+v", got.Status.Conditions)
			}
		},
	}, {
		name: "conditions set and removed while another writer set another condition and a label: merged",
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
			meta.RemoveStatusCondition(&s.Status.Conditions, "Gone")
		},
		writer: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Verified", metav1.ConditionTrue, "ChecksumMatched"))
			s.Labels = map[string]string{"by": "other"}
		},
		writes:      1,
		wantPatches: 2,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			for _, typ := range []string{"Ready", "Verified", "Kept"} {
				if !meta.IsStatusConditionTrue(got.Status.Conditions, typ) {
					t.Errorf("condition %s missing: %+v", typ, got.Status.Conditions)
				}
			}
			if meta.FindStatusCondition(got.Status.Conditions, "Gone") != nil {
				t.Errorf("condition Gone, removed by the reconcile, is back: %+v", got.Status.Conditions)
			}
			if got.Labels["by"] != "other" {
				t.Errorf("the other writer's label is lost: %v", got.Labels)
			}
		},
	}, {
		name: "a status field changed while another writer changed only a label: written again",
		reconcile: func(s *v1alpha1.Snapshot) {
			s.Status.Checksum = "sha256:ours"
		},
		writer:      func(s *v1alpha1.Snapshot) { s.Labels = map[string]string{"by": "other"} },
		writes:      1,
		wantPatches: 2,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.Checksum != "sha256:ours" || got.Labels["by"] != "other" {
				t.Errorf("checksum %q, labels %v; want ours and the other writer's", got.Status.Checksum, got.Labels)
			}
		},
	}, {
		name: "a status field changed while another writer changed another status field: conflict, the other kept",
		reconcile: func(s *v1alpha1.Snapshot) {
			s.Status.Checksum = "sha256:ours"
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
		},
		writer:       func(s *v1alpha1.Snapshot) { s.Status.ClusterID = "theirs" },
		writes:       1,
		wantConflict: true,
		wantPatches:  1,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.Checksum != "" || got.Status.ClusterID != "theirs" || meta.FindStatusCondition(got.Status.Conditions, "Ready") != nil {
				t.Errorf("status %+v; want the other writer's alone", got.Status)
			}
		},
	}, {
		name: "a condition the other writer changed to something else: conflict",
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Kept", metav1.ConditionFalse, "Ours"))
		},
		writer: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Kept", metav1.ConditionUnknown, "Theirs"))
		},
		writes:       1,
		wantConflict: true,
		wantPatches:  1,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if c := meta.FindStatusCondition(got.Status.Conditions, "Kept"); c == nil || c.Reason != "Theirs" {
				t.Errorf("Kept %+v; want the other writer's", c)
			}
		},
	}, {
		name: "a condition the other writer set as the reconcile wants it: nothing more to write",
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
		},
		writer: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
		},
		writes:      1,
		wantPatches: 1,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if !meta.IsStatusConditionTrue(got.Status.Conditions, "Ready") {
				t.Errorf("Ready missing: %+v", got.Status.Conditions)
			}
		},
	}, {
		name: "the object changes before every write: bounded tries, then a conflict",
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, cond("Ready", metav1.ConditionTrue, "Stored"))
		},
		writer: func(s *v1alpha1.Snapshot) {
			s.Labels = map[string]string{"n": s.ResourceVersion}
		},
		writes:       100,
		wantConflict: true,
		wantPatches:  MaxTries,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, snapshot(), tc.writes, tc.writer, nil)
			obj := read(t, c)
			h := NewHelper(obj, c)
			h.wait = noWait
			tc.reconcile(obj)
			ran := 0
			h.OnPatched(func() { ran++ })
			err := h.Patch(t.Context(), obj)
			var ce *ConflictError
			switch {
			case tc.wantConflict && !errors.As(err, &ce):
				t.Fatalf("Patch: %v; want a *ConflictError", err)
			case tc.wantConflict && !apierrors.IsConflict(err):
				t.Errorf("Patch: %v; apierrors.IsConflict is false", err)
			case !tc.wantConflict && err != nil:
				t.Fatalf("Patch: %v", err)
			}
			if c.patches != tc.wantPatches {
				t.Errorf("%d status patches sent, want %d", c.patches, tc.wantPatches)
			}
			wantRan := 1
			if tc.wantConflict {
				wantRan = 0
			}
			if ran != wantRan {
				t.Errorf("after-write action ran %d times, want %d", ran, wantRan)
			}
			got := read(t, c)
			if tc.check != nil {
				tc.check(t, got)
			}
			if err == nil && obj.ResourceVersion != got.ResourceVersion {
				t.Errorf("after Patch the object has resourceVersion %s, the stored one %s", obj.ResourceVersion, got.ResourceVersion)
			}
		})
	}
}

// A failed write drops the after-write actions; the next write that goes through runs only
// those added after the failure.
func TestAfterWriteActionsDroppedOnFailure(t *testing.T) {
	boom := apierrors.NewInternalError(errors.New("etcd is away"))
	c := newClient(t, snapshot(), 0, nil, boom)
	obj := read(t, c)
	h := NewHelper(obj, c)
	var ran []string
	h.OnPatched(func() { ran = append(ran, "first") })
	obj.Status.Checksum = "sha256:x"
	err := h.Patch(t.Context(), obj)
	if !errors.Is(err, boom) || IsConflict(err) {
		t.Fatalf("Patch: %v; want the internal error, wrapped", err)
	}
	if len(ran) != 0 {
		t.Fatalf("actions ran after a failed write: %v", ran)
	}

	c2 := newClient(t, snapshot(), 0, nil, nil)
	obj = read(t, c2)
	h = NewHelper(obj, c2)
	h.OnPatched(func() { ran = append(ran, "second") })
	obj.Status.Checksum = "sha256:x"
	if err := h.Patch(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	// The helper starts from what it wrote: a second Patch with no change writes nothing and
	// runs its own actions.
	h.OnPatched(func() { ran = append(ran, "third") })
	if err := h.Patch(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	if len(ran) != 2 || ran[0] != "second" || ran[1] != "third" || c2.patches != 1 {
		t.Errorf("actions ran %v with %d patches; want [second third] with 1", ran, c2.patches)
	}
}

func TestResult(t *testing.T) {
	conflict := &ConflictError{Object: "Snapshot ns/s", Err: apierrors.NewConflict(schema.GroupResource{Resource: "snapshots"}, "s", errors.New("changed"))}
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "snapshots"}, "s")
	other := errors.New("the reconcile's own error")
	boom := errors.New("the write failed")
	for _, tc := range []struct {
		name          string
		res           ctrl.Result
		err, patchErr error
		// wantRequeue: a RequeueAfter in (0, wantRequeue].
		wantRequeue time.Duration
		wantErrs    []error
	}{
		{name: "written", res: ctrl.Result{RequeueAfter: time.Minute}, wantRequeue: time.Minute},
		{name: "object gone", res: ctrl.Result{RequeueAfter: time.Minute}, patchErr: notFound, wantRequeue: time.Minute},
		{name: "conflict alone: requeued soon, no error", res: ctrl.Result{RequeueAfter: time.Minute}, patchErr: conflict, wantRequeue: 2 * ConflictRequeue},
		{name: "conflict with a sooner requeue", res: ctrl.Result{RequeueAfter: time.Millisecond}, patchErr: conflict, wantRequeue: time.Millisecond},
		{name: "conflict and the reconcile's error", err: other, patchErr: conflict, wantErrs: []error{other}},
		{name: "a failed write", res: ctrl.Result{RequeueAfter: time.Minute}, err: other, patchErr: boom, wantErrs: []error{other, boom}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Result(t.Context(), tc.res, tc.err, tc.patchErr)
			if tc.wantErrs == nil && err != nil {
				t.Fatalf("error %v, want none", err)
			}
			for _, want := range tc.wantErrs {
				if !errors.Is(err, want) {
					t.Errorf("error %v, want it to hold %v", err, want)
				}
			}
			if tc.wantRequeue > 0 && (res.RequeueAfter <= 0 || res.RequeueAfter > tc.wantRequeue) {
				t.Errorf("requeue after %s, want within (0, %s]", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
	if !fault.IsConflict(conflict) {
		t.Error("fault.IsConflict is false for a *ConflictError")
	}
}
