package member

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Timeouts and limits of member clients, by purpose.
const (
	// RequestTimeout bounds one ordinary request (GET, apply, update, a LIST page read whole).
	RequestTimeout = 20 * time.Second
	// ListTimeout bounds one streamed page of a paged LIST (a capture reads pages of up to 500
	// objects as they arrive, which over a slow link takes longer than one request).
	ListTimeout = 5 * time.Minute
	// QPS and Burst are the client-side rate limit of ordinary requests to one member, shared
	// by every client of the member.
	QPS   = 100
	Burst = 200
)

// Cluster is the one way rewind talks to a member cluster (modelled on cluster-api's cluster
// accessor): one HTTP transport and, on top of it, a controller-runtime client, a dynamic
// client, a metadata client and one discovery-backed REST mapper, all sharing one rate
// limiter; plus clients for two purposes with their own limits: Bulk (restore's bulk writes,
// no client-side rate limit: the member's API Priority and Fairness protects it) and Lists
// (streamed, paged LISTs with a long timeout). A Cluster is safe for concurrent use.
type Cluster struct {
	// Name is the MemberCluster name ("" for a cluster reached outside the hub's registry).
	Name string
	// Client is a controller-runtime client (typed built-in kinds and unstructured objects).
	Client client.Client
	// Dynamic is a dynamic client.
	Dynamic dynamic.Interface
	// Metadata is a metadata-only client.
	Metadata metadata.Interface
	// Bulk is a dynamic client without a client-side rate limit, for bulk writes.
	Bulk dynamic.Interface
	// Lists is a JSON REST client (no group version) with ListTimeout, for streamed LISTs.
	Lists rest.Interface

	cfg       *rest.Config
	live      discovery.DiscoveryInterface
	discovery discovery.CachedDiscoveryInterface
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	// resources memoizes Resource per kind until the mapper is reset: a restore maps every
	// entry, and the deferred mapper's lookup is costly.
	resources sync.Map // schema.GroupVersionKind -> Resource
}

// New builds the clients of a member from its client configuration.
func New(name string, cfg *rest.Config) (*Cluster, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = RequestTimeout
	}
	if cfg.RateLimiter == nil {
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps, burst = QPS, Burst
		}
		if qps > 0 {
			cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst)
		}
	}
	// Every request rides out a blip on its own (retryTransport), under the client-side rate
	// limit and client-go's own retries of Retry-After answers and of GETs.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &retryTransport{next: rt, cluster: name} })
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	c := &Cluster{Name: name, cfg: cfg, live: dc, discovery: cached, mapper: mapper}
	if c.Client, err = client.New(cfg, client.Options{HTTPClient: hc, Scheme: Scheme, Mapper: mapper}); err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	if c.Dynamic, err = dynamic.NewForConfigAndClient(cfg, hc); err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	if c.Metadata, err = metadata.NewForConfigAndClient(cfg, hc); err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	// Bulk writes and long LISTs share the transport (its connections), not the limits.
	bulk := rest.CopyConfig(cfg)
	bulk.RateLimiter, bulk.QPS = nil, -1 // client-go: no client-side rate limiter
	if c.Bulk, err = dynamic.NewForConfigAndClient(bulk, hc); err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	lists := dynamic.ConfigFor(bulk)
	lists.GroupVersion = nil
	lists.ContentType, lists.AcceptContentTypes = "application/json", "application/json"
	if c.Lists, err = rest.UnversionedRESTClientForConfigAndClient(lists, &http.Client{Transport: hc.Transport, Timeout: ListTimeout}); err != nil {
		return nil, fmt.Errorf("member %s: %w", name, err)
	}
	return c, nil
}

// Host is the member's API server URL.
func (c *Cluster) Host() string { return c.cfg.Host }

// Config returns a copy of the member's client configuration, for components that build
// their own clients (a controller-runtime manager run against the member).
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.cfg) }

// Discovery is the member's cached discovery client.
func (c *Cluster) Discovery() discovery.CachedDiscoveryInterface { return c.discovery }

// LiveDiscovery is an uncached discovery client, for waiting on what the API server
// publishes (a storage version switching).
func (c *Cluster) LiveDiscovery() discovery.DiscoveryInterface { return c.live }

// Mapper is the member's discovery-backed REST mapper.
func (c *Cluster) Mapper() meta.RESTMapper { return c.mapper }

// ResetMapper forgets what discovery said, so that kinds served since (a CRD just applied, a
// version added or removed) are found. Resource resets it by itself when a kind is missing.
func (c *Cluster) ResetMapper() {
	c.resources.Clear()
	c.mapper.Reset()
}

// Resource is what discovery says of one kind on a member.
type Resource struct {
	// GVR is the resource at the kind's version.
	GVR schema.GroupVersionResource
	// Namespaced says whether objects of the kind live in namespaces.
	Namespaced bool
	// Categories are the resource's discovery categories (e.g. "all").
	Categories []string
	// Status says whether the resource has a status subresource.
	Status bool
}

// NotServedError says a member does not serve a kind.
type NotServedError struct {
	GVK schema.GroupVersionKind
	Err error
}

func (e *NotServedError) Error() string {
	return fmt.Sprintf("the cluster does not serve %s (API %s not found)", kindString(e.GVK), e.GVK.GroupVersion())
}

func (e *NotServedError) Unwrap() error { return e.Err }

// IsNotServed says whether err is (or wraps) a NotServedError.
func IsNotServed(err error) bool {
	var ns *NotServedError
	return errors.As(err, &ns)
}

func kindString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + " " + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + " " + gvk.Kind
}

