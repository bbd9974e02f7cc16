//go:build !unit

// Package realcharts runs real public operator charts through rewind end to end, as a user
// would: External Secrets Operator 0.15.1 -> 0.16.2 (the shared fixtures) and Kyverno
// 3.1.5 -> 3.2.9 (test/fixtures/charts). Each is installed through a Rollout, gets custom
// resources with status, is upgraded (ESO moves its storage versions from v1beta1 to v1), has
// objects changed at the new version, and is rolled back with `rewind rollback`; then every
// object and CRD (definition, storage version, storedVersions) must equal its state before the
// upgrade, and restoring again must write nothing.
package realcharts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1, Workloads: true}, &env)
}

var (
	setupOnce sync.Once
	hubC      client.Client
)

// setup installs rewind in the hub and registers the member with `rewind clusters add` once
// for the package, and runs the controller for the test until it ends.
func setup(t *testing.T) client.Client {
	t.Helper()
	setupOnce.Do(func() {
		c := testenv.HubClient(t, env.Hub.RESTConfig()) // installs rewind's CRDs
		m := env.Members[0]
		if out, err := cli.Run(context.Background(), "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
			t.Fatalf("clusters add: %v\n%s", err, out)
		}
		hubC = c
	})
	if hubC == nil {
		t.Fatal("hub setup failed")
	}
	// The controller runs as its shipped ServiceAccount; each test enables its namespace as a
	// user does (rewind namespace enable).
	mgr, err := controller.NewManager(testenv.ControllerConfig(t, env.Hub), controller.Options{
		MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, GatePoll: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	return hubC
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pin is a values path that sets an image tag (digest-pinned: rewind refuses mutable tags).
type pin struct {
	repo string
	path []string
}

// chartVersion is one release of a chart.
type chartVersion struct {
	dir, version, app string
}

// operatorChart describes a real chart and what the test does with it.
type operatorChart struct {
	operator, installNS string
	values              string // the kwok values file
	apiVersions         []string
	pins                []pin
	image               string // the repository of the release image (rewind's --image)
	from, to            chartVersion
	// memberCRDs are third-party CRD files a production member already runs (installed first).
	memberCRDs []string
	// kinds are the custom resource kinds compared before and after (their CRDs too).
	kinds []schema.GroupVersionResource
	// create makes custom resources (with status) under the old release; change changes and
	// adds some under the new one, at its versions.
	create, change func(t *testing.T, c *member.Cluster, crNS string)
}

func fakeDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// createRelease runs `rewind release create` for one version of the chart, its images pinned.
func (oc operatorChart) createRelease(t *testing.T, ns string, v chartVersion) string {
	t.Helper()
	values, err := chartutil.ReadValuesFile(oc.values)
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for _, p := range oc.pins {
		tag := v.app + "@" + fakeDigest(p.repo+":"+v.app)
		if err := unstructured.SetNestedField(values, tag, p.path...); err != nil {
			t.Fatal(err)
		}
		if p.repo == oc.image {
			image = p.repo + ":" + tag
		}
	}
	data, err := yaml.Marshal(map[string]any(values))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	name := oc.operator + "-" + strings.ReplaceAll(v.version, ".", "-")
	// The release version is the operator's (the chart's appVersion), not the chart's.
	args := []string{"release", "create", name, "--operator", oc.operator, "--version", strings.TrimPrefix(v.app, "v"),
		"--git-commit", fmt.Sprintf("%x", sha256.Sum256([]byte(v.app)))[:40], "--image", image,
		"--chart", v.dir, "--values", file, "--install-namespace", oc.installNS, "-n", ns, "--kubeconfig", env.Hub.Kubeconfig}
	for _, a := range oc.apiVersions {
		args = append(args, "--api-versions", a)
	}
	if out, err := cli.Run(t.Context(), args...); err != nil {
		t.Fatalf("release create %s: %v\n%s", name, err, out)
	}
	return name
}

// state is what the test records of the member: every custom resource of the chart's kinds
// and their CRDs, as the API server serves them.
type state struct {
	crs  map[string]*unstructured.Unstructured // by kind/namespace/name
	crds map[string]*unstructured.Unstructured // by name
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (oc operatorChart) read(t *testing.T, c *member.Cluster) state {
	t.Helper()
	st := state{crs: map[string]*unstructured.Unstructured{}, crds: map[string]*unstructured.Unstructured{}}
	for _, gvr := range oc.kinds {
		crd, err := c.Dynamic.Resource(crdGVR).Get(t.Context(), gvr.Resource+"."+gvr.Group, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.crds[crd.GetName()] = crd
		list, err := c.Dynamic.Resource(gvr).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			st.crs[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = u
		}
	}
	return st
}

// storage returns a CRD's storage version and status.storedVersions.
func storage(crd *unstructured.Unstructured) (string, []string) {
	stored, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
	vs, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range vs {
		if m, _ := v.(map[string]any); m["storage"] == true {
			return m["name"].(string), stored
		}
	}
	return "", stored
}

// diff lists how now differs from before: custom resources (spec, metadata, status, as the
// API server serves them) and CRDs (definition, storage version, storedVersions).
func diff(before, now state) []string {
	var out []string
	for k, b := range before.crs {
		n, ok := now.crs[k]
		switch {
		case !ok:
			out = append(out, k+" is missing")
		case !restore.Equal(b, n):
			out = append(out, k+" differs")
		}
	}
	for k := range now.crs {
		if _, ok := before.crs[k]; !ok {
			out = append(out, k+" was created since and is still there")
		}
	}
	for name, b := range before.crds {
		n := now.crds[name]
		bs, bst := storage(b)
		ns, nst := storage(n)
		if bs != ns || !slices.Equal(bst, nst) {
			out = append(out, fmt.Sprintf("CRD %s: storage %s storedVersions %v, want %s %v", name, ns, nst, bs, bst))
		}
		if !equality.Semantic.DeepEqual(b.Object["spec"], n.Object["spec"]) {
			out = append(out, "CRD "+name+" definition differs")
		}
	}
	slices.Sort(out)
	return out
}

func waitPhase(t *testing.T, c client.Client, ro *v1alpha1.Rollout, rel, phase string, timeout time.Duration) *v1alpha1.Rollout {
	t.Helper()
	cur := &v1alpha1.Rollout{}
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ro), cur); err != nil {
			return false, nil
		}
		return cur.Status.CurrentRelease == rel && cur.Status.Phase == phase, nil
	})
	if err != nil {
		out, _ := cli.Run(context.Background(), "rollout", "status", ro.Name, "-n", ro.Namespace, "--kubeconfig", env.Hub.Kubeconfig)
		t.Fatalf("rollout did not reach %s for %s:\n%s", phase, rel, out)
	}
	return cur
}

// run takes a chart through install, upgrade, rollback and a second restore.
func (oc operatorChart) run(t *testing.T) {
	hub := setup(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	if out, err := cli.Run(t.Context(), "namespace", "enable", ns, "--kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("namespace enable: %v\n%s", err, out)
	}
	m := env.Members[0]
	mc := testenv.Member(t, m)
	ctx := t.Context()
	for _, f := range oc.memberCRDs {
		objs, err := release.RenderManifests(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := apply.Objects(ctx, mc, objs, apply.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	from, to := oc.createRelease(t, ns, oc.from), oc.createRelease(t, ns, oc.to)

	// Install the old release through a Rollout.
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: oc.operator, Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: oc.operator, Release: from, InstallNamespace: oc.installNS,
		Waves:       []v1alpha1.Wave{{Name: "only", Clusters: []string{m.Name}, MaxConcurrency: 1}},
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 2 * time.Minute}},
		// Objects created after the snapshot go too: the member must equal its state before.
		PruneOnRollback: true,
	}}
	if err := hub.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, hub, ro, from, v1alpha1.RolloutSucceeded, 4*time.Minute)
	crNS := "crs-" + ns
	if err := mc.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: crNS}}); err != nil {
		t.Fatal(err)
	}
	oc.create(t, mc, crNS)
	before := oc.read(t, mc)
	if len(before.crs) == 0 {
		t.Fatal("no custom resources were created: the comparison would prove nothing")
	}

	// Upgrade, then change objects at the new version.
	ro = waitPhase(t, hub, ro, from, v1alpha1.RolloutSucceeded, time.Minute)
	ro.Spec.Release = to
	if err := hub.Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, hub, ro, to, v1alpha1.RolloutSucceeded, 4*time.Minute)
	upgraded := oc.read(t, mc)
	if d := diff(before, upgraded); len(d) == 0 {
		t.Log("the upgrade changed no CRD: only the custom resources changed below differ")
	}
	oc.change(t, mc, crNS)
	if d := diff(before, oc.read(t, mc)); len(d) == 0 {
		t.Fatal("the changes under the new release changed nothing: the rollback would prove nothing")
	}

	// Roll back, as a person does.
	if out, err := cli.Run(ctx, "rollback", ro.Name, "-n", ns, "--kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("rewind rollback: %v\n%s", err, out)
	}
	ro = waitPhase(t, hub, ro, from, v1alpha1.RolloutRolledBack, 4*time.Minute)
	after := oc.read(t, mc)
	if d := diff(before, after); len(d) > 0 {
		t.Fatalf("after the rollback, the member differs from its state before the upgrade:\n  %s", strings.Join(d, "\n  "))
	}
	if rec, err := member.ReadRecord(ctx, mc.Client, oc.operator); err != nil || rec == nil || rec.Release != from {
		t.Fatalf("record %+v (%v), want %s", rec, err, from)
	}

	// Restoring again writes nothing.
	tgt := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: ro.Name + "-" + m.Name}, tgt); err != nil {
		t.Fatal(err)
	}
	out, err := cli.Run(ctx, "snapshot", "restore", tgt.Spec.Snapshot, "--cluster", m.Name, "-n", ns, "--kubeconfig", env.Hub.Kubeconfig, "-o", "json")
	if err != nil {
		t.Fatalf("restoring %s again: %v\n%s", tgt.Spec.Snapshot, err, out)
	}
	if !strings.Contains(out, `"noOp": true`) {
		t.Fatalf("restoring %s again must write nothing:\n%s", tgt.Spec.Snapshot, out)
	}
	again := oc.read(t, mc)
	for k, u := range after.crs {
		if again.crs[k].GetResourceVersion() != u.GetResourceVersion() {
			t.Errorf("%s was written by the second restore", k)
		}
	}
	for k, u := range after.crds {
		if again.crds[k].GetResourceVersion() != u.GetResourceVersion() {
			t.Errorf("CRD %s was written by the second restore", k)
		}
	}
}

