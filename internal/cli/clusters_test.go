//go:build !unit

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// startManager runs the rewind manager against the shared hub until the test ends.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := controller.NewManager(env.Hub.RESTConfig(), controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
}

// memberClient returns a client for a member of the shared testbed.
func memberClient(t *testing.T, m *testbed.Cluster) client.Client {
	t.Helper()
	c, err := client.New(m.RESTConfig(), client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// installDirectly puts a release on a member as a finished rollout would: its manifests
// applied and its installed-version record written.
func installDirectly(t *testing.T, m *testbed.Cluster, ns, relName string) {
	t.Helper()
	ctx := t.Context()
	rel, objs, err := release.Load(ctx, hubClient(t), ns, relName)
	if err != nil {
		t.Fatal(err)
	}
	mc := memberClient(t, m)
	if _, err := apply.Objects(ctx, testenv.Member(t, m), objs, apply.Options{Namespace: "widget-system"}); err != nil {
		t.Fatal(err)
	}
	err = member.WriteRecord(ctx, mc, member.Record{
		Operator: rel.Spec.Operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: "widget-system",
		Image: rel.Spec.Image, GitCommit: rel.Spec.GitCommit, Digest: rel.Spec.Digest,
	})
	if err != nil {
		t.Fatal(err)
	}
}

func waitMember(t *testing.T, name string, what string, cond func(*v1alpha1.MemberCluster) bool) *v1alpha1.MemberCluster {
	t.Helper()
	c := hubClient(t)
	mc := &v1alpha1.MemberCluster{}
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
			return false, nil
		}
		return cond(mc), nil
	})
	if err != nil {
		t.Fatalf("MemberCluster %s: %s did not happen: status %+v", name, what, mc.Status)
	}
	return mc
}

func reachable(mc *v1alpha1.MemberCluster) metav1ConditionStatus {
	cond := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable)
	if cond == nil {
		return ""
	}
	return metav1ConditionStatus(cond.Status)
}

type metav1ConditionStatus string

