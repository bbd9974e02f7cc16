package member

import (
	"io"
	"net/http"
	"strconv"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/metrics"
)

// Request retries: how many times one request to a member is sent in all, and the first wait.
const (
	RequestTries     = 4
	requestRetryBase = 100 * time.Millisecond
	// maxRetryAfter bounds how long a Retry-After header makes a request wait here (client-go
	// waits for longer ones itself).
	maxRetryAfter = 5 * time.Second
)

// WithRetries returns a copy of cfg whose requests ride out faults as a member's do (see
// retryTransport): for clients that are not a Cluster, such as a pull member's agent's
// clients of the hub. name labels the retries' metric.
func WithRetries(cfg *rest.Config, name string) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &retryTransport{next: rt, cluster: name} })
	return cfg
}

// retryTransport sends a request to a member again, a few times with a jittered backoff, when
// it met a fault before its caller saw an answer: a transport error fault.IsTransient calls a
// fault (a reset or refused connection, a timeout, an HTTP/2 GOAWAY), or an answer of 429, 500,
// 502, 503 or 504 (a throttled request, an API server starting or shutting down, an etcd
// leader change, a webhook the API server could not call in time). One such blip then costs a
// request a moment instead of failing the step that made it, and a step of hundreds of
// requests gets through a member that fails a few of them.
//
// A request is sent again only when that is safe: its body can be sent again (none, or
// GetBody), and, for a POST (a create is not idempotent), only after an answer that says the
// server did not act on it (429, 503). GET, PUT (carrying the resourceVersion it read, or
// rewriting the same content), PATCH (server-side apply and merge patches of fixed content)
// and DELETE are idempotent: a second try of one that had an effect finds that effect (a
// conflict, NotFound), which its caller handles.
type retryTransport struct {
	next    http.RoundTripper
	cluster string
}

// WrappedRoundTripper lets client-go reach the transport below (utilnet.RoundTripperWrapper),
// to cancel a request on a client timeout as it does through its own wrappers.
var _ utilnet.RoundTripperWrapper = (*retryTransport)(nil)

func (t *retryTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	for try := 1; ; try++ {
		resp, err := t.next.RoundTrip(req)
		reason, ok := retryable(req, resp, err)
		if !ok || try >= RequestTries || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return resp, err
		}
		wait := fault.Backoff(try, requestRetryBase, 2*time.Second)
		if resp != nil {
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
				if after := time.Duration(s) * time.Second; after > maxRetryAfter {
					return resp, nil // long: client-go waits for it, within its own limits
				} else {
					wait = after
				}
			}
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		metrics.MemberRequestRetries.WithLabelValues(t.cluster, reason).Inc()
		timer := time.NewTimer(wait)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, req.Context().Err()
		case <-timer.C:
		}
		if req.GetBody != nil {
			body, berr := req.GetBody()
			if berr != nil {
				return nil, berr
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// retryable says whether a request that got resp or err may be sent again, and why.
func retryable(req *http.Request, resp *http.Response, err error) (string, bool) {
	if req.Context().Err() != nil {
		return "", false
	}
	if err != nil {
		if req.Method == http.MethodPost || !fault.IsTransient(err) {
			return "", false // a create may have been done before the connection broke
		}
		return "connection", true
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return strconv.Itoa(resp.StatusCode), true
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return strconv.Itoa(resp.StatusCode), req.Method != http.MethodPost
	}
	return "", false
}
