//go:build !unit

package patch

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// The optimistic lock against a real API server: between the reconcile's read and its status
// write, another writer changes the object. The write is refused (409) and resolved: the
// reconcile's conditions are merged over the other writer's, and nothing the other writer set
// is lost; a status field both changed is a conflict for the reconcile to run again.
func TestOptimisticLockOnARealAPIServer(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		// other is the other writer's change, made between the read and the write.
		other func(*v1alpha1.Snapshot)
		// reconcile is the reconcile's change.
		reconcile func(*v1alpha1.Snapshot)
		// wantConflict: the write is refused as a conflict.
		wantConflict bool
		// ownWrites: the helper is made with RecognizeOwnWrites.
		ownWrites bool
		check     func(t *testing.T, got *v1alpha1.Snapshot)
	}{{
		name: "conditions merged",
		other: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionVerified, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonChecksumMatched, Message: "checked"})
			s.Status.ClusterID = "set-by-the-other-writer"
		},
		reconcile: func(s *v1alpha1.Snapshot) {
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored, Message: "stored"})
			meta.RemoveStatusCondition(&s.Status.Conditions, "Old")
		},
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionVerified) {
				t.Errorf("conditions %+v; want Ready (the reconcile's) and Verified (the other writer's)", got.Status.Conditions)
			}
			if meta.FindStatusCondition(got.Status.Conditions, "Old") != nil {
				t.Errorf("condition Old, removed by the reconcile, is still there")
			}
			if got.Status.ClusterID != "set-by-the-other-writer" {
				t.Errorf("status.clusterID %q: the other writer's field was lost", got.Status.ClusterID)
			}
		},
	}, {
		name:      "a status field written again over a label change",
		other:     func(s *v1alpha1.Snapshot) { s.Labels = map[string]string{"by": "other"} },
		reconcile: func(s *v1alpha1.Snapshot) { s.Status.Checksum = "sha256:ours" },
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.Checksum != "sha256:ours" || got.Labels["by"] != "other" {
				t.Errorf("checksum %q, labels %v; want the reconcile's checksum and the other writer's label", got.Status.Checksum, got.Labels)
			}
		},
	}, {
		name:  "status fields both changed: a conflict, the other writer's kept",
		other: func(s *v1alpha1.Snapshot) { s.Status.ClusterID = "set-by-the-other-writer" },
		reconcile: func(s *v1alpha1.Snapshot) {
			s.Status.ClusterID = "the-reconciles"
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored, Message: "stored"})
		},
		wantConflict: true,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.ClusterID != "set-by-the-other-writer" || meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady) != nil {
				t.Errorf("status %+v; want the other writer's alone", got.Status)
			}
		},
	}, {
		// The writer's own write, done and its answer lost: the transport's second try, with
		// the resourceVersion the first replaced, is refused. With RecognizeOwnWrites it is done;
		// before, a conflict: the write failed though it was done (a `rewind snapshot take`
		// failed after its snapshot was stored).
		name:      "its own write, whose answer was lost",
		ownWrites: true,
		other: func(s *v1alpha1.Snapshot) {
			s.Status.ClusterID = "the-reconciles"
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored, Message: "stored"})
		},
		reconcile: func(s *v1alpha1.Snapshot) {
			s.Status.ClusterID = "the-reconciles"
			meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored, Message: "stored"})
		},
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.ClusterID != "the-reconciles" || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
				t.Errorf("status %+v; want the reconcile's", got.Status)
			}
		},
	}, {
		// The same without RecognizeOwnWrites (a reconcile over a cache): a conflict, so that a
		// stale copy repeating the last write does not run its Events and metrics again.
		name: "a status already as written, for a reconcile",
		other: func(s *v1alpha1.Snapshot) {
			s.Status.ClusterID = "the-reconciles"
		},
		reconcile: func(s *v1alpha1.Snapshot) {
			s.Status.ClusterID = "the-reconciles"
		},
		wantConflict: true,
		check: func(t *testing.T, got *v1alpha1.Snapshot) {
			if got.Status.ClusterID != "the-reconciles" {
				t.Errorf("status %+v; want the other writer's", got.Status)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{GenerateName: "s-", Namespace: ns}, Spec: v1alpha1.SnapshotSpec{Cluster: "c", Operator: "o"}}
			if err := c.Create(ctx, snap); err != nil {
				t.Fatal(err)
			}
			snap.Status.Conditions = []metav1.Condition{{Type: "Old", Status: metav1.ConditionTrue, Reason: "Old", Message: "old", LastTransitionTime: metav1.Now()}}
			if err := c.Status().Update(ctx, snap); err != nil {
				t.Fatal(err)
			}

			// The reconcile reads the object.
			obj := &v1alpha1.Snapshot{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(snap), obj); err != nil {
				t.Fatal(err)
			}
			var opts []Option
			if tc.ownWrites {
				opts = append(opts, RecognizeOwnWrites())
			}
			h := NewHelper(obj, c, opts...)
			// Another writer changes it.
			other := obj.DeepCopy()
			tc.other(other)
			status := other.Status.DeepCopy()
			if err := c.Update(ctx, other); err != nil {
				t.Fatal(err)
			}
			other.Status = *status // Update answers with the stored status
			if err := c.Status().Update(ctx, other); err != nil {
				t.Fatal(err)
			}
			// The reconcile writes what it changed.
			tc.reconcile(obj)
			emitted := false
			h.OnPatched(func() { emitted = true })
			err := h.Patch(ctx, obj)
			var ce *ConflictError
			switch {
			case tc.wantConflict && (!errors.As(err, &ce) || !apierrors.IsConflict(err)):
				t.Fatalf("Patch: %v; want a conflict", err)
			case !tc.wantConflict && err != nil:
				t.Fatalf("Patch: %v", err)
			}
			if emitted == tc.wantConflict {
				t.Errorf("after-write action ran: %v; want %v", emitted, !tc.wantConflict)
			}
			got := &v1alpha1.Snapshot{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(snap), got); err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}
