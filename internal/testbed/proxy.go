package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// ProxyRoute is one listening address of a latency proxy and the address it forwards to.
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

// ProxyArgs are the arguments that follow Options.ProxyCommand to run a latency proxy for
// routes in its own process (what `rewind testbed proxy` takes).
func ProxyArgs(latency time.Duration, routes []ProxyRoute) []string {
	args := []string{"--latency", latency.String()}
	for _, r := range routes {
		args = append(args, "--route", r.String())
	}
	return args
}

// RunLatencyProxy forwards every route, delaying each chunk of bytes by latency in each
// direction, until ctx ends. It is the body of `rewind testbed proxy`.
func RunLatencyProxy(ctx context.Context, latency time.Duration, routes []ProxyRoute) error {
	p := newLatencyProxy(latency)
	defer p.Close()
	for _, r := range routes {
		l, err := net.Listen("tcp", r.Listen)
		if err != nil {
			return fmt.Errorf("testbed proxy: %w", err)
		}
		p.Serve(l, r.Target)
	}
	<-ctx.Done()
	return nil
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
func (p *latencyProxy) Serve(l net.Listener, target string) {
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
			if !p.add(conn) {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.remove(conn)
				p.forward(conn, target)
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
func (p *latencyProxy) forward(client net.Conn, target string) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
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
