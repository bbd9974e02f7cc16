package artifact

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestCacheKeepsRecentPayloadsUpToItsBound: a payload read through the cache is read from the
// API server once while it is kept; the least recently used go beyond MaxBytes, a payload
// larger than the bound is never kept, and a payload not stored is an error each time (not
// remembered).
func TestCacheKeepsRecentPayloadsUpToItsBound(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	reads := 0 // the chunks read from the API server
	c := fake.NewClientBuilder().WithScheme(s).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	put := func(b []byte) string {
		t.Helper()
		ref, err := Put(ctx, c, "ns", "test", b)
		if err != nil {
			t.Fatal(err)
		}
		return ref.Digest
	}
	a, b, big := bytes.Repeat([]byte("a"), 40), bytes.Repeat([]byte("b"), 40), bytes.Repeat([]byte("c"), 200)
	da, db, dbig := put(a), put(b), put(big)
	k := &Cache{MaxBytes: 100}
	get := func(digest string, payload []byte, want int) {
		t.Helper()
		reads = 0
		got, err := k.Get(ctx, c, "ns", digest)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("Get %s: %q, %v", digest, got, err)
		}
		if reads != want {
			t.Errorf("Get %s read %d chunks from the API server, want %d", digest, reads, want)
		}
	}
	get(da, a, 1)
	get(da, a, 0)
	get(db, b, 1)
	get(da, a, 0) // a is the most recently used now
	get(dbig, big, 1)
	get(dbig, big, 1) // over the bound: never kept
	get(db, b, 0)
	get(da, a, 0)
	// A third payload kept pushes out the least recently used (120 bytes over 100).
	if _, err := k.Get(ctx, c, "ns", put(bytes.Repeat([]byte("d"), 40))); err != nil {
		t.Fatal(err)
	}
	get(da, a, 0)
	get(db, b, 1) // b was the least recently used
	for range 2 {
		if _, err := k.Get(ctx, c, "other", da); err == nil {
			t.Fatal("a payload not stored in that namespace must be an error")
		}
	}
}
