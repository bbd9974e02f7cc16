package testbed

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultRefuseFor is how long the member proxy refuses new connections after each reset,
// unless Faults.RefuseFor says otherwise: about what a load balancer's failover or a managed
// control plane's API server restart takes.
const DefaultRefuseFor = 1500 * time.Millisecond

// DefaultHTTPFaultCodes are the codes of injected HTTP answers unless HTTPFaults.Codes says
// otherwise.
var DefaultHTTPFaultCodes = []int{http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// Faults are the faults the member proxy injects between clients (rewind) and a member's API
// server. The zero value injects nothing.
type Faults struct {
	// ResetEvery, when positive, resets every open connection to the member on this interval
	// (a TCP RST to the client and to the server) and then refuses new connections for
	// RefuseFor, as a load balancer's failover or a managed control plane's restart does. The
	// first reset of each member comes at a random point of its first interval, so members
	// are not hit in step.
	ResetEvery time.Duration
	// RefuseFor is how long new connections are refused (accepted and reset at once) after
	// each reset. Zero means DefaultRefuseFor; a negative value refuses none.
	RefuseFor time.Duration
	// HTTP answers a fraction of requests with an error status without forwarding them.
	HTTP HTTPFaults
	// HTTPProxy serves the member through the HTTP proxy (TLS terminated with a certificate of
	// the testbed's CA, requests forwarded to the API server) even when HTTP.Fraction is 0, so
	// that HTTP faults can be turned on at run time (FaultInjector.Set). HTTP.Fraction > 0
	// implies it.
	HTTPProxy bool
}

// HTTPFaults says which requests the member proxy answers itself with an error status, as an
// overloaded or restarting API server (or a gateway in front of it) does. The body is a
// metav1.Status like the API server's own: 429 TooManyRequests (with Retry-After), 500
// InternalError, 503 ServiceUnavailable, 504 Timeout, and for other 5xx codes the status
// client-go makes of an unexpected server response.
type HTTPFaults struct {
	// Fraction of the eligible requests (0 to 1) answered with a fault, each chosen at random.
	Fraction float64
	// Codes to answer with, one chosen at random per fault: 429 or 500-599. Empty means
	// DefaultHTTPFaultCodes.
	Codes []int
	// RetryAfter is the Retry-After of a 429 (whole seconds, at least 1). Zero means 1s.
	RetryAfter time.Duration
	// MutatingOnly restricts the faults to POST, PUT, PATCH and DELETE requests.
	MutatingOnly bool
	// PathPrefixes, when set, restricts the faults to requests whose path starts with one of
	// them (e.g. "/apis/apiextensions.k8s.io/", "/api/v1/namespaces/shop/").
	PathPrefixes []string
	// LoseAnswers makes each fault a lost answer instead of a status: the request is sent on
	// to the API server, which acts on it, and its answer never reaches the client (the
	// stream is reset), as when a connection breaks after the server acted. This is the
	// fault that tells whether a client's retry of a write is safe. Codes and RetryAfter are
	// not used; a watch is reset without being sent on.
	LoseAnswers bool
	// Max, when positive, is how many faults are injected in all from the moment these
	// faults are set; then requests are forwarded untouched.
	Max int
}

// Validate says whether f can be injected.
func (f Faults) Validate() error {
	var errs []error
	if f.ResetEvery < 0 {
		errs = append(errs, fmt.Errorf("reset interval must be >= 0, got %s", f.ResetEvery))
	}
	if f.HTTP.Fraction < 0 || f.HTTP.Fraction > 1 {
		errs = append(errs, fmt.Errorf("HTTP fault fraction must be between 0 and 1, got %v", f.HTTP.Fraction))
	}
	for _, c := range f.HTTP.Codes {
		if c != http.StatusTooManyRequests && (c < 500 || c > 599) {
			errs = append(errs, fmt.Errorf("HTTP fault code %d: want 429 or 500-599", c))
		}
	}
	if f.HTTP.Max < 0 {
		errs = append(errs, fmt.Errorf("HTTP fault Max must be >= 0, got %d", f.HTTP.Max))
	}
	if f.HTTP.RetryAfter < 0 {
		errs = append(errs, fmt.Errorf("Retry-After must be >= 0, got %s", f.HTTP.RetryAfter))
	}
	for _, p := range f.HTTP.PathPrefixes {
		if !strings.HasPrefix(p, "/") {
			errs = append(errs, fmt.Errorf("HTTP fault path prefix %q must start with /", p))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("faults: %w", err)
	}
	return nil
}

// needsHTTP says whether the member must be served through the HTTP proxy.
func (f Faults) needsHTTP() bool { return f.HTTPProxy || f.HTTP.Fraction > 0 }

// refuseFor is RefuseFor with its default applied.
func (f Faults) refuseFor() time.Duration {
	switch {
	case f.RefuseFor == 0:
		return DefaultRefuseFor
	case f.RefuseFor < 0:
		return 0
	}
	return f.RefuseFor
}

// codes is HTTP.Codes with its default applied.
func (h HTTPFaults) codes() []int {
	if len(h.Codes) == 0 {
		return DefaultHTTPFaultCodes
	}
	return h.Codes
}

// retryAfterSeconds is RetryAfter in whole seconds, at least 1.
func (h HTTPFaults) retryAfterSeconds() int {
	return max(1, int((h.RetryAfter+time.Second-1)/time.Second))
}

// eligible says whether a request may be answered with a fault.
func (h HTTPFaults) eligible(r *http.Request) bool {
	if h.MutatingOnly {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return false
		}
	}
	if len(h.PathPrefixes) == 0 {
		return true
	}
	return slices.ContainsFunc(h.PathPrefixes, func(p string) bool { return strings.HasPrefix(r.URL.Path, p) })
}

// FaultCounts are the faults injected so far.
type FaultCounts struct {
	// Resets is the number of times every open connection was reset (on the interval, or by
	// ResetNow and RefuseFor).
	Resets int64 `json:"resets"`
	// ConnsReset is the number of client connections reset.
	ConnsReset int64 `json:"connsReset"`
	// ConnsRefused is the number of new connections refused (accepted and reset at once).
	ConnsRefused int64 `json:"connsRefused"`
	// HTTPRequests is the number of requests the HTTP proxy received (forwarded or not).
	HTTPRequests int64 `json:"httpRequests"`
	// HTTPFaults is the number of requests answered with an injected status.
	HTTPFaults int64 `json:"httpFaults"`
	// HTTPByCode is HTTPFaults by status code; a lost answer (HTTPFaults.LoseAnswers) counts
	// as code 0.
	HTTPByCode map[int]int64 `json:"httpByCode,omitempty"`
}

// Add returns the sum of c and o.
func (c FaultCounts) Add(o FaultCounts) FaultCounts {
	s := FaultCounts{
		Resets: c.Resets + o.Resets, ConnsReset: c.ConnsReset + o.ConnsReset, ConnsRefused: c.ConnsRefused + o.ConnsRefused,
		HTTPRequests: c.HTTPRequests + o.HTTPRequests, HTTPFaults: c.HTTPFaults + o.HTTPFaults,
	}
	for _, m := range []map[int]int64{c.HTTPByCode, o.HTTPByCode} {
		for code, n := range m {
			if s.HTTPByCode == nil {
				s.HTTPByCode = map[int]int64{}
			}
			s.HTTPByCode[code] += n
		}
	}
	return s
}

// String is one line for logs and benchmark output, e.g. "12 resets (31 connections reset,
// 4 refused), 7 of 310 requests answered with a fault (429: 3, 503: 4)".
func (c FaultCounts) String() string {
	s := fmt.Sprintf("%d resets (%d connections reset, %d refused)", c.Resets, c.ConnsReset, c.ConnsRefused)
	if c.HTTPRequests == 0 && c.HTTPFaults == 0 {
		return s
	}
	s += fmt.Sprintf(", %d of %d requests answered with a fault", c.HTTPFaults, c.HTTPRequests)
	if len(c.HTTPByCode) > 0 {
		var parts []string
		for _, code := range slices.Sorted(maps.Keys(c.HTTPByCode)) {
			if code == 0 {
				parts = append(parts, fmt.Sprintf("answer lost: %d", c.HTTPByCode[code]))
				continue
			}
			parts = append(parts, fmt.Sprintf("%d: %d", code, c.HTTPByCode[code]))
		}
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// FaultInjector injects the faults of one member's proxy and counts them. A test controls it
// at run time (Cluster.Faults): turn the faults on or off, change them, reset every open
// connection now, or refuse new connections for a while.
type FaultInjector struct {
	name      string
	httpLayer bool

	mu          sync.Mutex
	faults      Faults
	enabled     bool
	refuseUntil time.Time
	conns       map[*connPair]struct{}
	byCode      map[int]int64
	sinceSet    int // HTTP faults injected since the last Set (for HTTPFaults.Max)
	closed      bool

	resets, connsReset, connsRefused, httpRequests, httpFaults atomic.Int64

	rearm chan struct{} // wakes the reset loop when the schedule changes
	stop  chan struct{}
	done  chan struct{}
}

// connPair is one connection through the proxy: the client's and the one to the server
// (nil until dialed). reset is set once both were reset.
type connPair struct {
	client, server net.Conn
	reset          bool
}

// newFaultInjector starts the reset loop of a member's faults (enabled).
func newFaultInjector(name string, f Faults, httpLayer bool) *FaultInjector {
	fi := &FaultInjector{
		name: name, httpLayer: httpLayer, faults: f, enabled: true,
		conns: map[*connPair]struct{}{}, byCode: map[int]int64{},
		rearm: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go fi.loop()
	return fi
}

// Name is the member this injector serves.
func (f *FaultInjector) Name() string { return f.name }

// HTTPLayer says whether the member is served through the HTTP proxy (HTTP faults possible).
func (f *FaultInjector) HTTPLayer() bool { return f.httpLayer }

// Faults returns the faults configured (injected only while enabled).
func (f *FaultInjector) Faults() Faults {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faults
}

// Set replaces the faults and enables them. HTTP faults need the HTTP proxy
// (Faults.HTTPProxy or HTTP.Fraction > 0 when the testbed started). A new ResetEvery takes
// effect at once: the next reset comes one interval after Set.
func (f *FaultInjector) Set(faults Faults) error {
	if err := faults.Validate(); err != nil {
		return err
	}
	if faults.HTTP.Fraction > 0 && !f.httpLayer {
		return fmt.Errorf("faults: %s is not served through the HTTP proxy (start the testbed with Faults.HTTPProxy to inject HTTP faults at run time)", f.name)
	}
	f.mu.Lock()
	f.faults = faults
	f.enabled = true
	f.sinceSet = 0
	f.mu.Unlock()
	f.wake()
	return nil
}

// SetEnabled turns the faults on or off, keeping their configuration. Off stops the periodic
// resets and the HTTP faults and ends a refusal under way; ResetNow and RefuseFor still act.
func (f *FaultInjector) SetEnabled(on bool) {
	f.mu.Lock()
	f.enabled = on
	if !on {
		f.refuseUntil = time.Time{}
	}
	f.mu.Unlock()
	f.wake()
}

// Enabled says whether the faults are on.
func (f *FaultInjector) Enabled() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enabled
}

// ResetNow resets every open connection to the member now and refuses new ones for the
// configured RefuseFor, as one tick of ResetEvery does.
func (f *FaultInjector) ResetNow() {
	f.RefuseFor(f.Faults().refuseFor())
}

// RefuseFor resets every open connection to the member now and refuses new ones for d: the
// member is unreachable for d through its proxy (its own components, which talk to it
// directly, are not affected). A later call replaces the end of the refusal; Heal ends it.
// With d <= 0 it only resets (and ends a refusal under way).
func (f *FaultInjector) RefuseFor(d time.Duration) {
	f.mu.Lock()
	if d > 0 {
		f.refuseUntil = time.Now().Add(d)
	} else {
		f.refuseUntil = time.Time{}
	}
	pairs := slices.Collect(maps.Keys(f.conns))
	clear(f.conns)
	for _, p := range pairs {
		p.reset = true
	}
	f.mu.Unlock()
	f.resets.Add(1)
	for _, p := range pairs {
		resetConn(p.client)
		if p.server != nil {
			resetConn(p.server)
		}
		f.connsReset.Add(1)
	}
}

// Heal ends a refusal under way: new connections are accepted again.
func (f *FaultInjector) Heal() {
	f.mu.Lock()
	f.refuseUntil = time.Time{}
	f.mu.Unlock()
}

// Counts returns the faults injected so far.
func (f *FaultInjector) Counts() FaultCounts {
	f.mu.Lock()
	byCode := maps.Clone(f.byCode)
	f.mu.Unlock()
	if len(byCode) == 0 {
		byCode = nil
	}
	return FaultCounts{
		Resets: f.resets.Load(), ConnsReset: f.connsReset.Load(), ConnsRefused: f.connsRefused.Load(),
		HTTPRequests: f.httpRequests.Load(), HTTPFaults: f.httpFaults.Load(), HTTPByCode: byCode,
	}
}

// OpenConns is the number of client connections open through the proxy.
func (f *FaultInjector) OpenConns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

// resetConn closes c with a TCP RST instead of a FIN: the peer's next read or write fails
// with "connection reset by peer".
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// admit registers a connection just accepted, or refuses it (resets it at once and counts
// it) while a refusal is under way. It returns nil when the connection was refused.
func (f *FaultInjector) admit(c net.Conn) *connPair {
	f.mu.Lock()
	if f.closed || time.Now().Before(f.refuseUntil) {
		f.mu.Unlock()
		resetConn(c)
		f.connsRefused.Add(1)
		return nil
	}
	p := &connPair{client: c}
	f.conns[p] = struct{}{}
	f.mu.Unlock()
	return p
}

// dialed records the server side of p; it reports false (and resets server) when p was reset
// while the server was being dialed.
func (f *FaultInjector) dialed(p *connPair, server net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.reset {
		resetConn(server)
		return false
	}
	p.server = server
	return true
}

// release forgets p once its connection has ended.
func (f *FaultInjector) release(p *connPair) {
	f.mu.Lock()
	delete(f.conns, p)
	f.mu.Unlock()
}

// httpFault says whether to answer r with a fault, and with which code, and counts it.
func (f *FaultInjector) httpFault(r *http.Request) (code int, h HTTPFaults, ok bool) {
	f.httpRequests.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	h = f.faults.HTTP
	if !f.enabled || h.Fraction <= 0 || (h.Max > 0 && f.sinceSet >= h.Max) || !h.eligible(r) || rand.Float64() >= h.Fraction {
		return 0, h, false
	}
	f.sinceSet++
	if !h.LoseAnswers {
		codes := h.codes()
		code = codes[rand.IntN(len(codes))]
	}
	f.byCode[code]++
	f.httpFaults.Add(1)
	return code, h, true
}

func (f *FaultInjector) wake() {
	select {
	case f.rearm <- struct{}{}:
	default:
	}
}

// loop resets every connection on the interval while enabled. The first reset after start
// comes at a random point of the first interval; after a change of schedule, one interval
// after it.
func (f *FaultInjector) loop() {
	defer close(f.done)
	first := true
	for {
		f.mu.Lock()
		every, on := f.faults.ResetEvery, f.enabled
		f.mu.Unlock()
		var tick <-chan time.Time
		var timer *time.Timer
		if on && every > 0 {
			d := every
			if first {
				d = time.Duration(rand.Int64N(int64(every))) + 1
			}
			timer = time.NewTimer(d)
			tick = timer.C
		}
		first = false
		select {
		case <-tick:
			f.ResetNow()
		case <-f.rearm:
		case <-f.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// close stops the reset loop; connections still open are left to the proxy's Close.
func (f *FaultInjector) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	close(f.stop)
	<-f.done
}
