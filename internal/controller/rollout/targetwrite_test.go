package rollout

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// A target's spec write is not refused by a status write its executor (an agent, a relay)
// made since the controller read the target: the spec is written at once, with no read
// from the API server and no write again, and the status the other writer wrote is kept.
// (Before, the spec was written under the optimistic lock on resourceVersion: every status
// write in between cost a conflict, a read and a second write; a RollbackAll of a pull fleet
// spent most of its time there.)
//
// The fake client stands in for the API server; the generation test the write carries is
// shown against a real API server in internal/patch (TestSpecPatchOnARealAPIServer).
func TestTargetSpecWriteIgnoresStatusWrites(t *testing.T) {
	ctx := t.Context()
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	target := &v1alpha1.RolloutTarget{
		ObjectMeta: metav1.ObjectMeta{Name: TargetName("mysql", "member1"), Namespace: "fleet"},
		Spec:       v1alpha1.RolloutTargetSpec{Rollout: "mysql", Cluster: "member1", Revision: 2, Path: v1alpha1.PathUpgrade, ToRelease: "mysql-2"},
	}
	statusWritten := false
	var patches, reads int
	c := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.RolloutTarget{}).WithObjects(target).
		WithInterceptorFuncs(interceptor.Funcs{
			Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				patches++
				if !statusWritten {
					// The executor records a step after the controller read the target.
					statusWritten = true
					cur := &v1alpha1.RolloutTarget{}
					if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
						return err
					}
					cur.Status.Phase = "Snapshotting"
					if err := cl.Status().Update(ctx, cur); err != nil {
						return err
					}
				}
				return cl.Patch(ctx, obj, p, opts...)
			},
			Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				reads++
				return cl.Get(ctx, key, obj, opts...)
			},
		}).Build()
	cached := &v1alpha1.RolloutTarget{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(target), cached); err != nil {
		t.Fatal(err)
	}
	reads = 0
	r := &Reconciler{Client: c, Hub: c, Live: c}
	sc := &scope{r: r, ro: &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "mysql"}},
		targets: map[string]*v1alpha1.RolloutTarget{"member1": cached}}

	changed, err := sc.updateTarget(ctx, "member1", func(t *v1alpha1.RolloutTarget) {
		t.Spec.Revision, t.Spec.Path, t.Spec.FromRelease, t.Spec.ToRelease = 3, v1alpha1.PathRestore, "mysql-2", "mysql-1"
	})
	if err != nil || !changed {
		t.Fatalf("updateTarget: changed %v, %v; want a change and no error", changed, err)
	}
	if patches != 1 || reads != 0 {
		t.Errorf("%d writes and %d reads of the target; want 1 write and no read", patches, reads)
	}
	got := &v1alpha1.RolloutTarget{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(target), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Revision != 3 || got.Spec.Path != v1alpha1.PathRestore || got.Spec.ToRelease != "mysql-1" {
		t.Errorf("spec %+v; want revision 3 restoring mysql-1", got.Spec)
	}
	if got.Status.Phase != "Snapshotting" {
		t.Errorf("status.phase %q; want the executor's Snapshotting kept", got.Status.Phase)
	}
}
