//go:build !unit

package install_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// helmTemplate renders charts/rewind with the Helm SDK as `helm template` does, in namespace
// ns with vals.
func helmTemplate(t *testing.T, ns string, vals map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.ClientOnly, inst.DryRun = true, true
	inst.ReleaseName, inst.Namespace = "rewind", ns
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	inst.APIVersions = chartutil.VersionSet{"monitoring.coreos.com/v1"}
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	return decodeYAML(t, rel.Manifest), nil
}

// chartDir is charts/rewind.
func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "charts", "rewind"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func rulesOf(t *testing.T, u *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	if u == nil {
		t.Fatal("role missing")
	}
	if u.GetKind() == "Role" {
		return convert[rbacv1.Role](t, u).Rules
	}
	return convert[rbacv1.ClusterRole](t, u).Rules
}

// TestHelmChart renders charts/rewind with the Helm SDK, checks it installs what config/default
// installs (same CRDs, same generated roles, same hardened Deployment), validates the output
// with a server-side dry run against the hub, and checks values.schema.json and the
// namespace guard.
func TestHelmChart(t *testing.T) {
	team := testenv.Namespace(t, env.Hub.RESTConfig())
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	objs, err := helmTemplate(t, rbac.SystemNamespace, map[string]any{
		"namespaces": []any{team},
		"image":      map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
		"metrics":    map[string]any{"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}},
	})
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	kust := renderOnDisk(t, "default")

	// Everything config/default installs, the chart installs (the chart adds a RoleBinding per
	// namespace and the monitoring objects).
	for _, k := range kust {
		if k.GetKind() == "Namespace" {
			continue // helm install --create-namespace makes it
		}
		if find(objs, k.GetKind(), k.GetNamespace(), k.GetName()) == nil {
			t.Errorf("the chart lacks %s %s/%s", k.GetKind(), k.GetNamespace(), k.GetName())
		}
	}
	for _, want := range []struct{ kind, ns, name string }{
		{"RoleBinding", team, rbac.NamespaceBindingName}, {"ServiceMonitor", rbac.SystemNamespace, "rewind-controller"},
		{"PrometheusRule", rbac.SystemNamespace, "rewind-controller"},
	} {
		if find(objs, want.kind, want.ns, want.name) == nil {
			t.Errorf("the chart lacks %s %s/%s", want.kind, want.ns, want.name)
		}
	}
	// The same CRDs, kept when the release goes.
	for _, k := range kust {
		if k.GetKind() != "CustomResourceDefinition" {
			continue
		}
		h := find(objs, k.GetKind(), "", k.GetName())
		if h == nil {
			continue
		}
		if !equality.Semantic.DeepEqual(h.Object["spec"], k.Object["spec"]) {
			t.Errorf("CRD %s differs from config/crd (run make generate)", k.GetName())
		}
		if h.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s is not kept on uninstall", k.GetName())
		}
	}
	// The same generated roles.
	for _, r := range []struct{ kind, ns, name string }{
		{"ClusterRole", "", rbac.ControllerRole}, {"Role", rbac.SystemNamespace, rbac.ControllerRole}, {"ClusterRole", "", rbac.NamespaceRole},
		{"ClusterRole", "", "rewind-metrics-reader"},
	} {
		if got, want := rulesOf(t, find(objs, r.kind, r.ns, r.name)), rulesOf(t, find(kust, r.kind, r.ns, r.name)); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s %s: the chart grants %+v, config/rbac %+v", r.kind, r.name, got, want)
		}
	}
	// The same hardened Deployment.
	hd := convert[appsv1.Deployment](t, find(objs, "Deployment", rbac.SystemNamespace, "rewind-controller"))
	kd := convert[appsv1.Deployment](t, find(kust, "Deployment", rbac.SystemNamespace, "rewind-controller"))
	hp, kp := hd.Spec.Template.Spec, kd.Spec.Template.Spec
	if *hd.Spec.Replicas != *kd.Spec.Replicas || hp.ServiceAccountName != kp.ServiceAccountName ||
		!equality.Semantic.DeepEqual(hp.SecurityContext, kp.SecurityContext) || !equality.Semantic.DeepEqual(hp.Volumes, kp.Volumes) {
		t.Errorf("the chart's pod differs from config/manager's:\n%+v\n%+v", hp, kp)
	}
	hc, kc := hp.Containers[0], kp.Containers[0]
	for what, eq := range map[string]bool{
		"securityContext": equality.Semantic.DeepEqual(hc.SecurityContext, kc.SecurityContext),
		"probes":          equality.Semantic.DeepEqual(hc.LivenessProbe, kc.LivenessProbe) && equality.Semantic.DeepEqual(hc.ReadinessProbe, kc.ReadinessProbe),
		"ports":           equality.Semantic.DeepEqual(hc.Ports, kc.Ports),
		"env":             equality.Semantic.DeepEqual(hc.Env, kc.Env),
		"mounts":          equality.Semantic.DeepEqual(hc.VolumeMounts, kc.VolumeMounts),
		"resources":       equality.Semantic.DeepEqual(hc.Resources, kc.Resources),
	} {
		if !eq {
			t.Errorf("the chart's container %s differs from config/manager's", what)
		}
	}
	for _, a := range kc.Args {
		if !slices.Contains(hc.Args, a) {
			t.Errorf("the chart's container lacks the argument %s", a)
		}
	}
	if want := "ghcr.io/rewind-dev/rewind-controller@sha256:" + strings.Repeat("ab", 32); hc.Image != want {
		t.Errorf("image.digest: the chart runs %s, want %s", hc.Image, want)
	}
	// The alerts are config/prometheus's.
	pr := find(objs, "PrometheusRule", rbac.SystemNamespace, "rewind-controller")
	kpr := renderOnDisk(t, "prometheus")
	if want := find(kpr, "PrometheusRule", rbac.SystemNamespace, "rewind-controller"); pr == nil || want == nil || !equality.Semantic.DeepEqual(pr.Object["spec"], want.Object["spec"]) {
		t.Error("the chart's PrometheusRule differs from config/prometheus")
	}

	// The hub accepts all of it (the monitoring kinds need the Prometheus Operator's CRDs,
	// which this hub does not have).
	for _, u := range objs {
		if u.GetAPIVersion() == "monitoring.coreos.com/v1" {
			continue
		}
		if err := serverDryRunApply(t.Context(), c, u); err != nil {
			t.Errorf("server dry run of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// values.schema.json rejects what would render a broken install; the namespace is guarded.
	for _, bad := range []struct {
		why    string
		ns     string
		vals   map[string]any
		expect string
	}{
		{"replicas must be a number", rbac.SystemNamespace, map[string]any{"replicas": "two"}, "replicas"},
		{"no unknown values", rbac.SystemNamespace, map[string]any{"replica": 3}, "replica"},
		{"a digest is sha256:<64 hex>", rbac.SystemNamespace, map[string]any{"image": map[string]any{"digest": "latest"}}, "digest"},
		{"durations are Go durations", rbac.SystemNamespace, map[string]any{"leaderElection": map[string]any{"leaseDuration": "15 seconds"}}, "leaseDuration"},
		{"namespaces are DNS labels", rbac.SystemNamespace, map[string]any{"namespaces": []any{"Team_A"}}, "namespaces"},
		{"rewind lives in rewind-system", "default", nil, "must be installed in the namespace rewind-system"},
	} {
		_, err := helmTemplate(t, bad.ns, bad.vals)
		if err == nil || !strings.Contains(err.Error(), bad.expect) {
			t.Errorf("%s: helm template must fail naming %q, got %v", bad.why, bad.expect, err)
		}
	}
}
