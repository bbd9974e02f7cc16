//go:build !unit

package testbed_test

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// TestHubPriorityAndFairness starts a hub whose API server runs as a cluster's does by default
// (Options.HubPriorityAndFairness): its answers say which FlowSchema classified the request;
// the package's testbed, which runs without, says none.
func TestHubPriorityAndFairness(t *testing.T) {
	tb, err := testbed.Start(t.Context(), testbed.Options{Members: 0, HubPriorityAndFairness: true, BinDir: binDir(t), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Stop() })
	if fs, _, _ := testenv.PriorityOf(t, tb.Hub.RESTConfig(), "/api/v1/namespaces/default"); fs == "" {
		t.Error("the hub with priority and fairness names no FlowSchema in its answer")
	}
	if fs, _, _ := testenv.PriorityOf(t, env.Hub.RESTConfig(), "/api/v1/namespaces/default"); fs != "" {
		t.Errorf("the hub without priority and fairness names FlowSchema %s in its answer", fs)
	}
}
