package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProxyRoute is one listening address of the member proxy and the address it forwards to.
type ProxyRoute struct {
	Listen, Target string
}

// String is the route as the proxy command takes it: LISTEN=TARGET.
func (r ProxyRoute) String() string { return r.Listen + "=" + r.Target }

// ParseProxyRoute reads LISTEN=TARGET.
func ParseProxyRoute(s string) (ProxyRoute, error) {
	l, t, ok := strings.Cut(s, "=")
	if !ok || l == "" || t == "" {
		return ProxyRoute{}, fmt.Errorf("route %q: want LISTEN=TARGET, e.g. 127.0.0.1:7001=127.0.0.1:6443", s)
	}
	return ProxyRoute{Listen: l, Target: t}, nil
}

// ProxyConfig is what the member proxy does: it forwards every route with Latency and
// injects Faults. `rewind testbed proxy` runs it in a process of its own (Args).
type ProxyConfig struct {
	// Latency delays every chunk of bytes by this much in each direction.
	Latency time.Duration
	// Faults are injected on every route.
	Faults Faults
	// Routes are the listening addresses and the API servers they forward to.
	Routes []ProxyRoute
	// CertFile and KeyFile are the PEM serving certificate of the HTTP proxy (for 127.0.0.1),
	// and CAFile the PEM CA of the API servers; needed when Faults need the HTTP proxy.
	CertFile, KeyFile, CAFile string
}

// Args are the arguments that follow Options.ProxyCommand to run the proxy in its own
// process (the flags of `rewind testbed proxy`).
func (c ProxyConfig) Args() []string {
	args := []string{"--latency=" + c.Latency.String()}
	f := c.Faults
	if f.ResetEvery != 0 {
		args = append(args, "--reset-every="+f.ResetEvery.String())
	}
	// The effective duration: the flag's 0 means none, where Faults' 0 means the default.
	args = append(args, "--refuse-for="+f.refuseFor().String())
	if f.HTTP.Fraction != 0 {
		args = append(args, "--http-faults="+strconv.FormatFloat(f.HTTP.Fraction, 'g', -1, 64))
	}
	if len(f.HTTP.Codes) > 0 {
		codes := make([]string, len(f.HTTP.Codes))
		for i, code := range f.HTTP.Codes {
			codes[i] = strconv.Itoa(code)
		}
		args = append(args, "--http-fault-codes="+strings.Join(codes, ","))
	}
	if f.HTTP.RetryAfter != 0 {
		args = append(args, "--http-retry-after="+f.HTTP.RetryAfter.String())
	}
	if f.HTTP.MutatingOnly {
		args = append(args, "--http-faults-mutating-only")
	}
	for _, p := range f.HTTP.PathPrefixes {
		args = append(args, "--http-fault-path="+p)
	}
	if f.HTTPProxy {
		args = append(args, "--http-proxy")
	}
	if c.CertFile != "" {
		args = append(args, "--tls-cert-file="+c.CertFile, "--tls-key-file="+c.KeyFile, "--ca-file="+c.CAFile)
	}
	for _, r := range c.Routes {
		args = append(args, "--route="+r.String())
	}
	return args
}

// RunProxy runs the member proxy until ctx ends, writing what it injected to logw every
// minute (when it changed) and at the end. It is the body of `rewind testbed proxy`.
func RunProxy(ctx context.Context, cfg ProxyConfig, logw io.Writer) error {
	var tlsCfg *proxyTLS
	if cfg.Faults.needsHTTP() {
		if cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == "" {
			return errors.New("testbed proxy: HTTP faults need a serving certificate, its key and the API servers' CA")
		}
		var err error
		if tlsCfg, err = loadProxyTLS(cfg.CertFile, cfg.KeyFile, cfg.CAFile); err != nil {
			return fmt.Errorf("testbed proxy: %w", err)
		}
	}
	names := make([]string, len(cfg.Routes))
	for i, r := range cfg.Routes {
		names[i] = r.Listen
	}
	p, err := startMemberProxy(cfg, names, tlsCfg, logw)
	if err != nil {
		return fmt.Errorf("testbed proxy: %w", err)
	}
	defer p.Close()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	var last FaultCounts
	report := func() {
		c := p.Counts()
		if c.String() != last.String() {
			fmt.Fprintf(logw, "%s faults injected: %s\n", time.Now().UTC().Format(time.RFC3339), c)
			last = c
		}
	}
	for {
		select {
		case <-tick.C:
			report()
		case <-ctx.Done():
			report()
			return nil
		}
	}
}

// memberProxy is the proxy in front of the members' API servers: per route a TCP layer
// (latency, connection resets and refusals) and, when HTTP faults are asked for, an HTTP
// layer behind it (TLS terminated, some requests answered with an error status, the rest
// forwarded to the API server).
type memberProxy struct {
	tcp       *latencyProxy
	injectors []*FaultInjector
	https     []*httpFaultProxy
	addrs     []string // the listening address of each route
}

