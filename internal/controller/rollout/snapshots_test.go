package rollout

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// TestSnapshotsAreListedOnceForTheFleet: planning a revision finds the rollout's complete
// snapshots in its namespace and each pull member's own ones in that member's namespace, with
// one list of the hub's snapshots, not one per pull member (a request per member per revision
// at 1,000 members). A snapshot in a pull member's namespace naming another cluster, one in a
// push member's namespace, one of another rollout and one not complete do not count.
func TestSnapshotsAreListedOnceForTheFleet(t *testing.T) {
	s := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(s)
	ready := []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Captured", LastTransitionTime: metav1.Now()}}
	snap := func(ns, name, cluster, rollout string, done bool) *v1alpha1.Snapshot {
		sn := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{snapshot.LabelOperator: "mysql"}},
			Spec: v1alpha1.SnapshotSpec{Cluster: cluster, Rollout: rollout, Release: "mysql-a"}}
		if done {
			sn.Status.Conditions = ready
		}
		return sn
	}
	member := func(name, mode string) *v1alpha1.MemberCluster {
		return &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MemberClusterSpec{Mode: mode}}
	}
	objs := []client.Object{
		member("push1", v1alpha1.ModePush), member("edge1", v1alpha1.ModePull), member("edge2", v1alpha1.ModePull), member("edge3", v1alpha1.ModePull),
		snap("fleet", "a", "push1", "fleet/mysql", true),
		snap("fleet", "b", "push1", "fleet/mysql", false),
		snap("fleet", "c", "push1", "fleet/other", true),
		snap(v1alpha1.MemberNamespace("edge1"), "fleet.d", "edge1", "fleet/mysql", true),
		snap(v1alpha1.MemberNamespace("edge2"), "fleet.e", "edge2", "fleet/mysql", true),
		snap(v1alpha1.MemberNamespace("edge2"), "fleet.f", "edge3", "fleet/mysql", true), // another cluster's, in edge2's namespace
		snap(v1alpha1.MemberNamespace("push1"), "fleet.g", "push1", "fleet/mysql", true), // a push member has no namespace of its own snapshots
	}
	lists := 0
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Snapshot{}).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*v1alpha1.SnapshotList); ok {
				lists++
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	for _, o := range objs {
		if sn, ok := o.(*v1alpha1.Snapshot); ok && len(sn.Status.Conditions) > 0 {
			if err := c.Status().Update(context.Background(), sn); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := &Reconciler{Client: c, Hub: c}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "mysql"}, Spec: v1alpha1.RolloutSpec{Operator: "mysql"}}
	lists = 0
	got, err := r.snapshots(context.Background(), ro)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ref := range got {
		names = append(names, ref.Cluster+"="+ref.Name)
	}
	slices.Sort(names)
	if want := []string{"edge1=fleet.d", "edge2=fleet.e", "push1=a"}; !slices.Equal(names, want) {
		t.Errorf("snapshots %v, want %v", names, want)
	}
	if lists != 1 {
		t.Errorf("%d lists of Snapshots for 3 pull members, want 1", lists)
	}
}
