//go:build !unit

// Package matrix is the version-jump test matrix of the sample MySQLCluster operator: every
// upgrade between its three releases (v1->v2, v2->v3, v1->v3) through a real rollout, each
// followed by a rollback (v2->v1, v3->v2, and v3->v1 directly), with the real operator of each
// release running against the member it is installed on.
package matrix

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/runner"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true}, &env)
}

const (
	crCount   = 100
	crNS      = "shop"
	installNS = "mysql-operator-system"
)

// rewind runs the CLI in-process against the hub.
func rewind(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := cli.Run(t.Context(), append(args, "--kubeconfig", env.Hub.Kubeconfig, "-n", ns)...)
	if err != nil {
		t.Fatalf("rewind %v: %v\n%s", args, err, out)
	}
	return out
}

var builtin = map[string]schema.GroupVersionResource{
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"Deployment":               {Group: "apps", Version: "v1", Resource: "deployments"},
	"StatefulSet":              {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"Service":                  {Version: "v1", Resource: "services"},
	"ConfigMap":                {Version: "v1", Resource: "configmaps"},
	"Secret":                   {Version: "v1", Resource: "secrets"},
	"ServiceAccount":           {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding":       {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":                     {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":              {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// TestVersionJumps runs the three upgrade/rollback pairs, one per member, in parallel.
func TestVersionJumps(t *testing.T) {
	hub := testenv.HubClient(t, env.Hub.RESTConfig())
	for _, m := range env.Members {
		// clusters add takes the member's kubeconfig as --kubeconfig, the hub's as --hub-kubeconfig.
		if out, err := cli.Run(t.Context(), "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
			t.Fatalf("rewind clusters add %s: %v\n%s", m.Name, err, out)
		}
	}
	members := make([]runner.Member, 0, len(env.Members))
	for _, m := range env.Members {
		members = append(members, runner.Member{Cluster: testenv.Member(t, m)})
	}
	r, err := runner.Start(t.Context(), members, runner.Options{Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	// The controller runs as its shipped ServiceAccount; each case enables its namespace.
	mgr, err := controller.NewManager(testenv.ControllerConfig(t, env.Hub), controller.Options{MetricsAddr: "0", ProbeAddr: "0", GatePoll: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = mgr.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	pairs := []struct{ from, to string }{{"1.0.0", "2.0.0"}, {"2.0.0", "3.0.0"}, {"1.0.0", "3.0.0"}}
	for i, p := range pairs {
		m := env.Members[i]
		t.Run(fmt.Sprintf("v%s-to-v%s-and-back", p.from[:1], p.to[:1]), func(t *testing.T) {
			t.Parallel()
			jump(t, hub, r, m, p.from, p.to)
		})
	}
}

// jump installs from on m with crCount MySQLClusters, upgrades to to, rolls back with
// `rewind rollback`, and checks that m is exactly as before the upgrade.
func jump(t *testing.T, hub client.Client, r *runner.Runner, m *testbed.Cluster, from, to string) {
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	rewind(t, ns, "namespace", "enable", ns)
	dir := t.TempDir()
	names := map[string]string{}
	for _, v := range []string{from, to} {
		p, err := mysqloperator.Write(dir, v)
		if err != nil {
			t.Fatal(err)
		}
		names[v] = "mysql-" + p.Build.Major()
		rewind(t, ns, p.ReleaseArgs(names[v])...)
	}
	oldB, _ := operator.BuildFor(from)
	newB, _ := operator.BuildFor(to)
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: names[from], InstallNamespace: installNS,
		Waves:       []v1alpha1.Wave{{Name: "only", Clusters: []string{m.Name}}},
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
	}}
	if err := hub.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, hub, ro, names[from], v1alpha1.RolloutSucceeded, 3*time.Minute)
	waitOperator(t, r, m.Name, from)

	dyn := dynamic.NewForConfigOrDie(m.RESTConfig())
	createCRs(t, dyn, oldB)
	waitAllReady(t, dyn, oldB.APIVersion, "mysql-operator "+from)

	// Upgrade.
	setRelease(t, hub, ro, names[to])
	got := waitPhase(t, hub, ro, names[to], v1alpha1.RolloutSucceeded, 5*time.Minute)
	waitOperator(t, r, m.Name, to)
	waitAllReady(t, dyn, newB.APIVersion, "mysql-operator "+to)
	if sv := storedVersions(t, dyn); !slices.Contains(sv, newB.APIVersion) {
		t.Fatalf("after the upgrade to %s, storedVersions %v lack %s", to, sv, newB.APIVersion)
	}
	// The upgrade's target names the snapshot it took before changing the cluster.
	tgt := &v1alpha1.RolloutTarget{}
	if err := hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "mysql-" + m.Name}, tgt); err != nil {
		t.Fatal(err)
	}
	pre := tgt.Status.Snapshot
	if pre == "" || tgt.Spec.Revision != got.Status.Revision {
		t.Fatalf("no pre-upgrade snapshot for %s of revision %d: %+v", m.Name, got.Status.Revision, tgt.Status)
	}

	// Rollback, as a person asks for it.
	out := rewind(t, ns, "rollback", "mysql")
	if !strings.Contains(out, names[from]) {
		t.Fatalf("rewind rollback:\n%s", out)
	}
	waitPhase(t, hub, ro, names[from], v1alpha1.RolloutRolledBack, 5*time.Minute)
	waitOperator(t, r, m.Name, from)

	// 1. Every object of the pre-upgrade snapshot (CRDs, the 100 CRs with status, their
	// children, the operator's objects) equals the live one.
	entries := snapshotEntries(t, hub, ns, pre)
	crs := 0
	var snapCRD *unstructured.Unstructured
	for _, e := range entries {
		if e.Object.GetKind() == operator.Kind {
			crs++
		}
		if e.Object.GetKind() == "CustomResourceDefinition" {
			snapCRD = e.Object
		}
	}
	if crs != crCount || snapCRD == nil {
		t.Fatalf("snapshot %s holds %d MySQLClusters and CRD %v; want %d and the CRD", pre, crs, snapCRD != nil, crCount)
	}
	var diffs []string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		diffs = diffs[:0]
		for _, e := range entries {
			if d := compare(ctx, dyn, e.Object); d != "" {
				diffs = append(diffs, d)
			}
		}
		return len(diffs) == 0, nil
	})
	if err != nil {
		t.Fatalf("after the rollback to %s, %d objects differ from snapshot %s; first: %v", from, len(diffs), pre, diffs[:min(5, len(diffs))])
	}
	// 2. The CRD's stored versions are the old ones.
	want, _, _ := unstructured.NestedStringSlice(snapCRD.Object, "status", "storedVersions")
	if sv := storedVersions(t, dyn); !slices.Equal(sv, want) || slices.Contains(sv, newB.APIVersion) {
		t.Fatalf("after the rollback to %s, storedVersions %v, want %v", from, sv, want)
	}
	// 3. The old operator reconciles the CRs: every one is Ready for its generation, and a
	// change made now is picked up.
	waitAllReady(t, dyn, oldB.APIVersion, "mysql-operator "+from)
	cr, err := dyn.Resource(operator.GVR(oldB.APIVersion)).Namespace(crNS).Get(t.Context(), "db-007", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cr.Object, int64(2), "spec", "replicas")
	if _, err := dyn.Resource(operator.GVR(oldB.APIVersion)).Namespace(crNS).Update(t.Context(), cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAllReady(t, dyn, oldB.APIVersion, "mysql-operator "+from)
	sts, err := dyn.Resource(builtin["StatefulSet"]).Namespace(crNS).Get(t.Context(), "db-007", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedInt64(sts.Object, "spec", "replicas"); n != 2 {
		t.Fatalf("the %s operator did not reconcile db-007 after the rollback: StatefulSet replicas %d", from, n)
	}
}

func createCRs(t *testing.T, dyn dynamic.Interface, b operator.Build) {
	t.Helper()
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": crNS}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(), nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range crCount {
		u := operator.NewCluster(b.APIVersion, crNS, fmt.Sprintf("db-%03d", i), operator.Spec{Replicas: 1, MySQLVersion: "8.0", Config: fmt.Sprintf("server_id=%d", i)})
		if _, err := dyn.Resource(operator.GVR(b.APIVersion)).Namespace(crNS).Create(t.Context(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// waitAllReady waits until all crCount MySQLClusters are Ready for their generation and their
// ConfigMaps say which operator reconciled them.
func waitAllReady(t *testing.T, dyn dynamic.Interface, version, by string) {
	t.Helper()
	if err := operator.WaitSettled(t.Context(), dyn, crNS, version, crCount, metav1.ConditionTrue, by, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}

func storedVersions(t *testing.T, dyn dynamic.Interface) []string {
	t.Helper()
	crd, err := dyn.Resource(builtin["CustomResourceDefinition"]).Get(t.Context(), "mysqlclusters.database.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sv, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	return sv
}

// compare says how the live object differs from the snapshot's (empty: equal).
func compare(ctx context.Context, dyn dynamic.Interface, want *unstructured.Unstructured) string {
	gvk := want.GroupVersionKind()
	res, ok := builtin[gvk.Kind]
	if gvk.Kind == operator.Kind {
		res, ok = operator.GVR(gvk.Version), true
	}
	if !ok {
		return fmt.Sprintf("%s %s: kind not compared by this test", gvk.Kind, want.GetName())
	}
	var ri dynamic.ResourceInterface = dyn.Resource(res)
	if want.GetNamespace() != "" {
		ri = dyn.Resource(res).Namespace(want.GetNamespace())
	}
	live, err := ri.Get(ctx, want.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("%s %s/%s: %v", gvk.Kind, want.GetNamespace(), want.GetName(), err)
	}
	if !restore.Equal(want, live) {
		return fmt.Sprintf("%s %s/%s differs", gvk.Kind, want.GetNamespace(), want.GetName())
	}
	return ""
}

func snapshotEntries(t *testing.T, hub client.Client, ns, name string) []snapshot.Entry {
	t.Helper()
	snap := &v1alpha1.Snapshot{}
	if err := hub.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, snap); err != nil {
		t.Fatal(err)
	}
	_, entries, err := (&snapshot.Hub{Client: hub}).Load(t.Context(), snap)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func setRelease(t *testing.T, hub client.Client, ro *v1alpha1.Rollout, rel string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &v1alpha1.Rollout{}
		if err := hub.Get(t.Context(), client.ObjectKeyFromObject(ro), cur); err != nil {
			return err
		}
		cur.Spec.Release = rel
		return hub.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitPhase(t *testing.T, hub client.Client, ro *v1alpha1.Rollout, rel, phase string, timeout time.Duration) *v1alpha1.Rollout {
	t.Helper()
	cur := &v1alpha1.Rollout{}
	err := wait.PollUntilContextTimeout(t.Context(), 300*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := hub.Get(ctx, client.ObjectKeyFromObject(ro), cur); err != nil {
			return false, nil
		}
		return cur.Status.CurrentRelease == rel && cur.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("rollout did not reach %s for %s: phase %s release %s, targets %+v, failures %+v, conditions %+v", phase, rel, cur.Status.Phase, cur.Status.CurrentRelease, cur.Status.Targets, cur.Status.Failures, cur.Status.Conditions)
	}
	return cur
}

func waitOperator(t *testing.T, r *runner.Runner, member, version string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cur, ok := r.Current(member)
		return ok && cur.Build.Version == version, nil
	})
	if err != nil {
		cur, _ := r.Current(member)
		t.Fatalf("%s does not run mysql-operator %s: %+v", member, version, cur)
	}
}
