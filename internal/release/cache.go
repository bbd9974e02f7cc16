package release

import (
	"container/list"
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Cache keeps the manifests of recently used releases in memory. OperatorReleases are
// immutable and their manifests content-addressed (verified against their digest), so an entry
// never goes stale: it is keyed by the release's UID and digest (ManifestDigest). Callers must
// not modify the manifests they get.
type Cache struct {
	// Size bounds the releases kept (default 32).
	Size int

	mu      sync.Mutex
	entries map[string]*list.Element
	lru     list.List
}

type cacheEntry struct {
	key  string
	objs []*unstructured.Unstructured
}

// Load reads an OperatorRelease (through c) and its manifests (from the cache, or through c).
// A release whose manifests cannot be read yet (a release from spec.source the controller has
// not rendered, or failed to) is a *NotReadyError: wait for it as for a release not created yet.
func (k *Cache) Load(ctx context.Context, c client.Reader, namespace, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	rel := &v1alpha1.OperatorRelease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rel); err != nil {
		return nil, nil, getError(namespace, name, err)
	}
	if err := CheckReady(rel); err != nil {
		return nil, nil, err
	}
	key := string(rel.UID) + "/" + ManifestDigest(rel)
	k.mu.Lock()
	if e, ok := k.entries[key]; ok {
		k.lru.MoveToFront(e)
		objs := e.Value.(*cacheEntry).objs
		k.mu.Unlock()
		return rel, objs, nil
	}
	k.mu.Unlock()
	objs, err := Manifests(ctx, c, rel)
	if err != nil {
		return nil, nil, err
	}
	k.add(key, objs)
	return rel, objs, nil
}

// Manifests reads canonical manifests stored under digest in namespace (a cluster's own
// rendering of a release), from the cache or through c.
func (k *Cache) Manifests(ctx context.Context, c client.Reader, namespace, digest string) ([]*unstructured.Unstructured, error) {
	key := "manifests/" + namespace + "/" + digest
	k.mu.Lock()
	if e, ok := k.entries[key]; ok {
		k.lru.MoveToFront(e)
		objs := e.Value.(*cacheEntry).objs
		k.mu.Unlock()
		return objs, nil
	}
	k.mu.Unlock()
	objs, err := LoadManifests(ctx, c, namespace, digest)
	if err != nil {
		return nil, err
	}
	k.add(key, objs)
	return objs, nil
}

// add keeps objs under key, dropping the least recently used entries beyond Size.
func (k *Cache) add(key string, objs []*unstructured.Unstructured) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.entries == nil {
		k.entries = map[string]*list.Element{}
	}
	if _, ok := k.entries[key]; ok {
		return
	}
	k.entries[key] = k.lru.PushFront(&cacheEntry{key: key, objs: objs})
	size := k.Size
	if size <= 0 {
		size = 32
	}
	for k.lru.Len() > size {
		old := k.lru.Back()
		k.lru.Remove(old)
		delete(k.entries, old.Value.(*cacheEntry).key)
	}
}
