package cli

import (
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// TestPartialDiscoveryIsNoMissingAPI: the REST mapper's discovery that failed for one group
// version with a 404 and for another with a fault (a 503 of a hub restarting) is a
// meta.NoMatchError too (controller-runtime turns the 404 into one); it is a fault, and the
// command must not advise to install what the hub serves. A discovery whose versions all
// answered 404 is a missing API.
func TestPartialDiscoveryIsNoMissingAPI(t *testing.T) {
	gr := schema.GroupResource{Group: "rewind.dev", Resource: "snapshots"}
	v1 := schema.GroupVersion{Group: "rewind.dev", Version: "v1alpha1"}
	v2 := schema.GroupVersion{Group: "rewind.dev", Version: "v1beta1"}
	for _, tc := range []struct {
		name    string
		failed  apiutil.ErrResourceDiscoveryFailed
		missing bool
	}{
		{"every version 404", apiutil.ErrResourceDiscoveryFailed{v1: apierrors.NewNotFound(gr, ""), v2: apierrors.NewNotFound(gr, "")}, true},
		{"a 404 and a 503", apiutil.ErrResourceDiscoveryFailed{v1: apierrors.NewNotFound(gr, ""), v2: apierrors.NewServiceUnavailable("restarting")}, false},
		{"a no-match and a 503", apiutil.ErrResourceDiscoveryFailed{v1: &meta.NoResourceMatchError{PartialResource: v1.WithResource("")}, v2: apierrors.NewServiceUnavailable("restarting")}, false},
		{"a 503", apiutil.ErrResourceDiscoveryFailed{v1: apierrors.NewServiceUnavailable("restarting")}, false},
	} {
		err := fmt.Errorf("failed to get API group resources: %w", &tc.failed)
		if got := isMissingAPI(err); got != tc.missing {
			t.Errorf("%s: missing API %v, want %v (no match: %v)", tc.name, got, tc.missing, meta.IsNoMatchError(err))
		}
	}
}
