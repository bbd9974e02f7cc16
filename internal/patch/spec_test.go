//go:build !unit

package patch

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// A Spec patch against a real API server: the spec is replaced whole (a field the new spec
// leaves out is removed) over status and label writes made since the read, which
// do not move the generation it tests; a spec changed since the read refuses it and StaleSpec
// says so, leaving the other writer's spec; a spec the API server refuses is not taken for a
// stale one.
func TestSpecPatchOnARealAPIServer(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		// other is another writer's change between the read and the patch (spec and metadata,
		// then status).
		other func(*v1alpha1.RolloutTarget)
		// ours is the change the patch writes.
		ours      func(*v1alpha1.RolloutTarget)
		wantStale bool
		// wantRefused: the API server refuses our spec; the error is not a stale spec.
		wantRefused bool
		check       func(t *testing.T, got *v1alpha1.RolloutTarget)
	}{{
		name: "status and labels written since",
		other: func(s *v1alpha1.RolloutTarget) {
			s.Labels = map[string]string{"by": "other"}
			s.Status.Phase = "set-by-the-other-writer"
		},
		ours: func(s *v1alpha1.RolloutTarget) { s.Spec.ToRelease, s.Spec.Reason = "r2", "" },
		check: func(t *testing.T, got *v1alpha1.RolloutTarget) {
			if got.Spec.ToRelease != "r2" || got.Spec.Reason != "" {
				t.Errorf("spec %+v; want toRelease r2 and the reason removed", got.Spec)
			}
			if got.Labels["by"] != "other" || got.Status.Phase != "set-by-the-other-writer" {
				t.Errorf("labels %v, status.phase %q: the other writer's changes were lost", got.Labels, got.Status.Phase)
			}
		},
	}, {
		name:      "spec changed since",
		other:     func(s *v1alpha1.RolloutTarget) { s.Spec.ToRelease = "theirs" },
		ours:      func(s *v1alpha1.RolloutTarget) { s.Spec.ToRelease = "ours" },
		wantStale: true,
		check: func(t *testing.T, got *v1alpha1.RolloutTarget) {
			if got.Spec.ToRelease != "theirs" || got.Spec.Reason != "first" {
				t.Errorf("spec %+v; want the other writer's, untouched", got.Spec)
			}
		},
	}, {
		name:        "a spec the API server refuses",
		ours:        func(s *v1alpha1.RolloutTarget) { s.Spec.Path, s.Spec.Reason = "Sideways", "second" },
		wantRefused: true,
		check: func(t *testing.T, got *v1alpha1.RolloutTarget) {
			if got.Spec.Reason != "first" {
				t.Errorf("spec.reason %q; want it unchanged", got.Spec.Reason)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			target := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-", Namespace: ns},
				Spec: v1alpha1.RolloutTargetSpec{Rollout: "r", Cluster: "c", Revision: 1, Path: v1alpha1.PathUpgrade, ToRelease: "r1",
					Operator: "o", InstallNamespace: "o-system", Reason: "first"}}
			if err := c.Create(ctx, target); err != nil {
				t.Fatal(err)
			}
			// The writer reads the object.
			obj := &v1alpha1.RolloutTarget{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(target), obj); err != nil {
				t.Fatal(err)
			}
			generation := obj.Generation
			if tc.other != nil {
				other := obj.DeepCopy()
				tc.other(other)
				status := other.Status.DeepCopy()
				// A merge patch, as a relay writes a finalizer: a Go client's Update of the
				// whole object would also write its defaulted healthGates.timeout (5m) back
				// as 5m0s, a spec change.
				if err := c.Patch(ctx, other, client.MergeFrom(obj)); err != nil {
					t.Fatal(err)
				}
				other.Status = *status
				if err := c.Status().Update(ctx, other); err != nil {
					t.Fatal(err)
				}
			}
			tc.ours(obj)
			p, err := Spec(obj, generation)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Patch(ctx, obj, p)
			fresh := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: target.Name, Namespace: ns}}
			stale, gerr := StaleSpec(ctx, c, fresh, generation, err)
			if gerr != nil {
				t.Fatal(gerr)
			}
			switch {
			case tc.wantStale && (err == nil || !stale):
				t.Fatalf("patch: %v, stale %v; want a stale spec", err, stale)
			case tc.wantRefused && (!apierrors.IsInvalid(err) || stale):
				t.Fatalf("patch: %v, stale %v; want the spec refused as invalid, not stale", err, stale)
			case !tc.wantStale && !tc.wantRefused && err != nil:
				t.Fatalf("patch: %v", err)
			}
			got := &v1alpha1.RolloutTarget{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(target), got); err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
		})
	}
}
