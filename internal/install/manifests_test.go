package install_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/rbac"
)

// renderOnDisk renders the repository's config/<dir> with kustomize's Go API, as
// `kubectl apply -k config/<dir>` would.
func renderOnDisk(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "config", dir))
	if err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), root)
	if err != nil {
		t.Fatalf("kustomize build config/%s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func find(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetNamespace() == ns && u.GetName() == name {
			return u
		}
	}
	return nil
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfigDefault renders config/default from the repository with kustomize and checks
// what a production install needs of it.
func TestConfigDefault(t *testing.T) {
	objs := renderOnDisk(t, "default")

	// The binary embeds the same tree: `rewind install` applies what kustomize renders.
	embedded, err := install.Render()
	if err != nil {
		t.Fatal(err)
	}
	if len(embedded) != len(objs) {
		t.Fatalf("embedded config renders %d objects, the repository's %d", len(embedded), len(objs))
	}
	for i := range objs {
		if !equality.Semantic.DeepEqual(objs[i].Object, embedded[i].Object) {
			t.Errorf("%s %s differs between the repository's config and the embedded one", objs[i].GetKind(), objs[i].GetName())
		}
	}

	// Every CRD the controller watches, as generated into config/crd/bases: a hub installed
	// without one makes the controller exit when its informer cannot sync.
	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) < 7 {
		t.Fatalf("%d CRDs are embedded from config/crd/bases, want every rewind.dev kind (7 or more)", len(crds))
	}
	for _, crd := range crds {
		if find(objs, "CustomResourceDefinition", "", crd.GetName()) == nil {
			t.Errorf("config/default has no CRD %s (list it in config/crd/kustomization.yaml: make generate does)", crd.GetName())
		}
	}
	for _, want := range []struct{ kind, ns, name string }{
		{"Namespace", "", rbac.SystemNamespace},
		{"CustomResourceDefinition", "", "rollouts.rewind.dev"},
		{"ServiceAccount", rbac.SystemNamespace, rbac.ServiceAccount},
		{"ClusterRole", "", rbac.ControllerRole},
		{"Role", rbac.SystemNamespace, rbac.ControllerRole},
		{"ClusterRole", "", rbac.NamespaceRole},
		{"ClusterRole", "", "rewind-metrics-reader"},
		{"ClusterRoleBinding", "", rbac.ControllerRole},
		{"RoleBinding", rbac.SystemNamespace, rbac.ControllerRole},
		{"Deployment", rbac.SystemNamespace, "rewind-controller"},
		{"Service", rbac.SystemNamespace, "rewind-controller-metrics"},
		{"PodDisruptionBudget", rbac.SystemNamespace, "rewind-controller"},
	} {
		if find(objs, want.kind, want.ns, want.name) == nil {
			t.Errorf("config/default has no %s %s/%s", want.kind, want.ns, want.name)
		}
	}

	u := find(objs, "Deployment", rbac.SystemNamespace, "rewind-controller")
	if u == nil {
		t.FailNow()
	}
	d := convert[appsv1.Deployment](t, u)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != rbac.ServiceAccount {
		t.Errorf("serviceAccountName %q", pod.ServiceAccountName)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccompProfile RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Name != install.ControllerContainer || c.Image != "ghcr.io/rewind-dev/rewind-controller:dev" {
		t.Errorf("container %s image %s", c.Name, c.Image)
	}
	for _, a := range []string{"--leader-elect", "--metrics-secure=true"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("container securityContext %+v: want no privilege escalation, read-only root, capabilities drop ALL", sc)
	}
	// The probes hit the manager's health port, the one --health-probe-bind-address opens.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	healthAddr := argValue(c.Args, "--health-probe-bind-address")
	if healthAddr != fmt.Sprintf(":%d", ports["health"]) {
		t.Errorf("--health-probe-bind-address %q but the health port is %d", healthAddr, ports["health"])
	}
	if metrics := argValue(c.Args, "--metrics-bind-address"); metrics != fmt.Sprintf(":%d", ports["metrics"]) {
		t.Errorf("--metrics-bind-address %q but the metrics port is %d", metrics, ports["metrics"])
	}
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %s: %+v", name, p)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}
	// Capture spools go to TMPDIR, an emptyDir: the root filesystem is read-only.
	tmp := ""
	for _, e := range c.Env {
		if e.Name == "TMPDIR" {
			tmp = e.Value
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.MountPath != tmp {
			continue
		}
		for _, v := range pod.Volumes {
			mounted = mounted || (v.Name == m.Name && v.EmptyDir != nil && !m.ReadOnly)
		}
	}
	if tmp == "" || !mounted {
		t.Errorf("TMPDIR %q is not a writable emptyDir mount", tmp)
	}

	svc := convert[corev1.Service](t, find(objs, "Service", rbac.SystemNamespace, "rewind-controller-metrics"))
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
}

func argValue(args []string, flag string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// TestRBACIsLeastPrivilege checks the shipped roles: no wildcard anywhere, no verb that
// grants more than itself, and Secrets only in namespaced roles.
func TestRBACIsLeastPrivilege(t *testing.T) {
	objs := renderOnDisk(t, "default")
	member := renderOnDisk(t, "member")
	roles := 0
	for _, u := range append(objs, member...) {
		var rules []rbacv1.PolicyRule
		switch u.GetKind() {
		case "ClusterRole":
			rules = convert[rbacv1.ClusterRole](t, u).Rules
		case "Role":
			rules = convert[rbacv1.Role](t, u).Rules
		default:
			continue
		}
		roles++
		name := u.GetKind() + " " + u.GetName()
		isMember := slices.Contains(member, u)
		for _, r := range rules {
			for _, v := range r.Verbs {
				// The member role applies releases' RBAC: it needs escalate and bind (see
				// config/member/role.yaml). Nothing needs a wildcard verb.
				if v == "*" || v == "impersonate" || v == "deletecollection" || (!isMember && (v == "escalate" || v == "bind")) {
					t.Errorf("%s grants verb %q", name, v)
				}
			}
			if slices.Contains(r.NonResourceURLs, "*") {
				t.Errorf("%s has a wildcard URL: %+v", name, r)
			}
			if !isMember && (slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*")) {
				t.Errorf("%s has a wildcard group or resource: %+v", name, r)
			}
			if slices.Contains(r.Resources, "secrets") && u.GetKind() == "ClusterRole" && u.GetName() == rbac.ControllerRole {
				t.Errorf("the controller's ClusterRole grants Secrets cluster-wide: %+v", r)
			}
		}
	}
	if roles < 4 {
		t.Fatalf("found %d roles", roles)
	}
	// The hub roles bind to the controller's ServiceAccount only.
	for _, u := range objs {
		var subjects []rbacv1.Subject
		switch u.GetKind() {
		case "ClusterRoleBinding":
			subjects = convert[rbacv1.ClusterRoleBinding](t, u).Subjects
		case "RoleBinding":
			subjects = convert[rbacv1.RoleBinding](t, u).Subjects
		default:
			continue
		}
		if len(subjects) != 1 || subjects[0] != rbac.Subject() {
			t.Errorf("%s %s binds %+v, want the controller's ServiceAccount", u.GetKind(), u.GetName(), subjects)
		}
	}
}
