package teststores

import (
	"io"
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

	cut     *httputil.ReverseProxy // CutBodies: forwards answers cut after half their body
	cutting bool
	keep    int64 // bytes of a body that go through
	cuts    atomic.Int64
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
	f := &FaultyHTTP{URL: "http://" + l.Addr().String(), rp: httputil.NewSingleHostReverseProxy(u), cut: httputil.NewSingleHostReverseProxy(u)}
	f.cut.ModifyResponse = func(resp *http.Response) error {
		f.mu.Lock()
		keep := f.keep
		f.mu.Unlock()
		if resp.Request.Method != http.MethodHead && resp.ContentLength > keep {
			// The Content-Length stays: the server closes the connection after keep bytes of
			// the body, and the client reads an unexpected end of file, as when a connection
			// is closed mid-answer (not reset) by a proxy or a load balancer.
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.LimitReader(resp.Body, keep), resp.Body}
			f.cuts.Add(1)
		}
		return nil
	}
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
	f.match, f.duration, f.until, f.armed, f.cutting = match, d, time.Time{}, true, false
}

// CutBodiesFor arms the proxy as FailFor does, but the requests it matches are answered in
// part: an answer whose Content-Length is more than keep bytes ends, and its connection closes,
// after keep bytes of its body.
func (f *FaultyHTTP) CutBodiesFor(match string, keep int64, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.match, f.duration, f.until, f.armed, f.cutting, f.keep = match, d, time.Time{}, true, true, keep
}

// Cuts is the number of answers cut short.
func (f *FaultyHTTP) Cuts() int64 { return f.cuts.Load() }

// Heal disarms the proxy: every request goes through again.
func (f *FaultyHTTP) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = false
}

// Counts are the requests answered 503 and the connections reset.
func (f *FaultyHTTP) Counts() (unavailable, reset int64) { return f.unavailable.Load(), f.reset.Load() }

// fails says whether r is to fail now, and whether by a cut answer (else a 503 or a reset).
func (f *FaultyHTTP) fails(r *http.Request) (fail, cut bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.armed || !strings.Contains(r.URL.Path, f.match) {
		return false, false
	}
	now := time.Now()
	if f.until.IsZero() {
		f.until = now.Add(f.duration)
	}
	if now.After(f.until) {
		f.armed = false
		return false, false
	}
	return true, f.cutting
}

func (f *FaultyHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail, cut := f.fails(r)
	if !fail {
		f.rp.ServeHTTP(w, r)
		return
	}
	if cut {
		f.cut.ServeHTTP(w, r)
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
