//go:build !unit

package testbed_test

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// flowSchemaOf returns the FlowSchema UID in the API server's answer to a GET as cfg (empty
// when the server runs without priority and fairness).
func flowSchemaOf(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/api/v1/namespaces/default")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID")
}

// TestHubPriorityAndFairness starts a hub whose API server runs as a cluster's does by default
// (Options.HubPriorityAndFairness): its answers say which FlowSchema classified the request;
// the package's testbed, which runs without, says none.
func TestHubPriorityAndFairness(t *testing.T) {
	tb, err := testbed.Start(t.Context(), testbed.Options{Members: 0, HubPriorityAndFairness: true, BinDir: binDir(t), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Stop() })
	if fs := flowSchemaOf(t, tb.Hub.RESTConfig()); fs == "" {
		t.Error("the hub with priority and fairness names no FlowSchema in its answer")
	}
	if fs := flowSchemaOf(t, env.Hub.RESTConfig()); fs != "" {
		t.Errorf("the hub without priority and fairness names FlowSchema %s in its answer", fs)
	}
}
