//go:build !unit

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/preflight"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// plannedCRD is the Gizmo CRD of the "planned" operator; modes lists spec.mode's enum.
func plannedCRD(modes string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.plan.example.com}
spec:
  group: plan.example.com
  names: {kind: Gizmo, plural: gizmos}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
              mode: {type: string, enum: [` + modes + `]}
`
}

// createPlannedRelease creates release name of operator "planned" shipping plannedCRD(modes)
// and a Secret holding password.
func createPlannedRelease(t *testing.T, ns, name, version, modes, password string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir+"/crd.yaml", plannedCRD(modes))
	writeFile(t, dir+"/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: planned-db}\nstringData: {password: "+password+"}\n")
	writeFile(t, dir+"/deploy.yaml", `apiVersion: apps/v1
kind: Deployment
metadata:
  name: planned-operator
spec:
  selector: {matchLabels: {app: planned-operator}}
  template:
    metadata: {labels: {app: planned-operator}}
    spec:
      containers:
      - name: manager
        image: example.com/planned-operator:`+testCommit+`
`)
	args := append([]string{"release", "create", name, "--operator", "planned", "--version", version,
		"--git-commit", testCommit, "--image", "example.com/planned-operator:" + testCommit, "--manifests", dir}, hubArgs(ns)...)
	if out, err := run(t.Context(), args...); err != nil {
		t.Fatalf("release create %s: %v\n%s", name, err, out)
	}
}

var crdGVK = apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")

var gizmos = schema.GroupVersionResource{Group: "plan.example.com", Version: "v1", Resource: "gizmos"}

// A release that narrows an enum live objects use: the plan names those objects and the field,
// counts what the snapshot would hold, and changes nothing on any cluster.
func TestPlanNamesRefusedObjects(t *testing.T) {
	c := hubClient(t)
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	for _, m := range env.Members {
		if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
			t.Fatalf("clusters add: %v\n%s", err, out)
		}
	}
	createPlannedRelease(t, ns, "planned-v1", "1.0.0", "fast, safe, slow", "hunter2-one")
	createPlannedRelease(t, ns, "planned-v2", "2.0.0", "fast, safe", "hunter2-two")

	// planned-v1 on both members; member1 has a slow Gizmo, member2 only a fast one.
	rel, objs := loadRelease(t, ns, "planned-v1")
	live := map[string][]string{
		env.Members[0].Name: {"slow", "fast"},
		env.Members[1].Name: {"fast"},
	}
	for _, m := range env.Members {
		installObjects(t, m, objs, "planned-system", rel)
		dyn := testenv.Member(t, m).Dynamic
		t.Cleanup(func() {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(crdGVK)
			crd.SetName("gizmos.plan.example.com")
			if err := memberClient(t, m).Delete(context.Background(), crd); client.IgnoreNotFound(err) != nil {
				t.Errorf("deleting the Gizmo CRD of %s: %v", m.Name, err)
			}
		})
		nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "plan-a"}}}
		if err := memberClient(t, m).Create(ctx, nsObj); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
		for _, mode := range live[m.Name] {
			g := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "plan.example.com/v1", "kind": "Gizmo",
				"metadata": map[string]any{"name": mode, "namespace": "plan-a"},
				"spec":     map[string]any{"size": int64(2), "mode": mode},
			}}
			if _, err := dyn.Resource(gizmos).Namespace("plan-a").Create(ctx, g, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planned"},
		Spec: v1alpha1.RolloutSpec{
			Operator: "planned", Release: "planned-v1", InstallNamespace: "planned-system", Paused: true,
			Waves: []v1alpha1.Wave{
				{Name: "canary", Clusters: []string{env.Members[0].Name}},
				{Name: "rest", Clusters: []string{env.Members[1].Name}},
			},
		},
	}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}

	// A snapshot rewind takes of member1 measures its capture rate; member2 has none.
	if out, err := run(ctx, append([]string{"snapshot", "take", "--cluster", env.Members[0].Name, "--operator", "planned", "--name", "measured"}, hubArgs(ns)...)...); err != nil {
		t.Fatalf("snapshot take: %v\n%s", err, out)
	}
	measured := &v1alpha1.Snapshot{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "measured"}, measured); err != nil {
		t.Fatal(err)
	}
	if measured.Status.CaptureDuration == nil || measured.Status.Bytes == 0 {
		t.Fatalf("the snapshot records no capture rate: %+v", measured.Status)
	}

	out, err := run(ctx, append([]string{"plan", "planned", "--release", "planned-v2", "-o", "json"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(err.Error(), "findings of error severity") {
		t.Fatalf("plan of a release that refuses live objects must fail naming the findings, got %v\n%s", err, out)
	}
	var plans []ClusterPreflight
	if err := json.Unmarshal([]byte(out), &plans); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, out)
	}
	if len(plans) != 2 || plans[0].Cluster != env.Members[0].Name || plans[0].Wave != "canary" || plans[1].Wave != "rest" {
		t.Fatalf("plans: %+v", plans)
	}
	for i, p := range plans {
		if p.Error != "" || p.Installed != "planned-v1 (1.0.0)" || len(p.CRDs) != 1 || p.CRDs[0].Action != preflight.ActionUpdate {
			t.Fatalf("%s: %+v", p.Cluster, p)
		}
		// The dry run of the apply: the CRD and the Secret change (its value never shown), the
		// Deployment does not.
		actions := map[string]string{}
		for _, ch := range p.Changes {
			actions[ch.Kind] = ch.Action
			if ch.Kind == "Secret" && strings.Join(ch.Diff, ",") != "~ .data.password: (redacted) -> (redacted)" {
				t.Errorf("%s: Secret diff %v", p.Cluster, ch.Diff)
			}
			if ch.Refused != "" {
				t.Errorf("%s: the dry run refused %s %s: %s", p.Cluster, ch.Kind, ch.Name, ch.Refused)
			}
		}
		if actions["CustomResourceDefinition"] != preflight.ActionUpdate || actions["Secret"] != preflight.ActionUpdate || actions["Deployment"] != preflight.ActionUnchanged {
			t.Errorf("%s: dry-run actions %v", p.Cluster, actions)
		}
		if want := len(live[p.Cluster]); p.Objects != want || p.Bytes == 0 {
			t.Errorf("%s: the snapshot would hold %d custom resources (%d bytes), want %d", p.Cluster, p.Objects, p.Bytes, want)
		}
		// The estimate comes from the rate rewind measured: member1's snapshot; none on member2.
		switch est := p.Snapshot; i {
		case 0:
			rate := float64(measured.Status.Bytes) / measured.Status.CaptureDuration.Seconds()
			want := time.Duration(float64(p.Bytes) / rate * float64(time.Second))
			if est.Measured == nil || est.Measured.Snapshot != "measured" || est.Bytes != p.Bytes || est.Duration != want {
				t.Errorf("%s: snapshot estimate %+v, want %v from snapshot measured (%d bytes in %v)", p.Cluster, est, want, measured.Status.Bytes, measured.Status.CaptureDuration.Duration)
			}
		case 1:
			if est.Measured != nil || est.Duration != 0 {
				t.Errorf("%s: no snapshot measured a rate there, yet the estimate is %+v", p.Cluster, est)
			}
		}
		// member1's slow Gizmo is refused, so the narrowed enum is an error there; member2's
		// only Gizmo is fast: the enum change breaks none of its objects, a warning.
		var refused []string
		var enum preflight.Severity
		for _, f := range p.Findings() {
			switch f.Check {
			case preflight.CheckObjectRefused:
				refused = append(refused, f.Object+" "+f.Path)
			case preflight.CheckEnumNarrowed:
				if f.Path == ".spec.mode" {
					enum = f.Severity
				}
			}
		}
		wantRefused := []string{"plan-a/slow .spec.mode", ""}[i]
		wantEnum := []preflight.Severity{preflight.SeverityError, preflight.SeverityWarning}[i]
		if strings.Join(refused, ",") != wantRefused || enum != wantEnum {
			t.Errorf("%s: refused %v (want %q), EnumNarrowed at .spec.mode: %q (want %q); findings %+v", p.Cluster, refused, wantRefused, enum, wantEnum, p.Findings())
		}
	}

	// The table says the same to a person.
	out, _ = run(ctx, append([]string{"plan", "planned", "--release", "planned-v2"}, hubArgs(ns)...)...)
	t.Logf("rewind plan planned --release planned-v2:\n%s", out)
	for _, s := range []string{"CLUSTER", "canary", "CRD gizmos.plan.example.com: Update (storage v1 -> v1), 2 custom resources", "ObjectRefused", "plan-a/slow .spec.mode", `Unsupported value: "slow"`,
		"apply (dry run): 0 to create, 2 to update, 1 unchanged", "Update Secret planned-system/planned-db", "~ .data.password: (redacted) -> (redacted)",
		"SNAPSHOT", "capture time about ", "(snapshot measured: ", "no measurement yet"} {
		if !strings.Contains(out, s) {
			t.Errorf("the plan table does not show %q:\n%s", s, out)
		}
	}
	for _, secret := range []string{"hunter2", "aHVudGVyMi"} {
		if strings.Contains(out, secret) {
			t.Errorf("the plan shows a Secret's value:\n%s", out)
		}
	}

	// Nothing changed: the members still serve the old enum, and the slow Gizmo is there.
	for _, m := range env.Members {
		crd := &unstructured.Unstructured{}
		crd.SetGroupVersionKind(crdGVK)
		if err := memberClient(t, m).Get(ctx, client.ObjectKey{Name: "gizmos.plan.example.com"}, crd); err != nil {
			t.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		enum, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "mode", "enum")
		if len(enum) != 3 {
			t.Errorf("%s: the plan changed the CRD: enum %v", m.Name, enum)
		}
	}

	// The release the clusters run: nothing to report, exit status zero.
	out, err = run(ctx, append([]string{"plan", "planned"}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "CRD gizmos.plan.example.com: Unchanged") {
		t.Fatalf("plan of the installed release: %v\n%s", err, out)
	}

	// Bad input is named with the fix.
	_, err = run(ctx, append([]string{"plan", "planned", "--release", "nope"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(err.Error(), `release "nope" not found in namespace `+ns) {
		t.Errorf("plan of a missing release: %v", err)
	}
	_, err = run(ctx, append([]string{"plan", "planned", "--max-objects", "0"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(err.Error(), "--max-objects must be at least 1") {
		t.Errorf("plan --max-objects 0: %v", err)
	}
	_, err = run(ctx, append([]string{"plan", "planned", "--member-timeout", "-1s"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(err.Error(), "--member-timeout must not be negative, got -1s (0: no limit)") {
		t.Errorf("plan --member-timeout -1s: %v", err)
	}
}
