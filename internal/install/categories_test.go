//go:build !unit

package install_test

import (
	"slices"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// kinds are rewind's hub resources: `kubectl get rewind` must list them all.
var kinds = []string{"memberclusters", "notificationpolicies", "notificationrecords", "operatorreleases", "rollouts", "rollouttargets", "snapshots", "snapshotschedules", "snapshotstores"}

func TestEveryCRDIsInTheRewindCategory(t *testing.T) {
	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var plurals []string
	for _, c := range crds {
		plural := c.Object["spec"].(map[string]any)["names"].(map[string]any)["plural"].(string)
		plurals = append(plurals, plural)
		cats, _ := c.Object["spec"].(map[string]any)["names"].(map[string]any)["categories"].([]any)
		if !slices.Contains(cats, any("rewind")) {
			t.Errorf("CRD %s is not in category rewind (categories %v): add categories=rewind to its +kubebuilder:resource marker", c.GetName(), cats)
		}
	}
	slices.Sort(plurals)
	if !slices.Equal(plurals, kinds) {
		t.Errorf("embedded CRDs %v, want %v", plurals, kinds)
	}
}

// TestKubectlGetRewindListsEveryKind expands the category "rewind" through the hub's discovery
// exactly as `kubectl get rewind` does.
func TestKubectlGetRewindListsEveryKind(t *testing.T) {
	testenv.HubClient(t, env.Hub.RESTConfig()) // installs the CRDs
	dc, err := discovery.NewDiscoveryClientForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	expander := restmapper.NewDiscoveryCategoryExpander(memory.NewMemCacheClient(dc))
	grs, ok := expander.Expand("rewind")
	if !ok {
		t.Fatal("the hub's discovery knows no category rewind")
	}
	var got []string
	for _, gr := range grs {
		if gr.Group != "rewind.dev" {
			t.Errorf("category rewind holds %s, which is not rewind's", gr)
			continue
		}
		got = append(got, gr.Resource)
	}
	slices.Sort(got)
	if !slices.Equal(got, kinds) {
		t.Errorf("kubectl get rewind would list %v, want %v", got, kinds)
	}
}
