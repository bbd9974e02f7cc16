//go:build !unit

package install_test

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// TestSamplesAreValid renders config/samples and has the hub validate each one against the
// CRDs' schemas and CEL rules with a server-side dry run.
func TestSamplesAreValid(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	kinds := map[string]bool{}
	for _, u := range renderOnDisk(t, "samples") {
		kinds[u.GetKind()] = true
		if u.GetNamespace() != "" {
			u.SetNamespace(ns) // the samples use team-a
		}
		if err := serverDryRunApply(t.Context(), c, u); err != nil {
			t.Errorf("sample %s %s is invalid: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for _, k := range []string{"MemberCluster", "OperatorRelease", "Rollout"} {
		if !kinds[k] {
			t.Errorf("config/samples has no %s", k)
		}
	}
}
