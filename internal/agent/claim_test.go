package agent

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
)

// The agent's claim of its MemberCluster waits for a hub that does not answer: five faults in a
// row (about 6 s of backoff) and it goes on, where before five tries ended the agent at its
// start. A refusal is still a refusal at once.
func TestClaimWaitsForTheHub(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	faults, gets := 5, 0
	var refuse error
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc).WithStatusSubresource(mc).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			if refuse != nil {
				return refuse
			}
			if gets <= faults {
				return apierrors.NewServiceUnavailable("the hub is restarting")
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	a := &agent{o: Options{Cluster: "edge"}, c: hub, id: "uid-1"}
	if err := a.claim(t.Context(), "v1.35.0"); err != nil {
		t.Fatalf("the claim after %d faults: %v", faults, err)
	}
	got := &v1alpha1.MemberCluster{}
	if err := hub.Get(t.Context(), client.ObjectKey{Name: "edge"}, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.ClusterID != "uid-1" || got.Status.ServerVersion != "v1.35.0" || gets != faults+2 {
		t.Fatalf("after the claim: cluster ID %q, version %q, %d reads (want uid-1, v1.35.0, %d)", got.Status.ClusterID, got.Status.ServerVersion, gets, faults+2)
	}

	refuse = apierrors.NewUnauthorized("the credential was revoked")
	if err := a.claim(t.Context(), "v1.35.0"); !join.IsRefused(err) {
		t.Fatalf("the claim with a revoked credential: want refused, got %v", err)
	}
	refuse = apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "memberclusters"}, "edge", nil)
	if err := a.claim(t.Context(), "v1.35.0"); !join.IsRefused(err) {
		t.Fatalf("the claim forbidden: want refused, got %v", err)
	}
}
