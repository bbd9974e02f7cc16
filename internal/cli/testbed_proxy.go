package cli

import (
	"fmt"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// defaultResetEvery is the reset interval of `testbed up --member-faults` alone.
const defaultResetEvery = 10 * time.Second

// faultFlags are the flags that say which faults the member proxy injects: `testbed up` binds
// them with the prefix "member-", `testbed proxy` (which testbed.ProxyConfig.Args feeds)
// without.
type faultFlags struct {
	resetEvery, refuseFor, retryAfter time.Duration
	fraction                          float64
	codes                             []int
	mutatingOnly, httpProxy           bool
	paths                             []string
}

func (f *faultFlags) bind(fs *pflag.FlagSet, prefix string) {
	fs.DurationVar(&f.resetEvery, prefix+"reset-every", 0, "reset every open connection to each member on this interval (TCP RST to both sides), as a load balancer's failover does (e.g. 10s; 0: never)")
	fs.DurationVar(&f.refuseFor, prefix+"refuse-for", testbed.DefaultRefuseFor, "after each reset, refuse new connections to the member this long (accepted and reset at once; 0: none)")
	fs.Float64Var(&f.fraction, prefix+"http-faults", 0, "fraction of requests (0 to 1) the proxy answers itself with a 429 or 5xx Status, without forwarding them")
	fs.IntSliceVar(&f.codes, prefix+"http-fault-codes", slices.Clone(testbed.DefaultHTTPFaultCodes), "status codes of the injected answers, one chosen at random each time (429 or 500-599)")
	fs.DurationVar(&f.retryAfter, prefix+"http-retry-after", time.Second, "Retry-After of an injected 429")
	fs.BoolVar(&f.mutatingOnly, prefix+"http-faults-mutating-only", false, "inject HTTP faults into POST, PUT, PATCH and DELETE requests only")
	fs.StringArrayVar(&f.paths, prefix+"http-fault-path", nil, "inject HTTP faults only into requests whose path starts with this prefix (repeatable, e.g. /apis/apps/)")
}

// faults returns the testbed faults the flags say.
func (f *faultFlags) faults() (testbed.Faults, error) {
	if f.refuseFor < 0 {
		return testbed.Faults{}, fmt.Errorf("the refusal after a reset must be 0 or more, got %s", f.refuseFor)
	}
	out := testbed.Faults{
		ResetEvery: f.resetEvery,
		RefuseFor:  f.refuseFor,
		HTTP: testbed.HTTPFaults{
			Fraction: f.fraction, Codes: f.codes, RetryAfter: f.retryAfter,
			MutatingOnly: f.mutatingOnly, PathPrefixes: f.paths,
		},
		HTTPProxy: f.httpProxy,
	}
	if out.RefuseFor == 0 {
		out.RefuseFor = -1 // none (0 in testbed.Faults means the default)
	}
	return out, out.Validate()
}

// any says whether the flags ask for any fault.
func (f *faultFlags) any() bool { return f.resetEvery > 0 || f.fraction > 0 || f.httpProxy }

// proxyFlags are the flags of `testbed proxy`, which testbed.ProxyConfig.Args writes.
type proxyFlags struct {
	latency                   time.Duration
	routes                    []string
	certFile, keyFile, caFile string
	faults                    faultFlags
}

func (p *proxyFlags) bind(fs *pflag.FlagSet) {
	fs.DurationVar(&p.latency, "latency", 0, "delay of every chunk of bytes in each direction")
	fs.StringArrayVar(&p.routes, "route", nil, "LISTEN=TARGET address pair (repeatable)")
	fs.StringVar(&p.certFile, "tls-cert-file", "", "PEM serving certificate of the HTTP proxy (HTTP faults)")
	fs.StringVar(&p.keyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fs.StringVar(&p.caFile, "ca-file", "", "PEM CA of the members' API servers (HTTP faults)")
	p.faults.bind(fs, "")
	fs.BoolVar(&p.faults.httpProxy, "http-proxy", false, "serve the members through the HTTP proxy even without HTTP faults")
}

// config is the proxy configuration the flags say.
func (p *proxyFlags) config() (testbed.ProxyConfig, error) {
	if p.latency < 0 {
		return testbed.ProxyConfig{}, fmt.Errorf("--latency must be 0 or more, got %s", p.latency)
	}
	if len(p.routes) == 0 {
		return testbed.ProxyConfig{}, fmt.Errorf("at least one --route LISTEN=TARGET is required")
	}
	faults, err := p.faults.faults()
	if err != nil {
		return testbed.ProxyConfig{}, err
	}
	cfg := testbed.ProxyConfig{Latency: p.latency, Faults: faults, CertFile: p.certFile, KeyFile: p.keyFile, CAFile: p.caFile}
	for _, s := range p.routes {
		r, err := testbed.ParseProxyRoute(s)
		if err != nil {
			return testbed.ProxyConfig{}, err
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	return cfg, nil
}

// newTestbedProxyCommand is the hidden `rewind testbed proxy`: the member proxy (latency and
// faults) that `testbed up --member-latency` or `--member-faults` starts in its own process,
// so that it keeps running after `up` returns; `testbed down` stops it by its process-group
// id like the other processes.
func newTestbedProxyCommand() *cobra.Command {
	var pf proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy [--latency DURATION] [fault flags] --route LISTEN=TARGET...",
		Short: "Forward connections to members with a delay and faults (started by 'testbed up')",
		Example: `  # started by 'rewind testbed up --member-latency 25ms'; by hand, for one member:
  rewind testbed proxy --latency 25ms --route 127.0.0.1:16443=127.0.0.1:6443`,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := pf.config()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return testbed.RunProxy(ctx, cfg, cmd.ErrOrStderr())
		},
	}
	pf.bind(cmd.Flags())
	return cmd
}
