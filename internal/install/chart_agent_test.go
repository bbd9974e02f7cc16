//go:build !unit

package install_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

const (
	agentDeployment = "rewind-agent"
	// memberIdentity is config/member's ServiceAccount and role, which the agent runs under.
	memberIdentity = "rewind-member"
)

func agentValues(cluster string) map[string]any {
	return map[string]any{"agent": map[string]any{"enabled": true, "clusterName": cluster}}
}

// TestHelmChartAgent renders charts/rewind with agent.enabled and checks it installs what
// config/agent installs and nothing of the hub: the member identity of config/member with the
// same rules, the same hardened Deployment and state volume, no CRD, no controller, no hub
// RBAC. The member's API server (the testbed's, standing in) accepts all of it in a server
// dry run, and values that contradict the agent mode fail naming the value and the fix.
func TestHelmChartAgent(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	const cluster = "edge-berlin-7"
	vals := agentValues(cluster)
	vals["image"] = map[string]any{"digest": "sha256:" + strings.Repeat("cd", 32)}
	vals["nodeSelector"] = map[string]any{"site": "berlin"}
	objs, err := helmTemplate(t, rbac.SystemNamespace, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	kust := renderOnDisk(t, "agent")

	// The same objects as config/agent, no more (the namespace is helm's --create-namespace).
	for _, k := range kust {
		if k.GetKind() == "Namespace" {
			continue
		}
		if find(objs, k.GetKind(), k.GetNamespace(), k.GetName()) == nil {
			t.Errorf("the agent chart lacks %s %s/%s of config/agent", k.GetKind(), k.GetNamespace(), k.GetName())
		}
	}
	for _, h := range objs {
		if find(kust, h.GetKind(), h.GetNamespace(), h.GetName()) == nil {
			t.Errorf("the agent chart installs %s %s/%s, which config/agent does not (a member needs none of the hub)", h.GetKind(), h.GetNamespace(), h.GetName())
		}
	}
	for _, hub := range []struct{ kind, ns, name string }{
		{"Deployment", rbac.SystemNamespace, "rewind-controller"}, {"ClusterRole", "", rbac.ControllerRole},
		{"ServiceAccount", rbac.SystemNamespace, rbac.ServiceAccount}, {"CustomResourceDefinition", "", "rollouts.rewind.dev"},
	} {
		if find(objs, hub.kind, hub.ns, hub.name) != nil {
			t.Errorf("the agent chart installs the hub's %s %s", hub.kind, hub.name)
		}
	}

	// The member role: config/member's rules, bound to config/member's ServiceAccount only.
	if got, want := rulesOf(t, find(objs, "ClusterRole", "", memberIdentity)), rulesOf(t, find(kust, "ClusterRole", "", memberIdentity)); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("ClusterRole %s: the chart grants %+v, config/member %+v (run make generate)", memberIdentity, got, want)
	}
	hb := convert[rbacv1.ClusterRoleBinding](t, find(objs, "ClusterRoleBinding", "", memberIdentity))
	kb := convert[rbacv1.ClusterRoleBinding](t, find(kust, "ClusterRoleBinding", "", memberIdentity))
	if hb.RoleRef != kb.RoleRef || !equality.Semantic.DeepEqual(hb.Subjects, kb.Subjects) {
		t.Errorf("ClusterRoleBinding %s: the chart binds %+v to %+v, config/member %+v to %+v", memberIdentity, hb.RoleRef, hb.Subjects, kb.RoleRef, kb.Subjects)
	}

	// The same state volume and the same hardened Deployment, for this member.
	hv := convert[corev1.PersistentVolumeClaim](t, find(objs, "PersistentVolumeClaim", rbac.SystemNamespace, "rewind-agent-state"))
	kv := convert[corev1.PersistentVolumeClaim](t, find(kust, "PersistentVolumeClaim", rbac.SystemNamespace, "rewind-agent-state"))
	if !equality.Semantic.DeepEqual(hv.Spec, kv.Spec) {
		t.Errorf("the chart's state volume %+v differs from config/agent's %+v", hv.Spec, kv.Spec)
	}
	hd := convert[appsv1.Deployment](t, find(objs, "Deployment", rbac.SystemNamespace, agentDeployment))
	kd := convert[appsv1.Deployment](t, find(kust, "Deployment", rbac.SystemNamespace, agentDeployment))
	hp, kp := hd.Spec.Template.Spec, kd.Spec.Template.Spec
	if *hd.Spec.Replicas != *kd.Spec.Replicas || hd.Spec.Strategy.Type != kd.Spec.Strategy.Type || hp.ServiceAccountName != kp.ServiceAccountName ||
		!equality.Semantic.DeepEqual(hp.SecurityContext, kp.SecurityContext) || !equality.Semantic.DeepEqual(hp.Volumes, kp.Volumes) {
		t.Errorf("the chart's agent pod differs from config/agent's:\n%+v\n%+v", hp, kp)
	}
	if !equality.Semantic.DeepEqual(hd.Spec.Selector, kd.Spec.Selector) {
		t.Errorf("the chart's agent selects %+v, config/agent %+v", hd.Spec.Selector, kd.Spec.Selector)
	}
	if hp.NodeSelector["site"] != "berlin" {
		t.Errorf("nodeSelector is not applied to the agent: %+v", hp.NodeSelector)
	}
	hc, kc := hp.Containers[0], kp.Containers[0]
	for what, eq := range map[string]bool{
		"name":            hc.Name == kc.Name,
		"securityContext": equality.Semantic.DeepEqual(hc.SecurityContext, kc.SecurityContext),
		"mounts":          equality.Semantic.DeepEqual(hc.VolumeMounts, kc.VolumeMounts),
		"resources":       equality.Semantic.DeepEqual(hc.Resources, kc.Resources),
		"env":             len(hc.Env) == len(kc.Env) && len(hc.Env) == 1 && hc.Env[0].Name == kc.Env[0].Name,
	} {
		if !eq {
			t.Errorf("the chart's agent container %s differs from config/agent's", what)
		}
	}
	if hc.Env[0].Value != cluster {
		t.Errorf("the agent runs for cluster %q, want agent.clusterName %q", hc.Env[0].Value, cluster)
	}
	for _, a := range kc.Args {
		if !slices.Contains(hc.Args, a) {
			t.Errorf("the chart's agent lacks the argument %s", a)
		}
	}
	if want := "ghcr.io/rewind-dev/rewind-controller@sha256:" + strings.Repeat("cd", 32); hc.Image != want {
		t.Errorf("image.digest: the agent runs %s, want %s", hc.Image, want)
	}

	// The API server accepts all of it.
	for _, u := range objs {
		if err := serverDryRunApply(t.Context(), c, u); err != nil {
			t.Errorf("server dry run of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}

	// Values that contradict the agent mode fail, naming the value and the fix.
	with := func(cluster string, extra map[string]any) map[string]any {
		v := agentValues(cluster)
		for k, x := range extra {
			if k == "agent" {
				for ak, av := range x.(map[string]any) {
					v["agent"].(map[string]any)[ak] = av
				}
				continue
			}
			v[k] = x
		}
		return v
	}
	tooLong := strings.Repeat("a", v1alpha1.MaxPullMemberNameLength+1)
	for _, bad := range []struct {
		why    string
		ns     string
		vals   map[string]any
		expect []string
	}{
		{"an agent needs its member's name", rbac.SystemNamespace, with("", nil),
			[]string{"agent.clusterName is required", "--set agent.clusterName=NAME"}},
		{"the name is a DNS label", rbac.SystemNamespace, with("Edge_1", nil),
			[]string{`agent.clusterName "Edge_1"`, "DNS label"}},
		{"the name leaves room for its hub namespace", rbac.SystemNamespace, with(tooLong, nil),
			[]string{"agent.clusterName", fmt.Sprintf("at most %d characters", v1alpha1.MaxPullMemberNameLength)}},
		{"a name without agent.enabled would install the hub in a member", rbac.SystemNamespace,
			map[string]any{"agent": map[string]any{"clusterName": cluster}}, []string{"agent.enabled is false", "--set agent.enabled=true"}},
		{"an agent takes no hub namespaces", rbac.SystemNamespace, with(cluster, map[string]any{"namespaces": []any{"team-a"}}),
			[]string{"namespaces is a hub value", "remove namespaces"}},
		{"an agent has no ServiceMonitor", rbac.SystemNamespace, with(cluster, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}),
			[]string{"metrics.serviceMonitor", "set them to false"}},
		{"no unknown agent values", rbac.SystemNamespace, with(cluster, map[string]any{"agent": map[string]any{"clustername": "x"}}),
			[]string{"clustername"}},
		{"the bootstrap Secret is an object name", rbac.SystemNamespace, with(cluster, map[string]any{"agent": map[string]any{"bootstrapSecret": "Bootstrap Secret"}}),
			[]string{"bootstrapSecret"}},
		{"the state volume's size is a quantity", rbac.SystemNamespace, with(cluster, map[string]any{"agent": map[string]any{"persistence": map[string]any{"size": "16 MB"}}}),
			[]string{"size"}},
		{"the agent lives in rewind-system", "default", with(cluster, nil),
			[]string{"agent must be installed in the namespace rewind-system", "-n rewind-system"}},
	} {
		_, err := helmTemplate(t, bad.ns, bad.vals)
		for _, want := range bad.expect {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: helm template must fail saying %q, got %v", bad.why, want, err)
			}
		}
	}
	// A name of the longest length joins, so the chart takes it.
	if _, err := helmTemplate(t, rbac.SystemNamespace, agentValues(strings.Repeat("a", v1alpha1.MaxPullMemberNameLength))); err != nil {
		t.Errorf("a %d-character agent.clusterName is refused: %v", v1alpha1.MaxPullMemberNameLength, err)
	}
}

// TestHelmChartAgentInstall installs the chart in agent mode with the Helm SDK into a real API
// server (the testbed's hub standing in for a member) and asks it, as the agent's
// ServiceAccount, what the agent may do: what config/member/role.yaml says rewind does in a
// member, and nothing that grants more than that.
func TestHelmChartAgentInstall(t *testing.T) {
	ctx := t.Context()
	admin := env.Hub.RESTConfig()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t, rbac.SystemNamespace)
	chrt, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace, inst.CreateNamespace = "rewind-agent", rbac.SystemNamespace, true
	if _, err := inst.RunWithContext(ctx, chrt, agentValues("edge-berlin-7")); err != nil {
		t.Fatalf("helm install of the agent: %v", err)
	}
	t.Cleanup(func() {
		if _, err := action.NewUninstall(cfg).Run("rewind-agent"); err != nil {
			t.Errorf("helm uninstall of the agent: %v", err)
		}
	})

	d, err := cs.AppsV1().Deployments(rbac.SystemNamespace).Get(ctx, agentDeployment, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent's Deployment: %v", err)
	}
	if d.Spec.Template.Spec.ServiceAccountName != memberIdentity {
		t.Errorf("the agent runs as %q, want %s", d.Spec.Template.Spec.ServiceAccountName, memberIdentity)
	}
	if _, err := cs.AppsV1().Deployments(rbac.SystemNamespace).Get(ctx, "rewind-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the agent install must not install the controller: %v", err)
	}

	tr, err := cs.CoreV1().ServiceAccounts(rbac.SystemNamespace).CreateToken(ctx, memberIdentity, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for %s: %v", memberIdentity, err)
	}
	agentCfg := rest.AnonymousClientConfig(admin)
	agentCfg.BearerToken = tr.Status.Token
	as, err := kubernetes.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	sys := rbac.SystemNamespace
	cases := []accessCase{
		{why: "applies a release's Deployment", group: "apps", resource: "deployments", verb: "patch", ns: "default", allowed: true},
		{why: "scales the operator to 0 before a restore", group: "apps", resource: "deployments", sub: "scale", verb: "update", ns: "default", allowed: true},
		{why: "installs a release's CRDs", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", verb: "create", allowed: true},
		{why: "trims a CRD's storedVersions on rollback", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", sub: "status", verb: "update", allowed: true},
		{why: "restores a custom resource's status", group: "example.com", resource: "widgets", sub: "status", verb: "patch", ns: "default", allowed: true},
		{why: "snapshots the Secrets the operator created", resource: "secrets", verb: "list", ns: "default", allowed: true},
		{why: "writes its release records in rewind-system", resource: "configmaps", verb: "create", ns: sys, allowed: true},
		{why: "reads kube-system (the cluster ID)", resource: "namespaces", verb: "get", allowed: true},
		{why: "creates a release's roles it does not hold", group: "rbac.authorization.k8s.io", resource: "clusterroles", verb: "escalate", allowed: true},
		{why: "binds a release's roles", group: "rbac.authorization.k8s.io", resource: "clusterroles", verb: "bind", allowed: true},
		{why: "discovery", nonRes: "/apis", verb: "get", allowed: true},
		{why: "never impersonates a user", resource: "users", verb: "impersonate"},
		{why: "never impersonates a ServiceAccount", resource: "serviceaccounts", verb: "impersonate", ns: sys},
		{why: "never deletes a collection at once", resource: "configmaps", verb: "deletecollection", ns: sys},
		{why: "never approves certificate requests", group: "certificates.k8s.io", resource: "signers", verb: "approve"},
		{why: "never signs certificates", group: "certificates.k8s.io", resource: "signers", verb: "sign"},
		{why: "no wildcard verb", group: "apps", resource: "deployments", verb: "*", ns: sys},
		{why: "no non-resource URL but discovery", nonRes: "/metrics", verb: "get"},
	}
	assertAccess(t, as, cases)

	// Real requests: a release record is written; impersonating an admin is refused.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "release.chart-agent-", Namespace: sys}}
	created, err := as.CoreV1().ConfigMaps(sys).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Errorf("the agent cannot write a release record in %s: %v", sys, err)
	} else {
		t.Cleanup(func() {
			_ = cs.CoreV1().ConfigMaps(sys).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		})
	}
	imp := rest.CopyConfig(agentCfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: "system:admin", Groups: []string{"system:masters"}}
	is, err := kubernetes.NewForConfig(imp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := is.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the agent impersonating system:admin: want Forbidden, got %v", err)
	}
}

// helmConfig is a Helm SDK configuration for the testbed's hub in ns (releases stored in
// Secrets, as helm does by default).
func helmConfig(t *testing.T, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig := env.Hub.Kubeconfig
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := &action.Configuration{}
	if err := cfg.Init(flags, ns, "secret", func(format string, v ...any) { t.Logf(format, v...) }); err != nil {
		t.Fatal(err)
	}
	return cfg
}
