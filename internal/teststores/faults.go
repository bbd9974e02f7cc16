package teststores

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultyHTTP is an HTTP reverse proxy in front of a store server that, once armed, fails
// every request whose path contains a given text for a while: alternately a 503 (an S3
// ServiceUnavailable error) and a connection reset. A test puts it between a client and a
// store to show the client rides out an outage.
type FaultyHTTP struct {
	// URL is where clients connect (http://127.0.0.1:PORT).
	URL string

	srv *http.Server
	rp  *httputil.ReverseProxy

	mu       sync.Mutex
	match    string
	duration time.Duration
	until    time.Time // zero: armed, not started

	armed              bool
	unavailable, reset atomic.Int64
	n                  atomic.Int64
}

// StartFaultyHTTP starts a proxy to target (http://HOST:PORT), closed when the test ends.
func StartFaultyHTTP(t testing.TB, target string) *FaultyHTTP {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &FaultyHTTP{URL: "http://" + l.Addr().String(), rp: httputil.NewSingleHostReverseProxy(u)}
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = f.srv.Serve(l) }()
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

// FailFor arms the proxy: from the first request whose path contains match, every such
// request fails for d.
func (f *FaultyHTTP) FailFor(match string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match, f.duration, f.until, f.armed = match, d, time.Time{}, true
}

// Heal disarms the proxy: every request goes through again.
func (f *FaultyHTTP) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
}

// Counts are the requests answered 503 and the connections reset.
func (f *FaultyHTTP) Counts() (unavailable, reset int64) { return f.unavailable.Load(), f.reset.Load() }

// fails says whether r is to fail now.
func (f *FaultyHTTP) fails(r *http.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed || !strings.Contains(r.URL.Path, f.match) {
		return false
	}
	now := time.Now()
	if f.until.IsZero() {
		f.until = now.Add(f.duration)
	}
	if now.After(f.until) {
		f.armed = false
		return false
	}
	return true
}

func (f *FaultyHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.fails(r) {
		f.rp.ServeHTTP(w, r)
		return
	}
	if f.n.Add(1)%2 == 0 {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not an orderly close
				}
				_ = c.Close()
				f.reset.Add(1)
				return
			}
		}
	}
	f.unavailable.Add(1)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>injected by the test</Message></Error>`))
}