func TestClustersRegisterListAndCheck(t *testing.T) {
	hubClient(t)
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	startManager(t)
	for i, m := range env.Members {
		out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig,
			"--label", "env=test", "--label", "index="+string(rune('1'+i)), "--check-interval", "1s")
		if err != nil {
			t.Fatalf("clusters add %s: %v\n%s", m.Name, err, out)
		}
		if strings.Contains(out, "token") {
			t.Fatalf("clusters add must not print credentials:\n%s", out)
		}
	}
	for _, m := range env.Members {
		mc := waitMember(t, m.Name, "Reachable=True", func(mc *v1alpha1.MemberCluster) bool { return reachable(mc) == "True" })
		kubeSystem := &corev1.Namespace{}
		if err := memberClient(t, m).Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem); err != nil {
			t.Fatal(err)
		}
		if mc.Status.ClusterID != string(kubeSystem.UID) || !strings.HasPrefix(mc.Status.ServerVersion, "v1.37") {
			t.Errorf("%s: cluster ID %q (want %q), server version %q", m.Name, mc.Status.ClusterID, kubeSystem.UID, mc.Status.ServerVersion)
		}
	}

	// Install release widget-manifests (1.0.0) on every member, as a rollout would.
	src := releaseSources[0]
	if out, err := run(ctx, createArgs(ns, "widget-v1", src.version, src.image, src.args)...); err != nil {
		t.Fatalf("release create: %v\n%s", err, out)
	}
	for _, m := range env.Members {
		installDirectly(t, m, ns, "widget-v1")
	}
	for _, m := range env.Members {
		waitMember(t, m.Name, "installed widget-v1 mirrored", func(mc *v1alpha1.MemberCluster) bool {
			return len(mc.Status.Installed) == 1 && mc.Status.Installed[0].Release == "widget-v1" && mc.Status.Installed[0].Version == "1.0.0"
		})
	}
	out, err := run(ctx, append([]string{"clusters", "list"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("clusters list: %v\n%s", err, out)
	}
	for _, m := range env.Members {
		if !strings.Contains(out, m.Name) || strings.Count(out, "widget=1.0.0(widget-v1)") != len(env.Members) {
			t.Fatalf("clusters list should show every member with widget 1.0.0:\n%s", out)
		}
	}

	// A consistent fleet: no drift, exit status zero.
	checkArgs := append([]string{"clusters", "check", "--operator", "widget", "--expect", "widget-v1", "-o", "json"}, hubArgs(ns)...)
	out, err = run(ctx, checkArgs...)
	if err != nil {
		t.Fatalf("check of a consistent fleet must pass: %v\n%s", err, out)
	}
	var results []ClusterCheck
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatalf("check -o json: %v\n%s", err, out)
	}
	if len(results) != len(env.Members) {
		t.Fatalf("want %d results, got %d", len(env.Members), len(results))
	}
	for _, r := range results {
		if r.Status != CheckOK {
			t.Errorf("%s: %s %v", r.Cluster, r.Status, r.Reasons)
		}
	}

	// Change member2's operator image behind rewind's back.
	drifted := env.Members[1]
	mcl := memberClient(t, drifted)
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := mcl.Get(ctx, client.ObjectKey{Namespace: "widget-system", Name: "widget-operator"}, dep); err != nil {
		t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["image"] = "example.com/widget-operator:hotfix"
	_ = unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers")
	if err := mcl.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, append([]string{"clusters", "check", "--operator", "widget", "--expect", "widget-v1"}, hubArgs(ns)...)...)
	if err == nil {
		t.Fatalf("check must fail when a member drifted:\n%s", out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, drifted.Name+" ") {
			line = l
		}
		if strings.HasPrefix(l, env.Members[0].Name+" ") && !strings.Contains(l, CheckOK) {
			t.Errorf("member1 did not drift but shows: %s", l)
		}
	}
	if !strings.Contains(line, CheckDrift) || !strings.Contains(line, "example.com/widget-operator:hotfix") || !strings.Contains(line, "installed-version record says") {
		t.Fatalf("check must name %s and the reason, got:\n%s", drifted.Name, out)
	}

	// The same for a CRD changed behind rewind's back.
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	m1 := memberClient(t, env.Members[0])
	if err := m1.Get(ctx, client.ObjectKey{Name: "widgets.example.com"}, crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	extra := map[string]any{}
	for k, v := range versions[0].(map[string]any) {
		extra[k] = v
	}
	extra["name"], extra["storage"] = "v9", false
	_ = unstructured.SetNestedSlice(crd.Object, append(versions, extra), "spec", "versions")
	if err := m1.Update(ctx, crd); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, append([]string{"clusters", "check", "--operator", "widget", "--expect", "widget-v1"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(out, "CRD widgets.example.com serves [v1 v9]") {
		t.Fatalf("check must report the CRD drift on member1, got %v:\n%s", err, out)
	}
}

func TestUnreachableMemberDoesNotDisturbOthers(t *testing.T) {
	ctx := t.Context()
	hubClient(t)
	started := time.Now()
	startManager(t)
	for _, m := range env.Members {
		if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig, "--check-interval", "1s"); err != nil {
			t.Fatalf("clusters add: %v\n%s", err, out)
		}
	}
	for _, m := range env.Members {
		// Reachable=True may come from the reconciler's own check before the first probe: wait
		// for the probe's verdict, so that the last success below is the probe's. The probe of
		// this test's manager: the members are the package's, and the status an earlier test's
		// manager wrote stays (a probe success from before this manager probed the member let
		// the member go down before this prober had a verdict on it; the check then said so).
		waitMember(t, m.Name, "Reachable=True by the probe", func(mc *v1alpha1.MemberCluster) bool {
			return reachable(mc) == "True" && mc.Status.LastProbeSuccessTime != nil && mc.Status.LastProbeSuccessTime.After(started)
		})
	}
	lost, kept := env.Members[1], env.Members[0]
	lost.StopAPIServer()
	t.Cleanup(func() {
		if err := lost.StartAPIServer(context.Background()); err != nil {
			t.Errorf("restarting %s: %v", lost.Name, err)
		}
	})
	mc := waitMember(t, lost.Name, "Reachable=False", func(mc *v1alpha1.MemberCluster) bool { return reachable(mc) == "False" })
	cond := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable)
	if cond.Reason != v1alpha1.ReasonUnreachable || !strings.Contains(cond.Message, "health probe of API server "+lost.Server) {
		t.Errorf("the unreachable condition should say which server's probe fails: %s: %s", cond.Reason, cond.Message)
	}
	if mc.Status.ConsecutiveProbeFailures < 3 || mc.Status.LastProbeSuccessTime == nil {
		t.Errorf("the status should count the failed probes and keep the last success: %+v", mc.Status)
	}
	// The other member keeps being checked and stays reachable.
	before := waitMember(t, kept.Name, "reachable", func(mc *v1alpha1.MemberCluster) bool { return reachable(mc) == "True" }).Status.LastCheckTime
	waitMember(t, kept.Name, "re-checked while the other member is down", func(mc *v1alpha1.MemberCluster) bool {
		return reachable(mc) == "True" && mc.Status.LastCheckTime.After(before.Time)
	})
	// And it comes back.
	if err := lost.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	waitMember(t, lost.Name, "Reachable=True again", func(mc *v1alpha1.MemberCluster) bool { return reachable(mc) == "True" })
}

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

func loadRelease(t *testing.T, ns, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured) {
	t.Helper()
	rel, objs, err := release.Load(t.Context(), hubClient(t), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return rel, objs
}

// installObjects applies a release's manifests into namespace and writes the record.
func installObjects(t *testing.T, m *testbed.Cluster, objs []*unstructured.Unstructured, namespace string, rel *v1alpha1.OperatorRelease) {
	t.Helper()
	mc := memberClient(t, m)
	if _, err := apply.Objects(t.Context(), testenv.Member(t, m), objs, apply.Options{Namespace: namespace}); err != nil {
		t.Fatal(err)
	}
	err := member.WriteRecord(t.Context(), mc, member.Record{
		Operator: rel.Spec.Operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: namespace,
		Image: rel.Spec.Image, GitCommit: rel.Spec.GitCommit, Digest: rel.Spec.Digest,
	})
	if err != nil {
		t.Fatal(err)
	}
}
