//go:build !unit

package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// request is one request the receiver got.
type request struct {
	path, key, contentType, auth string
	body                         []byte
	at                           time.Time
	// status is what the receiver answered (0: it never answered; the client gave up).
	status int
}

// receiver is a real HTTP server (net/http on a loopback port) standing for a webhook, a
// CloudEvents broker and Slack, on the paths /audit, /broker and /slack. It records every
// request, and answers as the test says: fail the first requests of a path with 503, hang
// (never answer before the client's timeout) once or always.
type receiver struct {
	srv *httptest.Server

	mu   sync.Mutex
	reqs []request
	// fail503 is how many of a path's first requests get a 503; hangAfter503 says the next one
	// hangs once.
	fail503      map[string]int
	hangAfter503 map[string]bool
	// down makes every request hang: a receiver that accepts connections and never answers.
	down bool
	seen map[string]int
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{fail503: map[string]int{}, hangAfter503: map[string]bool{}, seen: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) url(path string) string { return rc.srv.URL + path }

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := request{path: r.URL.Path, key: r.Header.Get(v1alpha1.HeaderIdempotencyKey), contentType: r.Header.Get("Content-Type"),
		auth: r.Header.Get("Authorization"), body: body, at: time.Now()}
	rc.mu.Lock()
	n := rc.seen[r.URL.Path]
	rc.seen[r.URL.Path]++
	hang := rc.down || (n == rc.fail503[r.URL.Path] && rc.hangAfter503[r.URL.Path])
	status := http.StatusOK
	if n < rc.fail503[r.URL.Path] {
		status = http.StatusServiceUnavailable
	}
	if !hang {
		req.status = status
	}
	rc.reqs = append(rc.reqs, req)
	rc.mu.Unlock()
	if hang {
		// Never answer: the client's timeout ends the request.
		select {
		case <-r.Context().Done():
		case <-time.After(time.Minute):
		}
		return
	}
	w.WriteHeader(status)
}

// requests returns the requests to a path ("" for all).
func (rc *receiver) requests(path string) []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []request
	for _, r := range rc.reqs {
		if path == "" || r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// accepted counts the requests a path answered 2xx, by idempotency key.
func (rc *receiver) accepted(path string) map[string]int {
	out := map[string]int{}
	for _, r := range rc.requests(path) {
		if r.status >= 200 && r.status < 300 {
			out[r.key]++
		}
	}
	return out
}

// waitAccepted waits until a path accepted every key of want.
func (rc *receiver) waitAccepted(t *testing.T, path string, want []string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		got := rc.accepted(path)
		for _, k := range want {
			if got[k] == 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s did not accept every notification: got %v, want %v", path, keysOf(rc.accepted(path)), want)
	}
}

// bodyOf returns the body a path accepted for a key, decoded.
func (rc *receiver) bodyOf(t *testing.T, path, key string) (map[string]any, request) {
	t.Helper()
	for _, r := range rc.requests(path) {
		if r.key == key && r.status == http.StatusOK {
			var m map[string]any
			if err := json.Unmarshal(r.body, &m); err != nil {
				t.Fatalf("%s %s: body is not JSON: %v\n%s", path, key, err, r.body)
			}
			return m, r
		}
	}
	t.Fatalf("%s never accepted %s", path, key)
	return nil, request{}
}

func keysOf(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
