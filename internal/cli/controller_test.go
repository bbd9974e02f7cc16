//go:build !unit

package cli

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed/testenv"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestControllerAnswersProbes(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	probe, metrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, err := run(ctx, "controller", "--kubeconfig", env.Hub.Kubeconfig,
			"--health-probe-bind-address", probe, "--metrics-bind-address", metrics)
		done <- err
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	for _, path := range []string{"/healthz", "/readyz"} {
		var status int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			select {
			case err := <-done:
				t.Fatalf("rewind controller exited early: %v", err)
			default:
			}
			resp, err := hc.Get("http://" + probe + path)
			if err != nil {
				return false, nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
			return status == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("%s did not answer 200 (last: %d %q): %v", path, status, body, err)
		}
	}
	// Metrics are served over HTTPS (self-signed) to authenticated callers only.
	tlsClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the check is authentication, not the certificate
	}}
	var status int
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := tlsClient.Get("https://" + metrics + "/metrics")
		if err != nil {
			return false, nil // not listening yet
		}
		resp.Body.Close()
		status = resp.StatusCode
		return true, nil
	})
	if err != nil || status != http.StatusUnauthorized {
		t.Fatalf("metrics endpoint answered %d (%v) to a caller without a token, want 401", status, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rewind controller did not stop cleanly: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rewind controller did not stop within 30s of cancellation")
	}
}