// create applies objects from YAML, then writes the status each one carries.
func createWithStatus(t *testing.T, c *member.Cluster, docs string) {
	t.Helper()
	for _, doc := range strings.Split(docs, "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		status, hasStatus := u.Object["status"]
		ri, _, err := c.ResourceClient(c.Dynamic, u)
		if err != nil {
			t.Fatal(err)
		}
		created, err := ri.Create(t.Context(), u, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		if hasStatus {
			created.Object["status"] = status
			if _, err := ri.UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("status of %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
	}
}

// update reads an object at apiVersion, changes it and writes it back (status too when
// mutate sets it).
func update(t *testing.T, c *member.Cluster, apiVersion, kind, ns, name string, mutate func(u *unstructured.Unstructured)) {
	t.Helper()
	probe := &unstructured.Unstructured{}
	probe.SetAPIVersion(apiVersion)
	probe.SetKind(kind)
	probe.SetNamespace(ns)
	ri, _, err := c.ResourceClient(c.Dynamic, probe)
	if err != nil {
		t.Fatal(err)
	}
	u, err := ri.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mutate(u)
	updated, err := ri.Update(t.Context(), u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("updating %s %s at %s: %v", kind, name, apiVersion, err)
	}
	if s, ok := u.Object["status"]; ok {
		updated.Object["status"] = s
		if _, err := ri.UpdateStatus(t.Context(), updated, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of %s %s at %s: %v", kind, name, apiVersion, err)
		}
	}
}

func readyStatus(msg string) string {
	return fmt.Sprintf(`status:
  conditions:
  - {type: Ready, status: "True", reason: Valid, message: %q, lastTransitionTime: "2026-11-30T10:00:00Z"}`, msg)
}
