package testenv

import (
	"context"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// PriorityOf makes one GET of path as cfg and returns the UIDs of the FlowSchema and the
// priority level the API server put the request in (its X-Kubernetes-PF-* response headers;
// empty from a server without priority and fairness), and the answer's status code. A 429, as
// while the server sets up its priority levels after it starts, is asked again for up to a
// minute: it is not a verdict.
func PriorityOf(t testing.TB, cfg *rest.Config, path string) (flowSchema, level string, status int) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		flowSchema, level, status = resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"), resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"), resp.StatusCode
		return status != http.StatusTooManyRequests, nil
	})
	if err != nil {
		t.Fatalf("GET %s: %v (last status %d)", path, err, status)
	}
	return flowSchema, level, status
}