// startMemberProxy listens on every route; names[i] names the member of route i.
func startMemberProxy(cfg ProxyConfig, names []string, tlsCfg *proxyTLS, logw io.Writer) (_ *memberProxy, err error) {
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.Faults.needsHTTP() && tlsCfg == nil {
		return nil, errors.New("HTTP faults need the proxy's serving certificate")
	}
	m := &memberProxy{tcp: newLatencyProxy(cfg.Latency)}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	for i, r := range cfg.Routes {
		fi := newFaultInjector(names[i], cfg.Faults, cfg.Faults.needsHTTP())
		m.injectors = append(m.injectors, fi)
		target := r.Target
		if fi.httpLayer {
			h, err := startHTTPFaultProxy(fi, r.Target, tlsCfg, logw)
			if err != nil {
				return nil, err
			}
			m.https = append(m.https, h)
			target = h.addr
		}
		l, err := net.Listen("tcp", r.Listen)
		if err != nil {
			return nil, err
		}
		m.addrs = append(m.addrs, l.Addr().String())
		m.tcp.serve(l, target, fi)
	}
	return m, nil
}

// Counts is the sum of every route's faults.
func (m *memberProxy) Counts() FaultCounts {
	var c FaultCounts
	for _, fi := range m.injectors {
		c = c.Add(fi.Counts())
	}
	return c
}

// Close stops the resets, stops listening, ends every connection and waits until every
// goroutine of the proxy has returned.
func (m *memberProxy) Close() {
	for _, fi := range m.injectors {
		fi.close()
	}
	m.tcp.Close()
	for _, h := range m.https {
		h.close()
	}
}

// latencyProxy is a TCP proxy that makes a local API server look remote: every chunk of bytes
// read from one side is written to the other side latency later, in order, so a request and
// its response take at least twice the latency (one round trip).
type latencyProxy struct {
	latency   time.Duration
	mu        sync.Mutex
	closed    bool
	listeners []net.Listener
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

func newLatencyProxy(latency time.Duration) *latencyProxy {
	return &latencyProxy{latency: latency, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on l and forwards them to target, until Close.
func (p *latencyProxy) Serve(l net.Listener, target string) { p.serve(l, target, nil) }

// serve is Serve with faults: when faults is set, it refuses connections while a refusal is
// under way and registers the others so that they can be reset.
func (p *latencyProxy) serve(l net.Listener, target string, faults *FaultInjector) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.Close()
		return
	}
	p.listeners = append(p.listeners, l)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			var pair *connPair
			if faults != nil {
				if pair = faults.admit(conn); pair == nil {
					continue
				}
			}
			if !p.add(conn) {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.remove(conn)
				if pair != nil {
					defer faults.release(pair)
				}
				p.forward(conn, target, faults, pair)
			}()
		}
	}()
}

// add registers a connection so that Close can end it; it refuses (and closes) it once the
// proxy is closed.
func (p *latencyProxy) add(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *latencyProxy) remove(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Close stops accepting, ends every open connection and waits until every goroutine of the
// proxy has returned.
func (p *latencyProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, l := range p.listeners {
		l.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// forward connects client to target and copies both ways with the delay. A direction that
// reaches end of file half-closes the other side; an error on either side ends both.
func (p *latencyProxy) forward(client net.Conn, target string, faults *FaultInjector, pair *connPair) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	if pair != nil && !faults.dialed(pair, server) {
		return
	}
	if !p.add(server) {
		return
	}
	defer p.remove(server)
	defer server.Close()
	done := make(chan struct{})
	var once sync.Once
	abort := func() {
		once.Do(func() {
			close(done)
			client.Close()
			server.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	for _, dir := range [][2]net.Conn{{server, client}, {client, server}} {
		go func() {
			defer wg.Done()
			if err := delayedCopy(dir[0], dir[1], p.latency, done); err != nil {
				abort()
			}
		}()
	}
	wg.Wait()
	abort()
}

// chunk is bytes read at one time, to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// delayedCopy copies src to dst, writing each chunk read from src latency after it was read,
// in order. At the end of src it half-closes dst (once the delayed chunks are written) and
// returns nil; it returns an error when either side fails, or when done is closed.
func delayedCopy(dst, src net.Conn, latency time.Duration, done <-chan struct{}) error {
	chunks := make(chan chunk, 256)
	readErr := make(chan error, 1)
	go func() {
		defer close(chunks)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(latency)}:
				case <-done:
					readErr <- net.ErrClosed
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for c := range chunks {
		if d := time.Until(c.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-done:
				return net.ErrClosed
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return err
		}
	}
	if err := <-readErr; !errors.Is(err, io.EOF) {
		return err
	}
	if hc, ok := dst.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}
