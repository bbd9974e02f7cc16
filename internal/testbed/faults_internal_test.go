package testbed

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/testbed/certs"
)

// eventually polls cond every 10ms until it holds, or fails the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s", what, timeout)
	}
}

// startFaultProxy starts a member proxy with one route to target and returns it with its
// address.
func startFaultProxy(t *testing.T, cfg ProxyConfig, target string, tlsCfg *proxyTLS) (*memberProxy, string) {
	t.Helper()
	cfg.Routes = []ProxyRoute{{Listen: "127.0.0.1:0", Target: target}}
	p, err := startMemberProxy(cfg, []string{"member1"}, tlsCfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, p.addrs[0]
}

// roundTrip writes b on c and reads it back (through an echo server).
func roundTrip(c net.Conn, b string) error {
	if _, err := c.Write([]byte(b)); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(b))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != b {
		return errors.New("echo changed the bytes")
	}
	return nil
}

func TestFaultProxyResetsOpenConnectionsAndRefusesNewOnes(t *testing.T) {
	for _, latency := range []time.Duration{0, 5 * time.Millisecond} {
		t.Run("latency "+latency.String(), func(t *testing.T) {
			p, addr := startFaultProxy(t, ProxyConfig{Latency: latency, Faults: Faults{}}, echoServer(t), nil)
			fi := p.injectors[0]
			var open []net.Conn
			for range 3 {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := roundTrip(c, "hello"); err != nil {
					t.Fatal(err)
				}
				open = append(open, c)
			}
			eventually(t, 10*time.Second, "3 connections registered", func() bool { return fi.OpenConns() == 3 })

			// A refusal resets every open connection: the client reads a TCP RST.
			fi.RefuseFor(time.Hour)
			for _, c := range open {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, err := c.Read(make([]byte, 1))
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("an open connection read %v after the reset, want connection reset by peer", err)
				}
			}
			// New connections are accepted and reset at once while it lasts (the reset may
			// even reach the client before its connect returns).
			for range 2 {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					err = roundTrip(c, "x")
					c.Close()
				}
				if err == nil || !fault.IsTransient(err) {
					t.Errorf("a connection during the refusal got %v, want a reset", err)
				}
			}
			got := fi.Counts()
			if got.Resets != 1 || got.ConnsReset != 3 || got.ConnsRefused != 2 {
				t.Errorf("counts %+v, want 1 reset, 3 connections reset, 2 refused", got)
			}
			// Healed, new connections work again.
			fi.Heal()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := roundTrip(c, "back"); err != nil {
				t.Fatalf("after Heal: %v", err)
			}

			// A refusal of a moment ends by itself.
			if err := fi.Set(Faults{RefuseFor: 200 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			fi.ResetNow()
			eventually(t, 10*time.Second, "a connection accepted once the refusal is over", func() bool {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return false
				}
				defer c.Close()
				return roundTrip(c, "again") == nil
			})
		})
	}
}

func TestFaultProxyResetsOnTheInterval(t *testing.T) {
	p, addr := startFaultProxy(t, ProxyConfig{Faults: Faults{ResetEvery: 30 * time.Millisecond, RefuseFor: -1}}, echoServer(t), nil)
	fi := p.injectors[0]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The connection is reset by one of the periodic resets.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %v, want connection reset by peer", err)
	}
	eventually(t, 10*time.Second, "3 periodic resets", func() bool { return fi.Counts().Resets >= 3 })

	// Off, the resets stop and connections stay open; the configuration is kept.
	fi.SetEnabled(false)
	before := fi.Counts().Resets
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for range 10 {
		if err := roundTrip(c2, "still here"); err != nil {
			t.Fatalf("with faults off: %v", err)
		}
	}
	// The loop may have been firing as SetEnabled ran: at most one more.
	if n := fi.Counts().Resets; n > before+1 {
		t.Errorf("%d resets after SetEnabled(false), want none", n-before)
	}
	if fi.Faults().ResetEvery != 30*time.Millisecond {
		t.Errorf("SetEnabled(false) changed the faults: %+v", fi.Faults())
	}
}