// Resource maps a kind to its resource through the member's discovery. A kind the cached
// discovery does not know is looked up again after a reset (its CRD may have been applied
// since); one the member really does not serve is a *NotServedError.
func (c *Cluster) Resource(gvk schema.GroupVersionKind) (Resource, error) {
	if r, ok := c.resources.Load(gvk); ok {
		res := r.(Resource)
		res.Categories = slices.Clone(res.Categories)
		return res, nil
	}
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) {
		c.ResetMapper()
		m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return Resource{}, &NotServedError{GVK: gvk, Err: err}
		}
		return Resource{}, fmt.Errorf("discovering %s: %w", kindString(gvk), err)
	}
	res := Resource{GVR: m.Resource, Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	if list, err := c.discovery.ServerResourcesForGroupVersion(gvk.GroupVersion().String()); err == nil {
		for _, r := range list.APIResources {
			switch r.Name {
			case m.Resource.Resource:
				res.Categories = slices.Clone(r.Categories)
			case m.Resource.Resource + "/status":
				res.Status = true
			}
		}
		c.resources.Store(gvk, res)
	}
	return res, nil
}

// ResourceClient returns the dynamic client for obj's kind, in obj's namespace when the kind
// is namespaced.
func (c *Cluster) ResourceClient(dyn dynamic.Interface, obj *unstructured.Unstructured) (dynamic.ResourceInterface, Resource, error) {
	res, err := c.Resource(obj.GroupVersionKind())
	if err != nil {
		return nil, res, err
	}
	if res.Namespaced {
		return dyn.Resource(res.GVR).Namespace(obj.GetNamespace()), res, nil
	}
	return dyn.Resource(res.GVR), res, nil
}

// Scoped returns copies of objs whose namespaces follow each kind's scope on the member:
// namespaced objects without one go to defaultNS, cluster-scoped objects lose any namespace a
// renderer without a cluster gave them. Kinds defined by a CustomResourceDefinition among
// objs take the CRD's scope (the CRD may not be applied yet). A kind the member does not
// serve and objs do not define is an error naming every such kind.
func (c *Cluster) Scoped(objs []*unstructured.Unstructured, defaultNS string) ([]*unstructured.Unstructured, error) {
	defined := DefinedKinds(objs)
	out := make([]*unstructured.Unstructured, 0, len(objs))
	var missing []string
	for _, o := range objs {
		u := o.DeepCopy()
		gvk := u.GroupVersionKind()
		namespaced, ok := defined[gvk.GroupKind()]
		if !ok {
			res, err := c.Resource(gvk)
			if IsNotServed(err) {
				if k := kindString(gvk); !slices.Contains(missing, k) {
					missing = append(missing, k)
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			namespaced = res.Namespaced
		}
		switch {
		case !namespaced:
			u.SetNamespace("")
		case u.GetNamespace() == "":
			u.SetNamespace(defaultNS)
		}
		out = append(out, u)
	}
	if len(missing) > 0 {
		return nil, &KindsNotServedError{Kinds: missing}
	}
	return out, nil
}

// KindsNotServedError lists the kinds of a set of objects that a member does not serve.
type KindsNotServedError struct {
	Kinds []string
}

func (e *KindsNotServedError) Error() string {
	parts := make([]string, 0, len(e.Kinds))
	for _, k := range e.Kinds {
		api, _, _ := strings.Cut(k, " ")
		parts = append(parts, fmt.Sprintf("%s (API %s not found)", k, api))
	}
	return fmt.Sprintf("the cluster does not serve %s: install the CRDs that define them (or the API service that serves them) first, or leave these objects out of the release", strings.Join(parts, ", "))
}

// DefinedKinds returns the kinds the CustomResourceDefinitions among objs define, with
// whether each is namespaced.
func DefinedKinds(objs []*unstructured.Unstructured) map[schema.GroupKind]bool {
	out := map[schema.GroupKind]bool{}
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
		out[schema.GroupKind{Group: group, Kind: kind}] = scope != "Cluster"
	}
	return out
}

// ServerVersion returns the member's Kubernetes version.
func (c *Cluster) ServerVersion(ctx context.Context) (string, error) {
	v, err := c.discovery.ServerVersion()
	if err != nil {
		return "", fmt.Errorf("reading the server version: %w", err)
	}
	return v.GitVersion, nil
}

// ClusterID returns the UID of the member's kube-system namespace, which identifies it.
func (c *Cluster) ClusterID(ctx context.Context) (string, error) {
	ns, err := c.Metadata.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading namespace kube-system for the cluster ID: %w", err)
	}
	return string(ns.UID), nil
}

// credentialsKey hashes what identifies a member's connection: its server and credentials.
func credentialsKey(cfg *rest.Config) string {
	sum := sha256.New()
	for _, part := range [][]byte{
		[]byte(cfg.Host), []byte(cfg.APIPath), []byte(cfg.BearerToken), []byte(cfg.BearerTokenFile),
		[]byte(cfg.Username), []byte(cfg.Password), []byte(cfg.TLSClientConfig.ServerName),
		cfg.CAData, []byte(cfg.CAFile), cfg.CertData, []byte(cfg.CertFile), cfg.KeyData, []byte(cfg.KeyFile),
		[]byte(cfg.Impersonate.UserName),
	} {
		sum.Write(part)
		sum.Write([]byte{0})
	}
	if cfg.Insecure {
		sum.Write([]byte("insecure"))
	}
	if cfg.ExecProvider != nil {
		sum.Write([]byte(cfg.ExecProvider.Command + strings.Join(cfg.ExecProvider.Args, "\x00")))
	}
	return hex.EncodeToString(sum.Sum(nil))
}
