package teststores

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections from its own address to target and calls AfterBytes's hook
// once, when more than that many bytes have gone from the clients to target: a test stops a
// server in the middle of an upload with it.
type Proxy struct {
	// Addr is where clients connect.
	Addr string

	target    string
	l         net.Listener
	sent      atomic.Int64
	mu        sync.Mutex
	threshold int64
	hook      func()
	conns     map[net.Conn]struct{}
	// closed is set when close begins; a connection accepted after that is closed at once.
	closed bool
}

// StartProxy starts a proxy to target, closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// AfterBytes arms hook to run once more than n further bytes went upstream.
func (p *Proxy) AfterBytes(n int64, hook func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.threshold, p.hook = p.sent.Load()+n, hook
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

// track records conns so that close closes them; false when the proxy is already closed (the
// caller closes them).
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	defer func() {
		c.Close()
		up.Close()
		p.untrack(c, up)
	}()
	if !p.track(c, up) {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(c, up)
		done <- struct{}{}
	}()
	go func() {
		buf := make([]byte, 16<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
				p.count(int64(n))
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

func (p *Proxy) count(n int64) {
	total := p.sent.Add(n)
	p.mu.Lock()
	hook := p.hook
	if hook == nil || total <= p.threshold {
		p.mu.Unlock()
		return
	}
	p.hook = nil
	p.mu.Unlock()
	hook()
}

func (p *Proxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.l.Close()
	for c := range p.conns {
		c.Close()
	}
}
