// Package dashboard serves rewind's read-only web dashboard: the Rollouts of a hub namespace,
// each one's grid of waves × clusters updated live (server-sent events fed by watches on the
// hub), its revision history, the member clusters and the snapshots. Pages are html/template
// with embedded assets: no build toolchain at run time and no external network access.
// Actions (approve, pause, resume, rollback, retry) are served only when Options.Actions is
// set, and they run the CLI's own code.
package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// Actions are the changes a person may ask for from the dashboard; the CLI implements them
// with the code its own commands run. Each returns what it did, in a sentence.
type Actions interface {
	Approve(ctx context.Context, ns, rollout string) (string, error)
	Pause(ctx context.Context, ns, rollout string, paused bool) (string, error)
	Rollback(ctx context.Context, ns, rollout, reason string) (string, error)
	Retry(ctx context.Context, ns, rollout string) (string, error)
}

// MemberCheck is what a live check of one member found (its own installed-version record and
// the live objects, compared with a release).
type MemberCheck struct {
	Cluster, Status, InstalledRelease, ExpectedRelease string
	Reasons                                            []string
}

// Checker checks every member against a release of an operator, reading each member's own
// record and live objects (never the hub's mirror of them).
type Checker func(ctx context.Context, operator, release string) ([]MemberCheck, error)

// Options configure a Server.
type Options struct {
	// Namespace is the hub namespace of the Rollouts shown.
	Namespace string
	// Actions, when set, enables the action buttons and their endpoints. Nil: read-only.
	Actions Actions
	// UserActions, with Auth, enables the actions and runs each with the signed-in user's own
	// credentials (cfg is the hub's with the user's bearer token): the hub's RBAC and audit
	// log apply to the user, and the server's identity needs no right to change Rollouts.
	UserActions func(cfg *rest.Config) (Actions, error)
	// Check, when set, lets the members page check each member's live record and drift.
	Check Checker
	// Live, when set, captures now, from the member a snapshot was taken on and the same way,
	// what the snapshot holds (hdr is its header), so that the snapshot page can show its diff
	// against the live cluster.
	Live func(ctx context.Context, snap *v1alpha1.Snapshot, hdr snapshot.Header) ([]snapshot.Entry, error)
	// HubProbe is how often the hub's reachability is probed (default 1s).
	HubProbe time.Duration
	// Auth, when set, authenticates and authorises every request through the hub (the
	// controller serves the dashboard so). Nil: no login, for `rewind dashboard` on 127.0.0.1,
	// which reads the hub with the user's own kubeconfig.
	Auth *Auth
}

// Server is the dashboard of one hub namespace.
type Server struct {
	opts   Options
	cfg    *rest.Config
	cache  cache.Cache
	reader client.Client
	pages  *pages
	broker *broker
	// token guards the action endpoints against requests from other pages (CSRF).
	token string

	// auth keeps the hub's reviews of tokens for a moment (Options.Auth).
	auth authCache

	mu      sync.Mutex
	hubErr  error
	hubDown time.Time
}

// New returns a dashboard Server of the hub cfg points to; Start runs its watches.
func New(cfg *rest.Config, opts Options) (*Server, error) {
	if opts.Namespace == "" {
		return nil, errors.New("dashboard: a namespace is required")
	}
	if opts.HubProbe == 0 {
		opts.HubProbe = time.Second
	}
	if a := opts.Auth; a != nil {
		if a.Client == nil {
			return nil, errors.New("dashboard: Auth needs a client of the hub for its reviews")
		}
		cp := *a
		if cp.Tries <= 0 {
			cp.Tries = 5
		}
		if cp.TTL <= 0 {
			cp.TTL = 10 * time.Second
		}
		opts.Auth = &cp
	}
	if opts.UserActions != nil && opts.Auth == nil {
		return nil, errors.New("dashboard: UserActions needs Auth (whose credentials would they run with?)")
	}
	sch := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(sch); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(sch); err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS < 50 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	c, err := cache.New(cfg, cache.Options{Scheme: sch, DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}}})
	if err != nil {
		return nil, fmt.Errorf("dashboard: watching the hub: %w", err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: sch})
	if err != nil {
		return nil, err
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, cfg: cfg, cache: c, reader: direct, pages: p, token: hex.EncodeToString(tok)}
	s.broker = newBroker()
	return s, nil
}

// Start watches the hub's Rollouts, RolloutTargets, MemberClusters and Snapshots and probes
// the hub until ctx ends. It returns once the watches have their first list, or an error after 30s.
func (s *Server) Start(ctx context.Context) error {
	for _, obj := range []client.Object{&v1alpha1.Rollout{}, &v1alpha1.RolloutTarget{}, &v1alpha1.MemberCluster{}, &v1alpha1.Snapshot{}} {
		inf, err := s.cache.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("dashboard: watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(s.broker.handlerFor(obj)); err != nil {
			return err
		}
	}
	go func() { _ = s.cache.Start(ctx) }()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !s.cache.WaitForCacheSync(sctx) {
		return fmt.Errorf("dashboard: the hub's Rollouts, targets, members and snapshots could not be listed within 30s (is the hub up, and does it serve rewind.dev/v1alpha1?)")
	}
	cs, err := kubernetes.NewForConfig(s.cfg)
	if err != nil {
		return err
	}
	go s.probeHub(ctx, cs)
	return nil
}

// probeHub asks the hub's /readyz every HubProbe and tells the open pages when the answer
// changes. The watches resume by themselves once the hub is back; every open page is then
// sent its whole state again, so nothing missed meanwhile stays on screen.
func (s *Server) probeHub(ctx context.Context, cs kubernetes.Interface) {
	t := time.NewTicker(s.opts.HubProbe)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		was := s.hubErr
		s.hubErr = err
		if err != nil && was == nil {
			s.hubDown = time.Now()
		}
		s.mu.Unlock()
		if (err == nil) != (was == nil) {
			s.broker.hubChanged()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// hubState says whether the hub answers, and since when it does not.
func (s *Server) hubState() (ok bool, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hubErr == nil {
		return true, ""
	}
	return false, fmt.Sprintf("The hub does not answer since %s: what you see is the last state received, and it will update once the hub is back.",
		s.hubDown.UTC().Format("15:04:05 UTC"))
}

// Handler serves the pages, the event streams, the static assets and, when enabled, the
// actions.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.FileServerFS(staticFS()))
	mux.HandleFunc("GET /{$}", s.listPage)
	mux.HandleFunc("GET /rollouts/{name}", s.rolloutPage)
	mux.HandleFunc("GET /members", s.membersPage)
	mux.HandleFunc("GET /snapshots/{name}", s.snapshotPage)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("POST /rollouts/{name}/actions/{action}", s.action)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	if s.opts.Auth != nil {
		return securityHeaders(s.requireAuth(mux))
	}
	return securityHeaders(mux)
}

// securityHeaders: no framing, no external sources (the page needs none), no sniffing.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
