package artifact

import (
	"container/list"
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cache keeps the payloads most recently read through it in memory, up to MaxBytes in all.
// Payloads are content-addressed and verified against their digest when read, so an entry never
// goes stale. The hub's relay reads the same release manifests and renderings once for every
// pull member a revision copies them to: a 1,000-cluster wave read each one 1,000 times from
// the API server (a chart of 1.5 MiB: 1.5 GB through the API server and etcd).
type Cache struct {
	// MaxBytes bounds the payloads kept (default 64 MiB); a larger payload is not kept.
	MaxBytes int64

	mu      sync.Mutex
	entries map[string]*list.Element
	lru     list.List
	bytes   int64
}

type cached struct {
	key     string
	payload []byte
}

const defaultCacheBytes = 64 << 20

// Get returns the payload with digest in namespace, from the cache or read through c (Get).
// Callers must not modify it.
func (k *Cache) Get(ctx context.Context, c client.Reader, namespace, digest string) ([]byte, error) {
	key := namespace + "/" + digest
	k.mu.Lock()
	if e, ok := k.entries[key]; ok {
		k.lru.MoveToFront(e)
		b := e.Value.(*cached).payload
		k.mu.Unlock()
		return b, nil
	}
	k.mu.Unlock()
	b, err := Get(ctx, c, namespace, digest)
	if err != nil {
		return nil, err
	}
	k.add(key, b)
	return b, nil
}

func (k *Cache) add(key string, b []byte) {
	limit := k.MaxBytes
	if limit <= 0 {
		limit = defaultCacheBytes
	}
	if int64(len(b)) > limit {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.entries == nil {
		k.entries = map[string]*list.Element{}
	}
	if _, ok := k.entries[key]; ok {
		return // read at once by another caller
	}
	k.entries[key] = k.lru.PushFront(&cached{key: key, payload: b})
	k.bytes += int64(len(b))
	for k.bytes > limit {
		old := k.lru.Back()
		k.lru.Remove(old)
		e := old.Value.(*cached)
		delete(k.entries, e.key)
		k.bytes -= int64(len(e.payload))
	}
}
