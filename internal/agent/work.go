package agent

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// bearer authenticates every request with the agent's current hub credential: a renewed
// credential takes effect on the next request, without new clients or caches.
type bearer struct {
	next  http.RoundTripper
	token *atomic.Pointer[string]
}

var _ utilnet.RoundTripperWrapper = (*bearer)(nil)

func (b *bearer) WrappedRoundTripper() http.RoundTripper { return b.next }

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = utilnet.CloneRequest(req)
	req.Header.Set("Authorization", "Bearer "+*b.token.Load())
	return b.next.RoundTrip(req)
}

// workConfig is the hub with the agent's credential (whichever is current), its requests
// riding out faults as a member's do.
func (a *agent) workConfig() *rest.Config {
	cfg := rest.AnonymousClientConfig(a.hub)
	cfg.QPS, cfg.Burst = 50, 100
	cfg = member.WithRetries(cfg, "hub")
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &bearer{next: rt, token: &a.token} })
	return cfg
}

// work runs this member's targets until ctx ends: the hub's RolloutTarget reconciler (the
// same step code as the hub runs for a push member) on the copies the hub writes in the
// member's hub namespace, against the member's own API server. Its cache holds that one
// namespace; what the steps read uncached (releases, Secrets, snapshots) is there too.
func (a *agent) work(ctx context.Context) error {
	ns := v1alpha1.MemberNamespace(a.o.Cluster)
	local, err := member.New(a.o.Cluster, a.o.Member)
	if err != nil {
		return err
	}
	skip := true
	mgr, err := ctrl.NewManager(a.workConfig(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr(a.o.MetricsAddr)},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Client: client.Options{Cache: &client.CacheOptions{
			// Its own MemberCluster is read by name (the agent may not list MemberClusters);
			// Secrets are read where needed, never cached.
			DisableFor: []client.Object{&v1alpha1.MemberCluster{}, &corev1.Secret{}},
		}},
		Controller: config.Controller{SkipNameValidation: &skip, CacheSyncTimeout: a.o.CacheSyncTimeout},
		Logger:     ctrl.LoggerFrom(ctx),
	})
	if err != nil {
		return fmt.Errorf("the agent's controller: %w", err)
	}
	r := &target.Reconciler{
		Client: mgr.GetClient(), Hub: mgr.GetAPIReader(), APIReader: mgr.GetAPIReader(),
		Members: &member.Cache{Local: local}, Releases: &release.Cache{},
		GatePoll: a.o.GatePoll, Workers: a.o.Workers, Local: a.o.Cluster, KeyNamespace: ns,
		Restores: target.NewMemoryBudget(a.o.RestoreMemory),
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// workOn runs the work until ctx ends. The work stops when its cache does not sync within
// CacheSyncTimeout (controller-runtime's default: 2 minutes), as it does when the hub goes away
// right after the agent's claim and stays away that long. That error has no type of its own:
// the agent then sends the hub the work's own request (a list of its targets) and, when that
// meets a fault, waits for the hub and starts the work again. Before, the agent stopped. A stop
// of the work while the hub answers ends the agent, as before.
func (a *agent) workOn(ctx context.Context) error {
	for {
		err := a.work(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		c, cerr := client.New(a.workConfig(), client.Options{Scheme: scheme})
		if cerr != nil {
			return err
		}
		list := func() error {
			return c.List(ctx, &v1alpha1.RolloutTargetList{}, client.InNamespace(v1alpha1.MemberNamespace(a.o.Cluster)), client.Limit(1))
		}
		if perr := list(); !fault.IsTransient(perr) {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("the agent's work stopped while the hub did not answer; it starts again once the hub answers", "error", err.Error())
		if perr := fault.RetryLogged(ctx, 0, "listing the member's targets", list); perr != nil {
			return err
		}
	}
}

func metricsAddr(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
