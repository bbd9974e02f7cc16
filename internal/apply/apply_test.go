//go:build !unit

package apply_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var env *testbed.Testbed

func TestMain(m *testing.M) { testenv.Main(m, testbed.Options{}, &env) }

// The install namespace is created only when a stage being applied puts an object in it: a
// target's CRD step, or a stage without objects, does not ask the member to create it (each
// such request costs a round trip per stage per cluster).
func TestObjectsCreatesTheNamespaceOnlyWhenAStageNeedsIt(t *testing.T) {
	cl := testenv.Member(t, env.Hub)
	dep := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
`), &dep.Object); err != nil {
		t.Fatal(err)
	}
	objs := []*unstructured.Unstructured{testfixture.MySQLCRD(), dep}
	const ns = "apply-namespace-test"
	exists := func() bool {
		err := cl.Client.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, stages := range [][]apply.Stage{{apply.StageCRDs}, {apply.StageNamespaces, apply.StageRBAC}, {apply.StageWorkloads}} {
		if _, err := apply.Objects(t.Context(), cl, objs, apply.Options{Namespace: ns, Stages: stages}); err != nil {
			t.Fatal(err)
		}
		if exists() {
			t.Fatalf("applying stages %v (no object in %s) created the namespace", stages, ns)
		}
	}
	applied, err := apply.Objects(t.Context(), cl, objs, apply.Options{Namespace: ns, Stages: []apply.Stage{apply.StageConfig}})
	if err != nil {
		t.Fatal(err)
	}
	if !exists() || len(applied) != 1 || applied[0].GetNamespace() != ns {
		t.Fatalf("the config stage must create %s and apply the ConfigMap in it: %v", ns, applied)
	}
}
