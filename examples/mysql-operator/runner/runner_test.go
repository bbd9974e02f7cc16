//go:build !unit

package runner_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/runner"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1, Workloads: true}, &env)
}

const installNS = "mysql-operator-system"

// install renders a release of the sample operator and applies it as a rollout would.
func install(t *testing.T, c client.Client, version string, args ...string) {
	t.Helper()
	p, err := mysqloperator.Write(t.TempDir(), version, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := p.Render(installNS)
	if err != nil {
		t.Fatal(err)
	}
	if err := release.CheckImage(objs, p.Build.Image()); err != nil {
		t.Fatal(err)
	}
	if _, err := apply.Objects(t.Context(), testenv.Member(t, env.Members[0]), objs, apply.Options{Namespace: installNS}); err != nil {
		t.Fatal(err)
	}
}

func waitRunning(t *testing.T, r *runner.Runner, member, version string, failing bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		cur, ok := r.Current(member)
		hasFlag := false
		for _, a := range cur.Args {
			hasFlag = hasFlag || a == "--fail-reconcile"
		}
		return ok && cur.Build.Version == version && hasFlag == failing, nil
	})
	if err != nil {
		cur, _ := r.Current(member)
		t.Fatalf("the runner does not run mysql-operator %s (failing=%v) on %s: runs %+v", version, failing, member, cur)
	}
}

// waitReady waits until every MySQLCluster in ns, read at version, has the Ready condition
// with status want for its current generation.
func waitReady(t *testing.T, dyn dynamic.Interface, ns, version string, n int, want metav1.ConditionStatus) {
	t.Helper()
	if err := operator.WaitSettled(t.Context(), dyn, ns, version, n, want, "", 90*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestRunnerRunsTheInstalledReleaseAndItsConversionWebhook(t *testing.T) {
	m := env.Members[0]
	c := testenv.HubClient(t, m.RESTConfig())
	dyn := dynamic.NewForConfigOrDie(m.RESTConfig())
	r, err := runner.Start(t.Context(), []runner.Member{{Cluster: testenv.Member(t, m)}}, runner.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	ns := testenv.Namespace(t, m.RESTConfig())

	// Release 1.0.0: v1alpha1 objects get their children and become Ready.
	install(t, c, "v1")
	waitRunning(t, r, m.Name, "1.0.0", false)
	for i := range 3 {
		u := operator.NewCluster("v1alpha1", ns, fmt.Sprintf("db-%d", i), operator.Spec{Replicas: int32(1 + i), MySQLVersion: "8.0", Config: "max_connections=100"})
		if _, err := dyn.Resource(operator.GVR("v1alpha1")).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, dyn, ns, "v1alpha1", 3, metav1.ConditionTrue)
	sts, err := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}).Namespace(ns).Get(t.Context(), "db-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _, _ := unstructured.NestedInt64(sts.Object, "status", "readyReplicas"); ready != 3 {
		t.Fatalf("StatefulSet db-2 has %d ready replicas, want 3", ready)
	}
	for _, res := range []string{"services", "configmaps", "secrets"} {
		name := map[string]string{"services": "db-0", "configmaps": "db-0-config", "secrets": "db-0-credentials"}[res]
		if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: res}).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{}); err != nil {
			t.Fatalf("child %s %s: %v", res, name, err)
		}
	}

	// Release 3.0.0 (OLM bundle): v1 storage with spec.mysqlVersion, converted by the webhook
	// this process serves; the objects stored at v1alpha1 read as v1.
	install(t, c, "v3")
	waitRunning(t, r, m.Name, "3.0.0", false)
	waitReady(t, dyn, ns, "v1", 3, metav1.ConditionTrue)
	got, err := dyn.Resource(operator.GVR("v1")).Namespace(ns).Get(t.Context(), "db-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(got.Object, "spec", "mysqlVersion"); v != "8.0" {
		t.Fatalf("db-1 read at v1 has spec.mysqlVersion %q, want 8.0 (converted from spec.version)", v)
	}
	if cfg, _, _ := unstructured.NestedString(got.Object, "spec", "config"); cfg != "max_connections=100" {
		t.Fatalf("the deprecated spec.config was not kept: %q", cfg)
	}
	u := operator.NewCluster("v1", ns, "db-new", operator.Spec{MySQLVersion: "8.4"})
	if _, err := dyn.Resource(operator.GVR("v1")).Namespace(ns).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old, err := dyn.Resource(operator.GVR("v1alpha1")).Namespace(ns).Get(t.Context(), "db-new", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(old.Object, "spec", "version"); v != "8.4" {
		t.Fatalf("db-new read at v1alpha1 has spec.version %q, want 8.4", v)
	}
	if s, _, _ := unstructured.NestedString(old.Object, "spec", "backup", "schedule"); s != operator.DefaultBackupSchedule {
		t.Fatalf("db-new read at v1alpha1 lost spec.backup.schedule (got %q): unknown fields must be kept", s)
	}
	waitReady(t, dyn, ns, "v1", 4, metav1.ConditionTrue)

	// A 3.0.0 build started with --fail-reconcile really fails: Ready turns False.
	install(t, c, "v3", "--fail-reconcile")
	waitRunning(t, r, m.Name, "3.0.0", true)
	waitReady(t, dyn, ns, "v1", 4, metav1.ConditionFalse)

	r.Stop()
	if cur, ok := r.Current(m.Name); ok {
		t.Fatalf("after Stop the runner still runs %+v", cur)
	}
}
