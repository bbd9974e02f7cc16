package member

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Cache keeps one Cluster per member, keyed by a hash of its credentials: a member whose
// kubeconfig Secret changes (a new server, token or certificate) gets new clients on its next
// use, and one whose credentials stay the same keeps its connections and discovery.
type Cache struct {
	// Hub reads MemberClusters and their kubeconfig Secrets (uncached for Secrets).
	Hub client.Reader
	// Local, when set, is the one cluster this process reaches: a pull member's agent, whose
	// member is the API server it runs in. Get returns it for its name without reading the
	// hub (the agent holds no kubeconfig there), and refuses any other name.
	Local *Cluster

	mu       sync.Mutex
	clusters map[string]cacheEntry
	// forgets counts each member's Forget calls: a Cluster built while one ran (after its
	// MemberCluster or Secret was read) is returned but not kept, as it may be of a member
	// just deleted.
	forgets map[string]uint64
}

type cacheEntry struct {
	key     string
	cluster *Cluster
}

// Get returns the Cluster of the MemberCluster name. A missing or unusable kubeconfig Secret
// is a *SecretError.
func (c *Cache) Get(ctx context.Context, name string) (*Cluster, error) {
	if c.Local != nil {
		if name != c.Local.Name {
			return nil, &SecretError{Reason: v1alpha1.ReasonPullMode, Message: fmt.Sprintf(
				"this agent runs the work of member %s only, not of member %s", c.Local.Name, name)}
		}
		return c.Local, nil
	}
	forgets := c.forgetsOf(name)
	mc := &v1alpha1.MemberCluster{}
	if err := c.Hub.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		return nil, fmt.Errorf("MemberCluster %s: %w", name, err)
	}
	return c.forAt(ctx, mc, forgets)
}

// For returns the Cluster of mc.
func (c *Cache) For(ctx context.Context, mc *v1alpha1.MemberCluster) (*Cluster, error) {
	return c.forAt(ctx, mc, c.forgetsOf(mc.Name))
}

func (c *Cache) forgetsOf(name string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgets[name]
}

// forAt is For, keeping the Cluster only if the member was not forgotten since its count of
// Forget calls was forgets.
func (c *Cache) forAt(ctx context.Context, mc *v1alpha1.MemberCluster, forgets uint64) (*Cluster, error) {
	cfg, err := ConfigFor(ctx, c.Hub, mc)
	if err != nil {
		// Credentials that are gone or unusable keep no clients (nor their connections); a
		// failed read of the hub does not drop them.
		var se *SecretError
		if errors.As(err, &se) {
			c.Forget(mc.Name)
		}
		return nil, err
	}
	key := credentialsKey(cfg)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.clusters[mc.Name]; ok && e.key == key {
		return e.cluster, nil
	}
	cl, err := New(mc.Name, cfg)
	if err != nil {
		return nil, err
	}
	if c.forgets[mc.Name] != forgets {
		// A member was forgotten (deleted, or its credentials dropped) while its Secret was
		// read: keeping this Cluster could hold a gone member's clients forever.
		return cl, nil
	}
	if c.clusters == nil {
		c.clusters = map[string]cacheEntry{}
	}
	c.clusters[mc.Name] = cacheEntry{key: key, cluster: cl}
	return cl, nil
}

// Len is how many members have a Cluster held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.clusters)
}

// Forget drops the Cluster of a member (it was deleted, or its credentials are gone): its
// clients, discovery and connections are released once no step uses them.
func (c *Cache) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.clusters, name)
	if c.forgets == nil {
		c.forgets = map[string]uint64{}
	}
	c.forgets[name]++
}
