//go:build !unit

package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// TestDemoVerificationCatchesACorruptedRestore runs the whole demo on its own testbed and, once
// the automatic rollback is done, corrupts what it restored on member2 (one MySQLCluster edited,
// one deleted). The demo must report ✓ for the members that are intact, ✗ naming both objects
// for member2, and fail.
func TestDemoVerificationCatchesACorruptedRestore(t *testing.T) {
	var out bytes.Buffer
	o := &demoOptions{members: 3, crs: 20, binDir: os.Getenv(testbed.BinDirEnv)}
	o.afterRollback = func(ctx context.Context, tb *testbed.Testbed) error {
		dyn, err := dynamic.NewForConfig(tb.Members[1].RESTConfig())
		if err != nil {
			return err
		}
		ri := dyn.Resource(operator.GVR("v1beta1")).Namespace(demoCRNS)
		cr, err := ri.Get(ctx, "orders-004", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(cr.Object, int64(9), "spec", "replicas"); err != nil {
			return err
		}
		if _, err := ri.Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return ri.Delete(ctx, "orders-011", metav1.DeleteOptions{})
	}
	err := runDemo(t.Context(), &out, o)
	text := out.String()
	if err == nil || !strings.Contains(err.Error(), "verification failed on member2") {
		t.Fatalf("the demo must fail its verification on member2, got err %v\n%s", err, text)
	}
	for _, want := range []string{
		"✓ member1: 20/20 MySQLClusters and the CRD equal their state before 3.0.0",
		"✓ member3: 20/20 MySQLClusters and the CRD equal their state before 3.0.0",
		"✗ member2: 2 differences",
		"MySQLCluster shop/orders-004 changed: spec.replicas: 2 -> 9",
		"MySQLCluster shop/orders-011 is missing",
		// The story itself: wave 2 failed its gate, everything was rolled back.
		"mysql-v3 failed and every changed cluster was rolled back to mysql-v2: cluster member",
		"failed at HealthGate",
		"rollout RolledBack   mysql-v3 -> mysql-v2",
		"member1  Restore  RolledBack",
		"$ rewind rollout status mysql",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", text)
	}
	if strings.Contains(text, "✗ member1") || strings.Contains(text, "✗ member3") {
		t.Errorf("intact members reported as different:\n%s", text)
	}
}
