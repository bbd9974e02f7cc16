package artifact

import (
	"bytes"
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// countingReader counts the chunks read through it.
type countingReader struct {
	client.Reader
	n int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestCacheKeepsRecentPayloadsUpToItsBound: a payload read through the cache is read from the
// API server once while it is kept; the least recently used go beyond MaxBytes, a payload
// larger than the bound is never kept, and a payload not stored is an error each time (not
// remembered).
func TestCacheKeepsRecentPayloadsUpToItsBound(t *testing.T) {
	ctx := context.Background()
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	c := fake.NewClientBuilder().WithScheme(s).Build()
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
	r := &countingReader{Reader: c}
	k := &Cache{MaxBytes: 100}
	get := func(digest string, want []byte, reads int) {
		t.Helper()
		r.n = 0
		got, err := k.Get(ctx, r, "ns", digest)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Get %s: %q, %v", digest, got, err)
		}
		if r.n != reads {
			t.Errorf("Get %s read %d chunks from the API server, want %d", digest, r.n, reads)
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
	if _, err := k.Get(ctx, r, "ns", put(bytes.Repeat([]byte("d"), 40))); err != nil {
		t.Fatal(err)
	}
	get(da, a, 0)
	get(db, b, 1) // b was the least recently used
	for range 2 {
		if _, err := k.Get(ctx, r, "other", da); err == nil {
			t.Fatal("a payload not stored in that namespace must be an error")
		}
	}
}
