package fault_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/internal/fault"
)

var gr = schema.GroupResource{Group: "apps", Resource: "deployments"}

// get makes one real HTTP request with client and returns its error.
func get(t *testing.T, client *http.Client, url string) error {
	t.Helper()
	resp, err := client.Get(url)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("GET %s answered %s, want an error", url, resp.Status)
	}
	return err
}

// closedPort returns an address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// resetter accepts connections and resets each one (RST) as soon as a request arrives.
func resetter(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 1))
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	return l.Addr().String()
}

// hangup accepts connections and closes each one without a word once a request arrived.
func hangup(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 1))
			c.Close()
		}
	}()
	return l.Addr().String()
}

func TestIsTransient(t *testing.T) {
	plain := &http.Client{Timeout: 5 * time.Second}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	tlsServer := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsServer.Close()
	plainServer := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer plainServer.Close()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	reqCanceled, _ := http.NewRequestWithContext(canceled, http.MethodGet, plainServer.URL, nil)
	_, canceledErr := plain.Do(reqCanceled)

	cases := []struct {
		// name says what happened.
		name string
		// err is the error it gave.
		err error
		// want says whether it is a fault to retry.
		want bool
	}{
		{"nil", nil, false},
		{"429 throttled", apierrors.NewTooManyRequests("slow down", 1), true},
		{"500 internal error (etcd leader changed)", apierrors.NewInternalError(errors.New("etcdserver: leader changed")), true},
		{"503 unavailable", apierrors.NewServiceUnavailable("restarting"), true},
		{"504 server timeout", apierrors.NewTimeoutError("etcd request timed out", 1), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "update", 1), true},
		{"502 from a gateway", apierrors.NewGenericServerResponse(http.StatusBadGateway, "get", gr, "x", "", 0, true), true},
		{"404 not found", apierrors.NewNotFound(gr, "x"), false},
		{"409 conflict", apierrors.NewConflict(gr, "x", errors.New("modified")), false},
		{"422 invalid (a CEL message that says immutable)", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "x",
			field.ErrorList{field.Invalid(field.NewPath("spec", "size"), 3, "size is immutable")}), false},
		{"403 forbidden", apierrors.NewForbidden(gr, "x", errors.New("no")), false},
		{"400 bad request", apierrors.NewBadRequest("bad"), false},
		{"a 500 wrapped with %w", fmt.Errorf("applying: %w", apierrors.NewInternalError(errors.New("webhook timeout"))), true},
		{"connection refused", get(t, plain, "http://"+closedPort(t)), true},
		{"connection reset", get(t, plain, "http://"+resetter(t)), true},
		{"server closed without an answer (EOF)", get(t, plain, "http://"+hangup(t)), true},
		{"client timeout", get(t, &http.Client{Timeout: 100 * time.Millisecond}, slow.URL), true},
		{"context deadline", context.DeadlineExceeded, true},
		{"context canceled", context.Canceled, false},
		{"request of a canceled context", canceledErr, false},
		{"unknown certificate authority", get(t, plain, tlsServer.URL), false},
		// net/http words this one as a plain string error inside *url.Error: untyped transport
		// errors count as faults, since taking a fault for a failure rolls a fleet back while
		// the opposite only makes a target wait (every request, the probe's too, fails alike,
		// so the member is reported unreachable with this message).
		{"TLS to a plain HTTP server", get(t, plain, "https://"+plainServer.Listener.Addr().String()), true},
		{"HTTP/2 GOAWAY", fmt.Errorf("watch: %w", http2.GoAwayError{ErrCode: http2.ErrCodeNo}), true},
		{"HTTP/2 stream reset", http2.StreamError{StreamID: 1, Code: http2.ErrCodeInternal}, true},
		{"plain error", errors.New("something broke"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := fault.IsTransient(c.err); got != c.want {
				t.Errorf("IsTransient(%T %v) = %v, want %v", c.err, c.err, got, c.want)
			}
		})
	}
}

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	base, ceiling := 100*time.Millisecond, 2*time.Second
	seen := map[time.Duration]bool{}
	for n := 1; n <= 10; n++ {
		want := min(base<<(n-1), ceiling)
		for range 50 {
			d := fault.Backoff(n, base, ceiling)
			if d < want*3/4 || d > want*5/4 {
				t.Fatalf("Backoff(%d) = %v, want within 25%% of %v", n, d, want)
			}
			seen[d] = true
		}
	}
	if len(seen) < 20 {
		t.Errorf("Backoff has no jitter: only %d distinct delays in 500", len(seen))
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	tries := 0
	err := fault.Retry(ctx, 0, func() error {
		if tries++; tries < 3 {
			return apierrors.NewTooManyRequests("slow down", 0)
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Errorf("a fault twice then success: err %v after %d tries, want nil after 3", err, tries)
	}

	tries = 0
	notFound := apierrors.NewNotFound(gr, "x")
	if err := fault.Retry(ctx, 0, func() error { tries++; return notFound }); !apierrors.IsNotFound(err) || tries != 1 {
		t.Errorf("a failure is returned at once: err %v after %d tries", err, tries)
	}

	tries = 0
	if err := fault.Retry(ctx, 2, func() error { tries++; return apierrors.NewServiceUnavailable("down") }); !apierrors.IsServiceUnavailable(err) || tries != 2 {
		t.Errorf("faults stop after the steps given: err %v after %d tries, want 503 after 2", err, tries)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	tries = 0
	if err := fault.Retry(short, 0, func() error { tries++; return apierrors.NewServiceUnavailable("down") }); !apierrors.IsServiceUnavailable(err) || short.Err() == nil {
		t.Errorf("faults are retried until the context ends: err %v, context %v", err, short.Err())
	}
}

// RetryFor retries faults until its window has passed, however many tries that takes, and
// returns a failure at once.
func TestRetryFor(t *testing.T) {
	ctx := context.Background()
	tries := 0
	start := time.Now()
	err := fault.RetryFor(ctx, 700*time.Millisecond, func() error { tries++; return apierrors.NewServiceUnavailable("down") })
	if took := time.Since(start); !apierrors.IsServiceUnavailable(err) || tries < 2 || took < 700*time.Millisecond || took > 3*time.Second {
		t.Errorf("faults for the whole window: err %v after %d tries in %s, want 503 after at least 2 tries in about 0.7 s", err, tries, took)
	}
	tries = 0
	if err := fault.RetryFor(ctx, time.Minute, func() error {
		if tries++; tries < 3 {
			return apierrors.NewTooManyRequests("slow", 0)
		}
		return nil
	}); err != nil || tries != 3 {
		t.Errorf("two faults then success: err %v after %d tries", err, tries)
	}
	tries = 0
	if err := fault.RetryFor(ctx, time.Minute, func() error { tries++; return apierrors.NewNotFound(gr, "x") }); !apierrors.IsNotFound(err) || tries != 1 {
		t.Errorf("a failure is returned at once: err %v after %d tries", err, tries)
	}
	tries = 0
	if err := fault.RetryFor(ctx, 0, func() error { tries++; return apierrors.NewServiceUnavailable("down") }); !apierrors.IsServiceUnavailable(err) || tries != 1 {
		t.Errorf("no window: one try, got err %v after %d tries", err, tries)
	}
}

// A Policy tries again what its Retriable says, however the error is classified otherwise.
func TestPolicyRetriable(t *testing.T) {
	ctx := context.Background()
	odd := errors.New("odd")
	tries := 0
	err := fault.Policy{Tries: 3, Base: time.Millisecond, Retriable: func(err error) bool { return errors.Is(err, odd) }}.Do(ctx, func() error {
		tries++
		return odd
	})
	if !errors.Is(err, odd) || tries != 3 {
		t.Errorf("an error the policy retries: %v after %d tries, want odd after 3", err, tries)
	}
	tries = 0
	err = fault.Policy{Tries: 3, Base: time.Millisecond, Retriable: func(err error) bool { return errors.Is(err, odd) }}.Do(ctx, func() error {
		tries++
		return apierrors.NewServiceUnavailable("down")
	})
	if !apierrors.IsServiceUnavailable(err) || tries != 1 {
		t.Errorf("a fault the policy does not retry: %v after %d tries, want 503 after 1", err, tries)
	}
}

// RetryLogged retries as Retry does and says in the log at each fault, and only at a fault,
// which request it tries again.
func TestRetryLogged(t *testing.T) {
	var lines []string
	ctx := log.IntoContext(context.Background(), funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}))
	tries := 0
	err := fault.RetryLogged(ctx, 0, "reading the thing", func() error {
		if tries++; tries < 3 {
			return apierrors.NewServiceUnavailable("down")
		}
		return nil
	})
	if err != nil || tries != 3 {
		t.Fatalf("a fault twice then success: err %v after %d tries, want nil after 3", err, tries)
	}
	if len(lines) != 2 {
		t.Fatalf("logged %d lines for two faults, want 2: %q", len(lines), lines)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"request"="reading the thing"`) {
			t.Errorf("the log line does not name the request: %s", l)
		}
	}

	lines, tries = nil, 0
	err = fault.RetryLogged(ctx, 0, "reading the thing", func() error { tries++; return apierrors.NewNotFound(gr, "x") })
	if !apierrors.IsNotFound(err) || tries != 1 || len(lines) != 0 {
		t.Errorf("a failure is returned at once and not logged as a fault: err %v after %d tries, %d lines", err, tries, len(lines))
	}

	lines, tries = nil, 0
	err = fault.RetryLogged(logr.NewContext(ctx, logr.Discard()), 2, "reading the thing", func() error { tries++; return apierrors.NewTooManyRequests("slow", 0) })
	if !apierrors.IsTooManyRequests(err) || tries != 2 || len(lines) != 0 {
		t.Errorf("faults stop after the steps given, logged to the context's own logger: err %v after %d tries, %d lines elsewhere", err, tries, len(lines))
	}
}

// Within returns what the call returns in its budget; past it, it stops waiting, even for a
// call that ignores its context, and says what was not done; a caller's own end wins.
func TestWithin(t *testing.T) {
	ctx := context.Background()
	v, err := fault.Within(ctx, time.Minute, "read", func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Errorf("a call in its budget: %d, %v; want 7, nil", v, err)
	}
	notFound := apierrors.NewNotFound(gr, "x")
	if _, err := fault.Within(ctx, time.Minute, "read", func(context.Context) (int, error) { return 0, notFound }); err != notFound {
		t.Errorf("a call's own error in its budget is returned as it is: %v", err)
	}

	// A call that ignores its context (a discovery read): not waited for past the budget.
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	_, err = fault.Within(ctx, 100*time.Millisecond, "planned", func(context.Context) (int, error) { <-release; return 1, nil })
	var be *fault.BudgetError
	if !errors.As(err, &be) || err.Error() != "not planned within 100ms" || !errors.Is(err, context.DeadlineExceeded) || !fault.IsTransient(err) {
		t.Errorf("a call past its budget: %v (%T), want a transient BudgetError %q", err, err, "not planned within 100ms")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waited %s for a call past its 100ms budget", d)
	}

	// A call that stops with its context: its error is kept beside the budget's.
	refused := errors.New("connection refused")
	_, err = fault.Within(ctx, 50*time.Millisecond, "read", func(c context.Context) (int, error) {
		<-c.Done()
		return 0, fmt.Errorf("listing CRDs: %w", refused)
	})
	if !errors.As(err, &be) || !errors.Is(err, refused) || err.Error() != "not read within 50ms: listing CRDs: connection refused" {
		t.Errorf("a call that ended with its budget: %v", err)
	}

	// The caller's context ends first: its error, not the budget's.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := fault.Within(cctx, time.Minute, "read", func(c context.Context) (int, error) { <-c.Done(); return 0, c.Err() }); !errors.Is(err, context.Canceled) || errors.As(err, &be) {
		t.Errorf("a caller's context that ended: %v, want context.Canceled", err)
	}

	// No budget: the call runs with the caller's context.
	if v, err := fault.Within(ctx, 0, "read", func(c context.Context) (int, error) { return 3, c.Err() }); v != 3 || err != nil {
		t.Errorf("no budget: %d, %v", v, err)
	}
}

// A reconcile that returned an error fifteen or twenty times in a row (a flaky hub) runs again
// within MaxRequeueDelay, not after controller-runtime's 1,000 s; its first retries still come
// at once, and a success starts it over.
func TestReconcileRateLimiterIsBounded(t *testing.T) {
	rl := fault.ReconcileRateLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "mysql-member3"}}
	if d := rl.When(req); d > 10*time.Millisecond {
		t.Errorf("the first retry waits %s, want about 5 ms", d)
	}
	var last time.Duration
	for range 20 {
		last = rl.When(req)
	}
	if last != fault.MaxRequeueDelay {
		t.Errorf("after 21 errors in a row a reconcile waits %s, want %s", last, fault.MaxRequeueDelay)
	}
	rl.Forget(req)
	if d := rl.When(req); d > 10*time.Millisecond {
		t.Errorf("after a success the next error waits %s, want about 5 ms again", d)
	}
}
