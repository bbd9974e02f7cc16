//go:build !unit

package restore_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// injectFault makes some of a member client's requests fail as the network or a busy API server
// would make them fail.
type injectFault struct {
	// match selects the requests the fault may hit.
	match func(*http.Request) bool
	// hit says, from the number of matching requests so far (1 for the first), whether this
	// one fails (nil: every one).
	hit func(n int) bool
	// how the request fails: with an API status (503 by default: the server is busy), a
	// connection reset before the request reaches the server (reset), a connection reset
	// after the server did the request (lost: the answer never arrives), or a connection
	// reset after cut bytes of the answer's body (cut > 0).
	status int
	reset  bool
	lost   bool
	cut    int
}

// faults counts the faults injected.
type faults struct {
	mu       sync.Mutex
	seen     map[int]int
	injected int
}

func (f *faults) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// faultyMember returns a new access layer to a testbed cluster whose requests fail as fs
// say (the first matching fault decides).
func faultyMember(t *testing.T, c *testbed.Cluster, fs ...injectFault) (*member.Cluster, *faults) {
	t.Helper()
	st := &faults{seen: map[int]int{}}
	cfg := c.RESTConfig()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			for i, f := range fs {
				if !f.match(req) {
					continue
				}
				st.mu.Lock()
				st.seen[i]++
				n := st.seen[i]
				hit := f.hit == nil || f.hit(n)
				if hit {
					st.injected++
				}
				st.mu.Unlock()
				if !hit {
					break
				}
				reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
				switch {
				case f.reset:
					return nil, reset
				case f.lost:
					resp, err := rt.RoundTrip(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					return nil, reset
				case f.cut > 0:
					resp, err := rt.RoundTrip(req)
					if err != nil {
						return nil, err
					}
					resp.Body = &cutBody{rc: resp.Body, left: f.cut, err: reset}
					return resp, nil
				}
				code := f.status
				if code == 0 {
					code = http.StatusServiceUnavailable
				}
				body := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"injected fault","reason":"` +
					reasonFor(code) + `","code":` + strconv.Itoa(code) + `}`
				return &http.Response{
					StatusCode: code, Status: http.StatusText(code), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header:  http.Header{"Content-Type": []string{"application/json"}},
					Body:    io.NopCloser(strings.NewReader(body)),
					Request: req,
				}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	cl, err := member.New(c.Name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl, st
}

func reasonFor(code int) string {
	switch code {
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusInternalServerError:
		return "InternalError"
	case http.StatusTooManyRequests:
		return "TooManyRequests"
	}
	return "Unknown"
}

// cutBody is an answer's body that fails with err after left bytes.
type cutBody struct {
	rc   io.ReadCloser
	left int
	err  error
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, c.err
	}
	if len(p) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.left -= n
	return n, err
}

func (c *cutBody) Close() error { return c.rc.Close() }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// request matches requests by method and path.
func request(method string, path func(string) bool) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Method == method && path(r.URL.Path) }
}

func is(p string) func(string) bool { return func(s string) bool { return s == p } }

func under(prefix string) func(string) bool {
	return func(s string) bool { return strings.HasPrefix(s, prefix) }
}

// metadataOnly says whether a request asks for metadata only (the metadata client).
func metadataOnly(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "PartialObjectMetadata")
}

// everyNth hits the n-th, 2n-th... matching request.
func everyNth(n int) func(int) bool { return func(i int) bool { return i%n == 0 } }

// after hits every matching request after the first n.
func after(n int) func(int) bool { return func(i int) bool { return i > n } }
