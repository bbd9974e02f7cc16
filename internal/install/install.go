// Package install puts rewind's own CRDs into a hub cluster.
package install

import (
	"context"
	"fmt"
	"io/fs"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/config"
)

// CRDs returns the rewind.dev CRDs embedded in the binary.
func CRDs() ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(config.CRDs, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, n := range names {
		b, err := config.CRDs.ReadFile(n)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return nil, fmt.Errorf("embedded CRD %s: %w", n, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// Hub applies the rewind.dev CRDs and the rewind-system namespace to the hub and waits until
// the CRDs are Established. It is idempotent.
func Hub(ctx context.Context, c client.Client) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName("rewind-system")
	return Apply(ctx, c, append(crds, ns), ApplyOptions{})
}
