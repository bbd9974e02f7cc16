package notification

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestARolloutNoPolicySelectsReadsNoTargets: the notification reconcile runs at every change of
// a Rollout's targets; where no policy selects the Rollout it reads none of them (it read,
// and copied, every target of the fleet each time: at 1,000 clusters a third of the
// controller's CPU in a wave). Where one does, it reads them.
func TestARolloutNoPolicySelectsReadsNoTargets(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "fleet", Labels: map[string]string{"team": "a"}}}
	other := &v1alpha1.NotificationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-b", Namespace: "fleet"},
		Spec: v1alpha1.NotificationPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "b"}}}}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "db-m1", Namespace: "fleet", Labels: map[string]string{v1alpha1.LabelRollout: "db"}},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "db", Cluster: "m1"}}
	targetLists := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(ro, other, tgt).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*v1alpha1.RolloutTargetList); ok {
				targetLists++
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	r := &Reconciler{Client: c, Reader: c}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ro)}
	if _, err := r.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if targetLists != 0 {
		t.Errorf("no policy selects Rollout db: its targets were listed %d times, want 0", targetLists)
	}
	mine := &v1alpha1.NotificationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "fleet"},
		Spec: v1alpha1.NotificationPolicySpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}
	if err := c.Create(t.Context(), mine); err != nil {
		t.Fatal(err)
	}
	_, _ = r.Reconcile(t.Context(), req) // the policy has no destination: what it says is not this test's business
	if targetLists != 1 {
		t.Errorf("policy team-a selects Rollout db: its targets were listed %d times, want 1", targetLists)
	}
}
