//go:build !unit

package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// isMissingAPI tells, by type, a cluster that does not serve rewind.dev (a member has no
// rewind CRDs: its API server answers the path with a bare 404) from a missing object of a
// served kind, on a real API server.
func TestIsMissingAPIOnARealAPIServer(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(v1alpha1.GroupVersion.WithKind("MemberCluster"), meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersion{Version: "v1"}.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	// A member's API server (through its fault proxy, which injects nothing here).
	c, err := client.New(env.Members[0].RESTConfig(), client.Options{Scheme: hubScheme, Mapper: mapper})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Get(t.Context(), client.ObjectKey{Name: "nope"}, &v1alpha1.MemberCluster{})
	if !apierrors.IsNotFound(err) || !isMissingAPI(err) {
		t.Fatalf("a kind the cluster does not serve: want a missing API, got %v (missing API: %v)", err, isMissingAPI(err))
	}
	err = c.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: "nope"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) || isMissingAPI(err) {
		t.Fatalf("a missing object of a served kind: want not found and no missing API, got %v (missing API: %v)", err, isMissingAPI(err))
	}
	if hubError(err) != err {
		t.Fatalf("hubError changed a missing object's error: %v", hubError(err))
	}

	// The command line pointed at a cluster without rewind says to install it.
	out, err := run(t.Context(), "snapshot", "list", "--kubeconfig", env.Members[0].Kubeconfig, "-n", "default")
	if err == nil || !strings.Contains(err.Error(), "run `rewind install` against it first") {
		t.Fatalf("snapshot list on a cluster without rewind: want the advice to install it, got %v\n%s", err, out)
	}
}
