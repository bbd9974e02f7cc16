package member_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
)

const cacheTestKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: m
  cluster:
    server: https://127.0.0.1:1
contexts:
- name: m
  context: {cluster: m, user: m}
current-context: m
users:
- name: m
  user: {token: not-a-real-token}
`

// A member forgotten (deleted) while another caller was reading its kubeconfig Secret must
// not be cached again by that caller: nothing would ever drop it.
func TestCacheKeepsNoMemberForgottenWhileItsSecretWasRead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1"},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: "eu-1", Key: "kubeconfig"}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rewind-system", Name: "eu-1"},
		Data: map[string][]byte{"kubeconfig": []byte(cacheTestKubeconfig)}}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc, secret).Build()

	cache := &member.Cache{}
	forgetDuringRead := true
	cache.Hub = interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			err := c.Get(ctx, key, obj, opts...)
			if _, ok := obj.(*corev1.Secret); ok && forgetDuringRead {
				// The MemberCluster reconciler sees the member deleted right now.
				cache.Forget(mc.Name)
			}
			return err
		},
	})

	cl, err := cache.For(context.Background(), mc)
	if err != nil {
		t.Fatal(err)
	}
	if cl == nil {
		t.Fatal("For returned no Cluster")
	}
	if n := cache.Len(); n != 0 {
		t.Fatalf("the cache holds %d members after the member was forgotten during For; want 0", n)
	}

	// Without a Forget meanwhile, the member is kept and reused.
	forgetDuringRead = false
	first, err := cache.For(context.Background(), mc)
	if err != nil {
		t.Fatal(err)
	}
	if n := cache.Len(); n != 1 {
		t.Fatalf("the cache holds %d members; want 1", n)
	}
	again, err := cache.For(context.Background(), mc)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("a member with unchanged credentials got new clients")
	}

	// A member deleted after Get read its MemberCluster (before its Secret): not kept either.
	// And another member forgotten meanwhile changes nothing for this one.
	for _, tc := range []struct {
		forget string
		want   int
	}{{mc.Name, 0}, {"another-member", 1}} {
		c := &member.Cache{}
		c.Hub = interceptor.NewClient(base, interceptor.Funcs{
			Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				err := cl.Get(ctx, key, obj, opts...)
				if _, ok := obj.(*v1alpha1.MemberCluster); ok {
					c.Forget(tc.forget)
				}
				return err
			},
		})
		if _, err := c.Get(context.Background(), mc.Name); err != nil {
			t.Fatal(err)
		}
		if n := c.Len(); n != tc.want {
			t.Errorf("%s forgotten while Get ran: the cache holds %d members, want %d", tc.forget, n, tc.want)
		}
	}
}
