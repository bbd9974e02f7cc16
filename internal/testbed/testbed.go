// Package testbed runs a real local multi-cluster Kubernetes control plane: one etcd, a hub
// kube-apiserver and N member kube-apiservers isolated by etcd prefix, and optionally, per
// cluster, kube-controller-manager, kube-scheduler and kwok with several fake Nodes that carry
// the labels of real ones (os, arch, zone, region, instance type), so that workloads
// (Deployments, StatefulSets, charts with node selectors, anti-affinity and topology spread)
// become available and garbage collection is real. Members can be made to look remote: their
// API servers are then reached through a proxy that delays every byte. The same proxy injects
// faults (Options.MemberFaults): it resets every open connection on an interval and refuses
// new ones for a moment, and answers a fraction of requests with 429 or 5xx; a member's API
// server can also be restarted (Cluster.RestartAPIServer).
//
// Every process is started in its own process group and recorded in a state file, so Stop (or
// `rewind testbed down` from another process) stops exactly what was started, by id.
package testbed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rewind-dev/rewind/internal/testbed/freeport"
)

// HubName is the name of the hub cluster.
const HubName = "hub"

// StateFileName is the name of the state file in the state directory.
const StateFileName = "state.json"

// Options says what to start.
type Options struct {
	// Members is the number of member clusters (named member1..memberN).
	Members int
	// Workloads runs kube-controller-manager, kube-scheduler and kwok with Nodes fake Nodes in
	// every cluster, so Deployments become Available and the garbage collector runs.
	Workloads bool
	// Nodes is the number of fake nodes in each cluster with workloads; 0 means DefaultNodes
	// (3). Node i is named kwok-node-<i> and sits in zone a, b or c (i mod 3) of its
	// cluster's region.
	Nodes int
	// MemberLatency, when positive, makes the members look remote: each member's API server is
	// reached (Server, Kubeconfig, RESTConfig) through a TCP proxy that delays every chunk of
	// bytes by MemberLatency in each direction, so a request takes at least one round trip of
	// twice that. The member's own controllers, scheduler and kwok talk to it directly.
	MemberLatency time.Duration
	// MemberFaults, when set, puts the member proxy in front of every member's API server (with
	// MemberLatency if set) and injects these faults; each member's Cluster.Faults controls
	// them at run time, from the start (a zero Faults injects nothing until a test says so).
	// The member's own controllers, scheduler and kwok talk to it directly.
	MemberFaults *Faults
	// Profiling serves Go's /debug/pprof on every API server (to admin users), for benchmarks
	// that profile the simulated clusters.
	Profiling bool
	// ProxyCommand runs the member proxy (latency and faults) of a Detached testbed in its own
	// process, so that it outlives Start's caller: the program and its leading arguments, to
	// which ProxyConfig.Args are appended (the CLI passes its own executable and "testbed",
	// "proxy"). An attached testbed runs the proxy in process and ignores it.
	ProxyCommand []string
	// HubWorkloads runs them in the hub too (default: members only).
	HubWorkloads bool
	// HubPriorityAndFairness runs the hub's API server as a cluster's runs by default: API
	// Priority and Fairness on, with the default concurrency limits (400 requests, 200 of them
	// mutating), so requests queue by FlowSchema and priority level when the server is busy.
	// Off (tests), every API server serves without fairness and up to 1,000/500 requests at
	// once: a queue would only slow the tests.
	HubPriorityAndFairness bool
	// BinDir holds the binaries; empty means FindBinaries().
	BinDir string
	// StateDir receives kubeconfigs, logs, keys and the state file; empty means a new
	// temporary folder that Stop removes.
	StateDir string
	// Detached leaves the processes running when the calling process exits (for
	// `rewind testbed up`); otherwise they are killed with it.
	Detached bool
	// HandleSignals makes Start install a SIGINT/SIGTERM handler that stops the testbed and
	// exits the process (status 130 or 143).
	HandleSignals bool
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// Cluster is one API server of the testbed.
type Cluster struct {
	// Name is "hub" or "memberN".
	Name string `json:"name"`
	// Server is the API server URL.
	Server string `json:"server"`
	// Kubeconfig is the path of the kubeconfig file for this cluster (admin user).
	Kubeconfig string `json:"kubeconfig"`
	// Workloads says whether controllers, a scheduler and kwok run for this cluster.
	Workloads bool `json:"workloads"`
	// DirectServer is the API server's own URL when Server is the member proxy in front of it.
	DirectServer string `json:"directServer,omitempty"`

	tb    *Testbed
	index int // 0 for the hub, i for memberi
	port  int
	// proxyPort is the port of the member proxy in front of the API server, or 0.
	proxyPort int
	// faults controls the faults of the in-process member proxy, if any.
	faults *FaultInjector
	// lifecycle serializes stopping, starting and restarting the API server.
	lifecycle sync.Mutex
	// localKubeconfig is the kubeconfig the cluster's own components use (direct).
	localKubeconfig string
	apiArgs         []string
	mu              sync.Mutex
	api             *process
	helpers         []*process
	restCfg         *rest.Config
}

// State is the content of the state file.
type State struct {
	StateDir  string          `json:"stateDir"`
	EtcdURL   string          `json:"etcdURL"`
	Clusters  []*Cluster      `json:"clusters"`
	Processes []ProcessRecord `json:"processes"`
	Started   time.Time       `json:"started"`
}

// Testbed is a running set of clusters.
type Testbed struct {
	// Hub is the hub cluster.
	Hub *Cluster
	// Members are the member clusters, member1 first.
	Members []*Cluster
	// StateDir holds kubeconfigs, logs and the state file.
	StateDir string
	// StartupTime is how long Start took.
	StartupTime time.Duration

	opts     Options
	bins     Binaries
	pki      *pki
	ownsDir  bool
	etcd     *process
	etcdURL  string
	proxy    *memberProxy // the in-process member proxy, if any
	proxyLog io.WriteCloser
	mu       sync.Mutex
	procs    []*process
	// stopping is set when Stop begins: a process started after that (an API server being
	// restarted) is stopped at once instead of tracked.
	stopping bool
	// ready is set once every cluster has started; before that the state file lists only the
	// processes (clusters are still being filled in by their own goroutines).
	ready    bool
	stopOnce sync.Once
	stopSig  chan os.Signal
	stopped  chan struct{}
}

// Clusters returns the hub followed by the members.
func (t *Testbed) Clusters() []*Cluster { return append([]*Cluster{t.Hub}, t.Members...) }

// Start starts a testbed. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *Testbed, err error) {
	begin := time.Now()
	if opts.Members < 0 {
		return nil, fmt.Errorf("testbed: members must be >= 0, got %d", opts.Members)
	}
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("testbed: nodes must be >= 0, got %d", opts.Nodes)
	}
	if opts.MemberLatency < 0 {
		return nil, fmt.Errorf("testbed: member latency must be >= 0, got %s", opts.MemberLatency)
	}
	if opts.MemberFaults != nil {
		if err := opts.MemberFaults.Validate(); err != nil {
			return nil, fmt.Errorf("testbed: member %w", err)
		}
	}
	proxied := opts.MemberLatency > 0 || opts.MemberFaults != nil
	if proxied && opts.Detached && len(opts.ProxyCommand) == 0 {
		return nil, errors.New("testbed: a detached testbed with member latency or faults needs Options.ProxyCommand to run its proxy")
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	t := &Testbed{opts: opts, stopped: make(chan struct{})}
	if opts.BinDir == "" {
		if t.bins, err = FindBinaries(); err != nil {
			return nil, err
		}
	} else if t.bins, err = BinariesIn(opts.BinDir); err != nil {
		return nil, err
	}
	t.StateDir = opts.StateDir
	if t.StateDir == "" {
		if t.StateDir, err = os.MkdirTemp("", "rewind-testbed-"); err != nil {
			return nil, err
		}
		t.ownsDir = true
	} else {
		if _, statErr := os.Stat(filepath.Join(t.StateDir, StateFileName)); statErr == nil {
			if st, readErr := ReadState(t.StateDir); readErr == nil && st.anyAlive() {
				return nil, fmt.Errorf("testbed: %s already holds a running testbed; run `rewind testbed down --state-dir %s` first", t.StateDir, t.StateDir)
			}
		}
		if err = os.MkdirAll(t.StateDir, 0o700); err != nil {
			return nil, err
		}
	}
	if opts.HandleSignals {
		t.stopSig = make(chan os.Signal, 1)
		signal.Notify(t.stopSig, syscall.SIGINT, syscall.SIGTERM)
		go t.onSignal()
	}
	defer func() {
		if err != nil {
			_ = t.Stop()
		}
	}()

	if t.pki, err = newPKI(filepath.Join(t.StateDir, "pki")); err != nil {
		return nil, fmt.Errorf("testbed: keys: %w", err)
	}
	if err = t.startEtcd(ctx); err != nil {
		return nil, err
	}

	names := []string{HubName}
	for i := 1; i <= opts.Members; i++ {
		names = append(names, "member"+strconv.Itoa(i))
	}
	nPorts := len(names)
	if proxied {
		nPorts += opts.Members
	}
	ports, err := freePorts(nPorts)
	if err != nil {
		return nil, err
	}
	for i, n := range names {
		c := &Cluster{Name: n, tb: t, index: i, port: ports[i]}
		c.Workloads = opts.Workloads && (n != HubName || opts.HubWorkloads)
		c.Server = "https://127.0.0.1:" + strconv.Itoa(c.port)
		if proxied && i > 0 {
			c.proxyPort = ports[len(names)+i-1]
			c.DirectServer = c.Server
			c.Server = "https://127.0.0.1:" + strconv.Itoa(c.proxyPort)
		}
		if i == 0 {
			t.Hub = c
		} else {
			t.Members = append(t.Members, c)
		}
	}
	if proxied {
		if err = t.startProxy(ctx); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(opts.Log, "testbed: starting %d API servers (hub + %d members)\n", len(names), opts.Members)
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range t.Clusters() {
		g.Go(func() error {
			if err := c.startAPIServer(gctx); err != nil {
				return err
			}
			if c.Workloads {
				return c.startWorkloads(gctx)
			}
			return nil
		})
	}
	if err = g.Wait(); err != nil {
		return nil, err
	}
	t.StartupTime = time.Since(begin)
	t.mu.Lock()
	t.ready = true
	t.mu.Unlock()
	if err = t.writeState(); err != nil {
		return nil, err
	}
	fmt.Fprintf(opts.Log, "testbed: ready in %s\n", t.StartupTime.Round(100*time.Millisecond))
	return t, nil
}

// interruptHooks are the functions OnInterrupt registered, by id.
var interruptHooks = struct {
	sync.Mutex
	next int
	m    map[int]func()
}{m: map[int]func(){}}

// OnInterrupt has fn run when a testbed's signal handler (Options.HandleSignals) stops it on
// SIGINT or SIGTERM, before the process exits without running its tests' cleanups: for what
// a test started that would outlive the process otherwise, such as a detached testbed (rewind
// testbed up; its processes have no parent-death signal by design). remove unregisters it
// (the test's cleanup, once it stopped that itself).
func OnInterrupt(fn func()) (remove func()) {
	interruptHooks.Lock()
	defer interruptHooks.Unlock()
	id := interruptHooks.next
	interruptHooks.next++
	interruptHooks.m[id] = fn
	return func() {
		interruptHooks.Lock()
		defer interruptHooks.Unlock()
		delete(interruptHooks.m, id)
	}
}

func runInterruptHooks() {
	interruptHooks.Lock()
	fns := make([]func(), 0, len(interruptHooks.m))
	for _, fn := range interruptHooks.m {
		fns = append(fns, fn)
	}
	interruptHooks.Unlock()
	for _, fn := range fns {
		fn()
	}
}

func (t *Testbed) onSignal() {
	select {
	case sig := <-t.stopSig:
		runInterruptHooks()
		_ = t.Stop()
		code := 130
		if sig == syscall.SIGTERM {
			code = 143
		}
		os.Exit(code)
	case <-t.stopped:
	}
}

// track records a process just started, so that Stop stops it. Once Stop has begun it
// stops the process instead and reports false.
func (t *Testbed) track(p *process) bool {
	t.mu.Lock()
	if t.stopping {
		t.mu.Unlock()
		p.stop(10 * time.Second)
		return false
	}
	t.procs = append(t.procs, p)
	t.mu.Unlock()
	_ = t.writeState()
	return true
}

// errStopped is the error of starting a process once the testbed is stopping.
var errStopped = errors.New("testbed: stopped")

func (t *Testbed) untrack(p *process) {
	t.mu.Lock()
	for i, q := range t.procs {
		if q == p {
			t.procs = append(t.procs[:i], t.procs[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	_ = t.writeState()
}

// Processes returns the records of every process the testbed has running.
func (t *Testbed) Processes() []ProcessRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ProcessRecord, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p.rec)
	}
	return out
}

func (t *Testbed) writeState() error {
	if t.StateDir == "" {
		return nil
	}
	st := State{StateDir: t.StateDir, EtcdURL: t.etcdURL, Processes: t.Processes(), Started: time.Now().UTC()}
	t.mu.Lock()
	ready := t.ready
	t.mu.Unlock()
	if ready && t.Hub != nil {
		st.Clusters = t.Clusters()
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(t.StateDir, StateFileName+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(t.StateDir, StateFileName))
}

// ReadState reads the state file of a testbed started in dir.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFileName))
	if err != nil {
		return nil, err
	}
	st := &State{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("testbed: state file %s: %w", filepath.Join(dir, StateFileName), err)
	}
	return st, nil
}

func (s *State) anyAlive() bool {
	for _, r := range s.Processes {
		if Alive(r) {
			return true
		}
	}
	return false
}

// StopIfRecorded is StopState for a folder that may hold no testbed (a test's, whose blocks
// or commands may not have started one): nothing recorded there is nothing to stop (nil).
func StopIfRecorded(dir string) error {
	if _, err := StopState(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// StopState stops every process recorded in the state file of dir (etcd last) and removes
// the state file. It is safe to run twice.
func StopState(dir string) (*State, error) {
	st, err := ReadState(dir)
	if err != nil {
		return nil, err
	}
	var first, last []ProcessRecord
	for _, r := range st.Processes {
		if r.Name == "etcd" {
			last = append(last, r)
		} else {
			first = append(first, r)
		}
	}
	StopRecords(first, 10*time.Second)
	StopRecords(last, 10*time.Second)
	for _, r := range st.Processes {
		if Alive(r) {
			return st, fmt.Errorf("testbed: process %s (pid %d) is still alive", r.Name, r.PID)
		}
	}
	if err := os.Remove(filepath.Join(dir, StateFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	return st, nil
}

// Stop stops every process the testbed started, waits until each is gone, and removes the
// state directory if Start created it. It is safe to call more than once and from several
// goroutines.
func (t *Testbed) Stop() error {
	t.stopOnce.Do(func() {
		close(t.stopped)
		if t.stopSig != nil {
			signal.Stop(t.stopSig)
		}
		if t.proxy != nil {
			t.proxy.Close()
		}
		if t.proxyLog != nil {
			_ = t.proxyLog.Close()
		}
		t.mu.Lock()
		t.stopping = true
		procs := append([]*process(nil), t.procs...)
		t.mu.Unlock()
		var wg sync.WaitGroup
		for _, p := range procs {
			if p == t.etcd {
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.stop(10 * time.Second) }()
		}
		wg.Wait()
		if t.etcd != nil {
			t.etcd.stop(10 * time.Second)
		}
		t.mu.Lock()
		t.procs = nil
		t.mu.Unlock()
		if t.ownsDir {
			_ = os.RemoveAll(t.StateDir)
		} else if t.StateDir != "" {
			_ = os.Remove(filepath.Join(t.StateDir, StateFileName))
		}
	})
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 for servers started as processes
// (see package freeport for why not the kernel's pick).
func freePorts(n int) ([]int, error) {
	ports, err := freeport.Ports(n)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	return ports, nil
}

// RESTConfig returns a client configuration for the cluster (admin), through the member
// proxy if the cluster has one.
func (c *Cluster) RESTConfig() *rest.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restCfg == nil {
		c.restCfg = &rest.Config{
			Host:            c.Server,
			BearerToken:     c.tb.pki.adminTok,
			TLSClientConfig: rest.TLSClientConfig{CAData: c.tb.pki.ca.PEM},
			QPS:             200,
			Burst:           400,
		}
	}
	return rest.CopyConfig(c.restCfg)
}

// directRESTConfig is RESTConfig without the member proxy, for the testbed's own calls.
func (c *Cluster) directRESTConfig() *rest.Config {
	cfg := c.RESTConfig()
	if c.DirectServer != "" {
		cfg.Host = c.DirectServer
	}
	return cfg
}

// KubeconfigBytes returns the kubeconfig of the cluster.
func (c *Cluster) KubeconfigBytes() ([]byte, error) {
	return os.ReadFile(c.Kubeconfig)
}

// writeKubeconfig writes the cluster's kubeconfig and, when the cluster is behind the member
// proxy, the direct one its own components use.
func (c *Cluster) writeKubeconfig() error {
	cfg := clientcmdKubeconfig(c.Name, c.Server, c.tb.pki.ca.PEM, c.tb.pki.adminTok)
	c.Kubeconfig = filepath.Join(c.tb.StateDir, c.Name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.Kubeconfig); err != nil {
		return err
	}
	c.localKubeconfig = c.Kubeconfig
	if c.DirectServer == "" {
		return nil
	}
	cfg = clientcmdKubeconfig(c.Name, c.DirectServer, c.tb.pki.ca.PEM, c.tb.pki.adminTok)
	c.localKubeconfig = filepath.Join(c.tb.StateDir, "direct", c.Name+".kubeconfig")
	return clientcmd.WriteToFile(*cfg, c.localKubeconfig)
}

// startProxy starts the member proxy in front of every member's API server: in process, or
// as a process of its own (in its own process group, recorded like the others) when the
// testbed is detached.
func (t *Testbed) startProxy(ctx context.Context) error {
	cfg := ProxyConfig{Latency: t.opts.MemberLatency}
	if t.opts.MemberFaults != nil {
		cfg.Faults = *t.opts.MemberFaults
	}
	var names []string
	for _, c := range t.Members {
		cfg.Routes = append(cfg.Routes, ProxyRoute{
			Listen: "127.0.0.1:" + strconv.Itoa(c.proxyPort),
			Target: "127.0.0.1:" + strconv.Itoa(c.port),
		})
		names = append(names, c.Name)
	}
	logPath := filepath.Join(t.StateDir, "logs", "member-proxy.log")
	if !t.opts.Detached {
		var tlsCfg *proxyTLS
		if cfg.Faults.needsHTTP() {
			var err error
			if tlsCfg, err = t.pki.proxyTLS("member-proxy"); err != nil {
				return fmt.Errorf("testbed: member proxy certificate: %w", err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
			return err
		}
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		t.proxyLog = lf
		if t.proxy, err = startMemberProxy(cfg, names, tlsCfg, lf); err != nil {
			return fmt.Errorf("testbed: member proxy: %w", err)
		}
		for i, c := range t.Members {
			c.faults = t.proxy.injectors[i]
		}
		return nil
	}
	if cfg.Faults.needsHTTP() {
		var err error
		if cfg.CertFile, cfg.KeyFile, err = t.pki.servingCert("member-proxy"); err != nil {
			return fmt.Errorf("testbed: member proxy certificate: %w", err)
		}
		cfg.CAFile = t.pki.caFile()
	}
	args := append(append([]string(nil), t.opts.ProxyCommand[1:]...), cfg.Args()...)
	p, err := startProcess("member-proxy", t.opts.ProxyCommand[0], args, logPath, false)
	if err != nil {
		return err
	}
	if !t.track(p) {
		return errStopped
	}
	err = pollUntil(ctx, readyTimeout, p, func() bool {
		for _, r := range cfg.Routes {
			conn, err := net.DialTimeout("tcp", r.Listen, time.Second)
			if err != nil {
				return false
			}
			conn.Close()
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("testbed: the member proxy did not start (log: %s): %w", logPath, err)
	}
	return nil
}

// Faults controls the faults of the member's proxy at run time: nil for the hub, for a
// member without a proxy (no Options.MemberLatency or MemberFaults), and in a detached
// testbed (whose proxy runs in its own process).
func (c *Cluster) Faults() *FaultInjector { return c.faults }

// FaultCounts is the sum of the faults injected into every member so far (in-process proxy
// only).
func (t *Testbed) FaultCounts() FaultCounts {
	var sum FaultCounts
	for _, c := range t.Members {
		if c.faults != nil {
			sum = sum.Add(c.faults.Counts())
		}
	}
	return sum
}

// SetMemberFaults replaces the faults of every member's in-process proxy (FaultInjector.Set).
func (t *Testbed) SetMemberFaults(f Faults) error {
	for _, c := range t.Members {
		if c.faults == nil {
			return fmt.Errorf("testbed: %s has no in-process member proxy (start the testbed with Options.MemberFaults)", c.Name)
		}
		if err := c.faults.Set(f); err != nil {
			return err
		}
	}
	return nil
}