// tlsUpstream is an HTTPS server with a certificate of a new CA, the proxy TLS for it, and
// the CA's PEM.
func tlsUpstream(t *testing.T, h http.Handler) (*httptest.Server, *proxyTLS, []byte) {
	t.Helper()
	ca, err := certs.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, _, _, err := ca.Issue("upstream", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	proxyCert, _, _, err := ca.Issue("member-proxy", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*serving}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	return srv, &proxyTLS{cert: *proxyCert, roots: pool}, ca.PEM
}

// statusClient is a REST client of the proxy that decodes Status answers as client-go does
// and never retries.
func statusClient(t *testing.T, addr string, roots []byte) *rest.RESTClient {
	t.Helper()
	cfg := &rest.Config{
		Host:            "https://" + addr,
		BearerToken:     "secret-token",
		QPS:             -1, // no client-side rate limit
		TLSClientConfig: rest.TLSClientConfig{CAData: roots},
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &metav1.SchemeGroupVersion,
			NegotiatedSerializer: serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs},
		},
	}
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHTTPFaultProxy(t *testing.T) {
	release := make(chan struct{}) // ends /stream
	hold := make(chan struct{})    // ends /stream-held, at the end of the test
	defer close(hold)
	var posts atomic.Int64 // POSTs the upstream acted on
	upstream, tlsCfg, caPEM := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/stream" || r.URL.Path == "/stream-held" {
			// A watch: one event now, the next once released.
			_, _ = io.WriteString(w, "{\"first\":true}\n")
			w.(http.Flusher).Flush()
			end := release
			if r.URL.Path == "/stream-held" {
				end = hold
			}
			select {
			case <-end:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, "{\"second\":true}\n")
			return
		}
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Success","code":200,"message":"`+r.Method+" "+r.URL.Path+`"}`)
	}))
	p, addr := startFaultProxy(t, ProxyConfig{Latency: 2 * time.Millisecond, Faults: Faults{HTTPProxy: true}}, strings.TrimPrefix(upstream.URL, "https://"), tlsCfg)
	fi := p.injectors[0]
	rc := statusClient(t, addr, caPEM)
	ctx := t.Context()
	get := func(path string) error { return rc.Get().AbsPath(path).MaxRetries(0).Do(ctx).Error() }
	post := func(path string) error {
		return rc.Post().AbsPath(path).Body([]byte("{}")).MaxRetries(0).Do(ctx).Error()
	}

	// No faults: requests pass with their Authorization header.
	if err := get("/api/v1/namespaces/default"); err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}

	// Each code comes back as the API server's Status, decoded by client-go.
	for _, tc := range []struct {
		code  int
		check func(error) bool
	}{
		{429, apierrors.IsTooManyRequests},
		{500, apierrors.IsInternalError},
		{503, apierrors.IsServiceUnavailable},
		{504, apierrors.IsTimeout},
		{502, func(err error) bool { return apierrors.IsUnexpectedServerError(err) || apierrors.IsInternalError(err) }},
	} {
		if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 1, Codes: []int{tc.code}, RetryAfter: 3 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		err := get("/api/v1/namespaces/default")
		var st apierrors.APIStatus
		if !errors.As(err, &st) || int(st.Status().Code) != tc.code || !tc.check(err) || !fault.IsTransient(err) {
			t.Errorf("code %d: got %v (%#v)", tc.code, err, err)
			continue
		}
		if !strings.Contains(st.Status().Message, injectedBy) {
			t.Errorf("code %d: message %q does not say it was injected", tc.code, st.Status().Message)
		}
		if secs, ok := apierrors.SuggestsClientDelay(err); tc.code == 429 && (!ok || secs != 3) {
			t.Errorf("429: suggests a delay of %d (%v), want 3s", secs, ok)
		}
	}
	// The Retry-After header comes with a 429 only.
	if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 1, Codes: []int{429}}}); err != nil {
		t.Fatal(err)
	}
	resp := rc.Get().AbsPath("/x").MaxRetries(0).Do(ctx)
	var code int
	resp.StatusCode(&code)
	if raw, _ := resp.Raw(); code != 429 || !strings.Contains(string(raw), `"reason":"TooManyRequests"`) {
		t.Errorf("429 answer: code %d, body %s", code, raw)
	}

	// A fraction: about that share of requests, counted exactly.
	if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 0.5}}); err != nil {
		t.Fatal(err)
	}
	before := fi.Counts()
	failed := 0
	const n = 200
	for range n {
		if err := get("/api/v1/namespaces/default"); err != nil {
			if !fault.IsTransient(err) {
				t.Fatalf("an injected answer is not transient: %v", err)
			}
			failed++
		}
	}
	after := fi.Counts()
	if got := after.HTTPFaults - before.HTTPFaults; got != int64(failed) {
		t.Errorf("%d requests failed, but %d faults were counted", failed, got)
	}
	if after.HTTPRequests-before.HTTPRequests != n {
		t.Errorf("%d requests counted, want %d", after.HTTPRequests-before.HTTPRequests, n)
	}
	if failed < n/5 || failed > n*4/5 {
		t.Errorf("%d of %d requests failed with a fraction of 0.5", failed, n)
	}
	var byCode int64
	for code, k := range after.HTTPByCode {
		if code != 429 && code < 500 {
			t.Errorf("unexpected code %d", code)
		}
		byCode += k
	}
	if byCode != after.HTTPFaults {
		t.Errorf("faults by code %v do not add up to %d", after.HTTPByCode, after.HTTPFaults)
	}

	// Mutating only, and only under a path.
	if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 1, Codes: []int{503}, MutatingOnly: true, PathPrefixes: []string{"/api/v1/namespaces/faulty/"}}}); err != nil {
		t.Fatal(err)
	}
	if err := get("/api/v1/namespaces/faulty/configmaps"); err != nil {
		t.Errorf("a GET must pass with mutating-only faults: %v", err)
	}
	if err := post("/api/v1/namespaces/other/configmaps"); err != nil {
		t.Errorf("a POST outside the path must pass: %v", err)
	}
	if err := post("/api/v1/namespaces/faulty/configmaps"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("a POST under the path must get a 503, got %v", err)
	}

	// A lost answer: the request reaches the server, which acts on it, and the client gets no
	// answer but a reset stream (a transient error). Max: only the first of them.
	if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 1, LoseAnswers: true, MutatingOnly: true, Max: 1}}); err != nil {
		t.Fatal(err)
	}
	before = fi.Counts()
	acted := posts.Load()
	if err := post("/api/v1/namespaces/lost/configmaps"); err == nil || !fault.IsTransient(err) {
		t.Errorf("a POST whose answer is lost: got %v, want a transient error", err)
	}
	if posts.Load() != acted+1 {
		t.Errorf("the server acted on %d POSTs whose answer was lost, want 1", posts.Load()-acted)
	}
	if err := post("/api/v1/namespaces/lost/configmaps"); err != nil {
		t.Errorf("the second POST, past Max: %v", err)
	}
	if c := fi.Counts(); c.HTTPFaults != before.HTTPFaults+1 || c.HTTPByCode[0] != 1 || !strings.Contains(c.String(), "answer lost: 1") {
		t.Errorf("one lost answer must be counted as code 0: %+v (%s)", c, c)
	}

	// Off: everything passes, the configuration is kept.
	fi.SetEnabled(false)
	if err := post("/api/v1/namespaces/faulty/configmaps"); err != nil {
		t.Errorf("faults off: %v", err)
	}
	fi.SetEnabled(true)

	// A watch streams through: the first event arrives before the response ends.
	if err := fi.Set(Faults{}); err != nil {
		t.Fatal(err)
	}
	body, err := rc.Get().AbsPath("/stream").Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(body)
	if l, err := lines.ReadString('\n'); err != nil || !strings.Contains(l, "first") {
		t.Fatalf("the first event of the stream: %q, %v", l, err)
	}
	close(release)
	if l, err := lines.ReadString('\n'); err != nil || !strings.Contains(l, "second") {
		t.Fatalf("the second event of the stream: %q, %v", l, err)
	}
	body.Close()

	// An open stream is cut by a reset (the client's HTTP/2 connection gets a TCP RST).
	body, err = rc.Get().AbsPath("/stream-held").Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	lines = bufio.NewReader(body)
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fi.RefuseFor(-1)
	_, err = lines.ReadString('\n')
	if err == nil || !fault.IsTransient(err) {
		t.Errorf("a stream cut by a reset read %v, want a transient error", err)
	}
	if c := fi.Counts(); c.ConnsReset == 0 {
		t.Errorf("no connection counted as reset: %+v", c)
	}

	// With the API server down, the proxy answers 503 as a gateway does (not counted).
	upstream.Close()
	before = fi.Counts()
	if err := get("/api/v1/namespaces/default"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("with the upstream down: %v, want 503", err)
	}
	if c := fi.Counts(); c.HTTPFaults != before.HTTPFaults {
		t.Errorf("an upstream error was counted as an injected fault")
	}
}

func TestFaultsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Faults
		ok   bool
	}{
		{"zero", Faults{}, true},
		{"resets and HTTP", Faults{ResetEvery: time.Second, RefuseFor: -1, HTTP: HTTPFaults{Fraction: 0.1, Codes: []int{429, 502}}}, true},
		{"negative interval", Faults{ResetEvery: -time.Second}, false},
		{"fraction above 1", Faults{HTTP: HTTPFaults{Fraction: 1.5}}, false},
		{"negative Max", Faults{HTTP: HTTPFaults{Fraction: 0.1, Max: -1}}, false},
		{"a 404 is no fault", Faults{HTTP: HTTPFaults{Fraction: 0.1, Codes: []int{404}}}, false},
		{"relative path", Faults{HTTP: HTTPFaults{Fraction: 0.1, PathPrefixes: []string{"api"}}}, false},
	} {
		if err := tc.f.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	fi := newFaultInjector("member1", Faults{}, false)
	defer fi.close()
	if err := fi.Set(Faults{HTTP: HTTPFaults{Fraction: 0.5}}); err == nil {
		t.Error("HTTP faults on a member without the HTTP proxy must be refused")
	}
}

// A lost answer is never waited for on a watch: isWatch knows each way of asking for one.
func TestIsWatch(t *testing.T) {
	for target, want := range map[string]bool{
		"/api/v1/namespaces/a/configmaps?watch=true":              true,
		"/apis/apps/v1/deployments?watch=1":                       true,
		"/api/v1/watch/namespaces/a/configmaps":                   true,
		"/apis/rewind.dev/v1alpha1/watch/rollouts":                true,
		"/api/v1/namespaces/watch/configmaps/x":                   false,
		"/apis/apps/v1/namespaces/a/deployments/watch":            false,
		"/apis/rewind.dev/v1alpha1/namespaces/a/rollouts?watch=0": false,
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if got := isWatch(r); got != want {
			t.Errorf("%s: watch %v, want %v", target, got, want)
		}
	}
}
