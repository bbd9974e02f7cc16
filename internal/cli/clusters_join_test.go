//go:build !unit

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
)

// joinMember runs `rewind clusters join` for name and returns the hub configuration of the
// bootstrap kubeconfig it wrote.
func joinMember(t *testing.T, name string, extra ...string) *rest.Config {
	t.Helper()
	c := hubClient(t) // the hub's CRDs installed, whichever test runs first
	file := filepath.Join(t.TempDir(), name+".bootstrap.yaml")
	args := append([]string{"clusters", "join", name, "--bootstrap-kubeconfig", file, "--kubeconfig", env.Hub.Kubeconfig}, extra...)
	out, err := run(t.Context(), args...)
	if err != nil {
		t.Fatalf("clusters join %s: %v\n%s", name, err, out)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the bootstrap kubeconfig has mode %v, want 0600", fi.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken == "" || strings.Contains(out, cfg.BearerToken) {
		t.Fatalf("join must write the token to the file and never print it:\n%s", out)
	}
	t.Cleanup(func() { _, _ = join.Leave(context.Background(), c, name) })
	return cfg
}

// exchange trades a bootstrap token for the agent's credential, retrying faults only.
func exchange(t *testing.T, bootstrap *rest.Config, name string) *join.Credential {
	t.Helper()
	cred, err := join.Exchange(t.Context(), bootstrap, name, time.Hour, nil)
	if err != nil {
		t.Fatalf("exchanging the bootstrap token of %s: %v", name, err)
	}
	return cred
}

// refusedWithin waits until fn fails with a *join.RefusedError of reason: the hub's
// authenticator sees a deleted ServiceAccount a moment after its deletion.
func refusedWithin(t *testing.T, what, reason string, fn func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = fn()
		var re *join.RefusedError
		return errors.As(last, &re) && re.Reason == reason, nil
	})
	if err != nil {
		t.Fatalf("%s: want refused (%s), got %v", what, reason, last)
	}
	if !strings.Contains(last.Error(), "rewind clusters join") {
		t.Errorf("%s: the error must say how to get a new token: %v", what, last)
	}
}

func getMember(t *testing.T, name string) *v1alpha1.MemberCluster {
	t.Helper()
	mc := &v1alpha1.MemberCluster{}
	if err := hubClient(t).Get(t.Context(), client.ObjectKey{Name: name}, mc); err != nil {
		t.Fatal(err)
	}
	return mc
}

// TestJoinExchangeRenewLeave: a join gives a single-use bootstrap token; the agent trades it
// for its credential and renews that; a reused, replaced or foreign token is refused; leave
// revokes the credential and removes the member's identity.
func TestJoinExchangeRenewLeave(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	const name = "join-edge-a"
	boot := joinMember(t, name, "--label", "env=edge")

	mc := getMember(t, name)
	a := mc.Status.Agent
	if mc.Spec.Mode != v1alpha1.ModePull || mc.Labels["env"] != "edge" || a == nil || a.Namespace != v1alpha1.MemberNamespace(name) ||
		a.ServiceAccount != join.AgentServiceAccount || a.BootstrapExpiresAt == nil || a.JoinedAt != nil {
		t.Fatalf("after join: spec %+v, labels %v, status.agent %+v", mc.Spec, mc.Labels, a)
	}
	if left := time.Until(a.BootstrapExpiresAt.Time); left < 50*time.Minute || left > 61*time.Minute {
		t.Errorf("the bootstrap token expires in %s, want the default hour", left)
	}

	// A token claiming another member's name is refused: it may only get its own member's
	// credential.
	_, err := join.Exchange(ctx, boot, "join-edge-other", time.Hour, nil)
	var re *join.RefusedError
	if !errors.As(err, &re) || re.Reason != join.RefusedOtherCluster {
		t.Fatalf("exchange claiming another member: want refused (%s), got %v", join.RefusedOtherCluster, err)
	}

	cred := exchange(t, boot, name)
	if time.Until(cred.ExpiresAt) < 50*time.Minute || !cred.RenewAt().Before(cred.ExpiresAt) || !cred.RenewAt().After(cred.IssuedAt) {
		t.Errorf("credential issued %s, renewed at %s, expires %s", cred.IssuedAt, cred.RenewAt(), cred.ExpiresAt)
	}
	a = getMember(t, name).Status.Agent
	if a.JoinedAt == nil || a.CredentialExpiresAt == nil || !a.CredentialExpiresAt.Time.Equal(cred.ExpiresAt.Truncate(time.Second)) {
		t.Fatalf("after the exchange: status.agent %+v, credential expires %s", a, cred.ExpiresAt)
	}

	// Single use: the same token again is refused.
	refusedWithin(t, "the bootstrap token used a second time", join.RefusedBootstrapToken, func() error {
		_, err := join.Exchange(ctx, boot, name, time.Hour, nil)
		return err
	})

	// The agent renews its credential with itself.
	renewed, err := join.Renew(ctx, cred.Config(boot), name, time.Hour)
	if err != nil {
		t.Fatalf("renewing the credential: %v", err)
	}
	if renewed.Token == cred.Token {
		t.Fatal("the renewed credential is the same token")
	}

	// A new join replaces an unused token: the older one is refused, the newer one works, and
	// the agent's credential stays valid.
	old := joinMember(t, name)
	newer := joinMember(t, name)
	refusedWithin(t, "a bootstrap token replaced by a newer join", join.RefusedBootstrapToken, func() error {
		_, err := join.Exchange(ctx, old, name, time.Hour, nil)
		return err
	})
	if _, err := join.Renew(ctx, renewed.Config(boot), name, time.Hour); err != nil {
		t.Fatalf("the agent's credential after a new join: %v", err)
	}
	exchange(t, newer, name)

	// Leave revokes the credential at once and removes the identity.
	out, err := run(ctx, "clusters", "leave", name, "--kubeconfig", env.Hub.Kubeconfig)
	if err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("clusters leave: %v\n%s", err, out)
	}
	refusedWithin(t, "the agent's credential after leave", join.RefusedCredential, func() error {
		_, err := join.Renew(ctx, renewed.Config(boot), name, time.Hour)
		return err
	})
	for _, o := range []client.Object{&v1alpha1.MemberCluster{}, &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}} {
		n := name
		if _, ok := o.(*v1alpha1.MemberCluster); !ok {
			n = join.ClusterRoleName(name)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: n}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after leave: %v", o, n, err)
		}
	}
	nso := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: v1alpha1.MemberNamespace(name)}, nso); err == nil && nso.DeletionTimestamp == nil {
		t.Errorf("hub namespace %s is not being deleted after leave", nso.Name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Leave again: nothing left, no error.
	if out, err := run(ctx, "clusters", "leave", name, "--kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters leave again: %v\n%s", err, out)
	}
}

// TestJoinRefusesBadInput: names that cannot be a hub namespace, a push member, a bootstrap
// token lifetime out of range and a file that exists are refused, naming the fix.
func TestJoinRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	push := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "join-push-member"},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: "kc"}}}
	if err := c.Create(ctx, push); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), push) })
	existing := filepath.Join(t.TempDir(), "exists.yaml")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	fresh := func() string { return filepath.Join(t.TempDir(), "b.yaml") }
	cases := []struct {
		name string
		// args follow `rewind clusters`.
		args []string
		// message must appear in the error.
		message string
	}{
		{"name with a dot", []string{"join", "edge.berlin", "--bootstrap-kubeconfig", fresh()}, "DNS"},
		{"name too long", []string{"join", strings.Repeat("a", 50), "--bootstrap-kubeconfig", fresh()}, "at most 49"},
		{"push member", []string{"join", push.Name, "--bootstrap-kubeconfig", fresh()}, "mode Push"},
		{"leave a push member", []string{"leave", push.Name}, "mode Push"},
		{"ttl too short", []string{"join", "join-ttl", "--bootstrap-kubeconfig", fresh(), "--bootstrap-ttl", "1m"}, "--bootstrap-ttl 1m0s is out of range"},
		{"file exists", []string{"join", "join-file", "--bootstrap-kubeconfig", existing}, "exists: name a new file"},
		{"plain http hub", []string{"join", "join-http", "--bootstrap-kubeconfig", fresh(), "--hub-server", "http://hub:6443"}, "must be an https:// URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(ctx, append(append([]string{"clusters"}, tc.args...), "--kubeconfig", env.Hub.Kubeconfig)...)
			if err == nil || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("want an error naming %q, got %v\n%s", tc.message, err, out)
			}
		})
	}
	// Nothing was registered by the refused joins.
	for _, n := range []string{"join-ttl", "join-file", "join-http"} {
		if err := c.Get(ctx, client.ObjectKey{Name: n}, &v1alpha1.MemberCluster{}); !apierrors.IsNotFound(err) {
			t.Errorf("MemberCluster %s after a refused join: %v", n, err)
		}
	}
}

// access is one request of the isolation table.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	}
	if a.name != "" {
		s += " named " + a.name
	}
	return s
}

// TestAgentCredentialIsolation: an agent's credential reaches its own hub namespace and its
// own MemberCluster, and nothing of another member's or the rest of the hub: the hub's
// authorizer says so (SubjectAccessReviews), and real requests made with the credential are
// refused.
func TestAgentCredentialIsolation(t *testing.T) {
	ctx := t.Context()
	const a, b = "iso-member-a", "iso-member-b"
	credA := exchange(t, joinMember(t, a), a)
	bootB := joinMember(t, b)
	exchange(t, bootB, b)
	nsA, nsB := v1alpha1.MemberNamespace(a), v1alpha1.MemberNamespace(b)
	rw := v1alpha1.GroupVersion.Group

	allowed := []access{
		{"list", rw, "rollouttargets", "", nsA, ""},
		{"watch", rw, "rollouttargets", "", nsA, ""},
		{"patch", rw, "rollouttargets", "status", nsA, "t1"},
		{"get", rw, "operatorreleases", "", nsA, "r1"},
		{"list", rw, "rollouts", "", nsA, ""},
		{"create", rw, "snapshots", "", nsA, ""},
		{"get", "", "secrets", "", nsA, "rewind-artifact-x"},
		{"create", "", "secrets", "", nsA, ""},
		{"update", "coordination.k8s.io", "leases", "", nsA, join.AgentLease},
		{"create", "", "serviceaccounts", "token", nsA, join.AgentServiceAccount},
		{"get", rw, "memberclusters", "", "", a},
		{"patch", rw, "memberclusters", "status", "", a},
	}
	denied := []access{
		// Another member's namespace: targets, releases, Secrets, snapshots, Lease, tokens.
		{"list", rw, "rollouttargets", "", nsB, ""},
		{"get", rw, "rollouttargets", "", nsB, "t1"},
		{"patch", rw, "rollouttargets", "status", nsB, "t1"},
		{"get", rw, "operatorreleases", "", nsB, "r1"},
		{"list", "", "secrets", "", nsB, ""},
		{"get", "", "secrets", "", nsB, "rewind-artifact-x"},
		{"create", "", "secrets", "", nsB, ""},
		{"list", rw, "snapshots", "", nsB, ""},
		{"delete", rw, "snapshots", "", nsB, "s1"},
		{"update", "coordination.k8s.io", "leases", "", nsB, join.AgentLease},
		{"create", "", "serviceaccounts", "token", nsB, join.AgentServiceAccount},
		// Another member's MemberCluster, and the list of all.
		{"get", rw, "memberclusters", "", "", b},
		{"patch", rw, "memberclusters", "status", "", b},
		{"update", rw, "memberclusters", "", "", a},
		{"list", rw, "memberclusters", "", "", ""},
		// Its own work's spec belongs to the Rollout; its identity to join.
		{"create", rw, "rollouttargets", "", nsA, ""},
		{"update", rw, "rollouttargets", "", nsA, "t1"},
		{"create", "", "serviceaccounts", "token", nsA, join.BootstrapServiceAccount},
		{"create", "rbac.authorization.k8s.io", "rolebindings", "", nsA, ""},
		{"update", "rbac.authorization.k8s.io", "roles", "", nsA, join.AgentRole},
		{"delete", "", "namespaces", "", "", nsA},
		// The rest of the hub: rewind-system (member kubeconfigs, the snapshot key), tenants.
		{"get", "", "secrets", "", "rewind-system", "member-x-kubeconfig"},
		{"list", "", "secrets", "", "", ""},
		{"list", rw, "rollouttargets", "", "", ""},
		{"list", rw, "rollouts", "", "default", ""},
		{"list", rw, "rollouts", "", nsB, ""},
		{"create", rw, "rollouts", "", nsA, ""},
		{"list", "", "namespaces", "", "", ""},
		{"create", "", "pods", "", nsA, ""},
	}
	admin, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + nsA + ":" + join.AgentServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + nsA, "system:authenticated"}
	review := func(x access) bool {
		t.Helper()
		sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: x.verb, Group: x.group, Resource: x.resource,
				Subresource: x.subresource, Namespace: x.namespace, Name: x.name},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview of %s: %v", x, err)
		}
		return sar.Status.Allowed
	}
	for _, x := range allowed {
		if !review(x) {
			t.Errorf("the agent of %s may not %s; it needs to", a, x)
		}
	}
	for _, x := range denied {
		if review(x) {
			t.Errorf("the agent of %s may %s", a, x)
		}
	}

	// Real requests with member a's credential.
	cfg := credA.Config(env.Hub.RESTConfig())
	ca, err := client.New(cfg, client.Options{Scheme: hubScheme})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s with member %s's credential: want Forbidden, got %v", what, a, err)
		}
	}
	forbidden("listing member b's RolloutTargets", ca.List(ctx, &v1alpha1.RolloutTargetList{}, client.InNamespace(nsB)))
	forbidden("listing member b's Snapshots", ca.List(ctx, &v1alpha1.SnapshotList{}, client.InNamespace(nsB)))
	forbidden("listing member b's Secrets", ca.List(ctx, &corev1.SecretList{}, client.InNamespace(nsB)))
	forbidden("reading member b's MemberCluster", ca.Get(ctx, client.ObjectKey{Name: b}, &v1alpha1.MemberCluster{}))
	forbidden("writing a Secret into member b's namespace", ca.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted", Namespace: nsB}}))
	forbidden("listing every MemberCluster", ca.List(ctx, &v1alpha1.MemberClusterList{}))
	forbidden("reading rewind-system's Secrets", ca.List(ctx, &corev1.SecretList{}, client.InNamespace("rewind-system")))
	mcB := getMember(t, b)
	base := mcB.DeepCopy()
	mcB.Status.Agent.LastHeartbeatTime = &metav1.Time{Time: time.Now()}
	forbidden("writing member b's status", ca.Status().Patch(ctx, mcB, client.MergeFrom(base)))
	// Member b's bootstrap-free exchange, claimed with a's credential.
	_, err = join.Renew(ctx, cfg, b, time.Hour)
	if !join.IsRefused(err) {
		t.Errorf("renewing member b's credential with member a's: want refused, got %v", err)
	}

	// Its own namespace and MemberCluster work (the refusals above are not a broken token).
	if err := ca.List(ctx, &v1alpha1.RolloutTargetList{}, client.InNamespace(nsA)); err != nil {
		t.Errorf("listing its own RolloutTargets: %v", err)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payload", Namespace: nsA}}
	if err := ca.Create(ctx, own); err != nil {
		t.Errorf("writing a Secret into its own namespace: %v", err)
	}
	if err := ca.Get(ctx, client.ObjectKey{Name: a}, &v1alpha1.MemberCluster{}); err != nil {
		t.Errorf("reading its own MemberCluster: %v", err)
	}
}

// TestJoinPrintsTheChartInstall: join prints, beside the agent command, the commands that run
// the agent as a pod with the Helm chart. The printed values render this member's agent with
// the Helm SDK, and the Secret the printed kubectl creates, with the file join wrote under the
// key the agent reads, is the one the chart mounts.
func TestJoinPrintsTheChartInstall(t *testing.T) {
	const name = "join-edge-chart"
	file := filepath.Join(t.TempDir(), name+".bootstrap.yaml")
	out, err := run(t.Context(), "clusters", "join", name, "--bootstrap-kubeconfig", file, "--kubeconfig", env.Hub.Kubeconfig)
	c := hubClient(t)
	t.Cleanup(func() { _, _ = join.Leave(context.Background(), c, name) })
	if err != nil {
		t.Fatalf("clusters join %s: %v\n%s", name, err, out)
	}
	var helmArgs, secretArgs []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 2 && f[0] == "helm" && f[1] == "install":
			helmArgs = f
		case len(f) > 5 && f[0] == "kubectl" && slices.Contains(f, "secret"):
			secretArgs = f
		}
	}
	if len(helmArgs) < 4 || helmArgs[3] != "charts/rewind" || len(secretArgs) == 0 {
		t.Fatalf("join must print the chart's agent install (helm install ... charts/rewind, and the Secret for it):\n%s", out)
	}
	ns, vals := "", map[string]any{}
	for i := 4; i+1 < len(helmArgs); i++ {
		switch helmArgs[i] {
		case "-n", "--namespace":
			ns = helmArgs[i+1]
		case "--set":
			if err := strvals.ParseInto(helmArgs[i+1], vals); err != nil {
				t.Fatalf("the printed --set %s: %v", helmArgs[i+1], err)
			}
		}
	}
	chrt, err := loader.Load(filepath.Join("..", "..", "charts", "rewind"))
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.ClientOnly, inst.DryRun = true, true
	inst.ReleaseName, inst.Namespace = helmArgs[2], ns
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		t.Fatalf("the printed chart install does not render: %v\n%s", err, out)
	}
	var agent *appsv1.Deployment
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			if agent != nil || d.Name != "rewind-agent" {
				t.Fatalf("the printed chart install renders Deployment %s besides the agent's", d.Name)
			}
			agent = &d
		}
	}
	if agent == nil {
		t.Fatalf("the printed chart install renders no agent:\n%s", rel.Manifest)
	}
	pod := agent.Spec.Template.Spec
	if env := pod.Containers[0].Env; len(env) != 1 || env[0].Name != "CLUSTER" || env[0].Value != name {
		t.Errorf("the printed chart install runs the agent with %+v, want CLUSTER=%s", env, name)
	}
	// kubectl -n NS create secret generic NAME --from-file=KEY=FILE
	secretNS, secretName, fromFile := "", "", ""
	for i, a := range secretArgs {
		switch {
		case a == "-n" && i+1 < len(secretArgs):
			secretNS = secretArgs[i+1]
		case a == "generic" && i+1 < len(secretArgs):
			secretName = secretArgs[i+1]
		case strings.HasPrefix(a, "--from-file="):
			fromFile = strings.TrimPrefix(a, "--from-file=")
		}
	}
	mounted := false
	for _, v := range pod.Volumes {
		mounted = mounted || (v.Secret != nil && v.Secret.SecretName == secretName)
	}
	if secretNS != ns || !mounted || fromFile != "bootstrap.yaml="+file || !slices.Contains(pod.Containers[0].Args, "--bootstrap-kubeconfig=/etc/rewind/bootstrap/bootstrap.yaml") {
		t.Errorf("the printed Secret %s/%s (--from-file=%s) is not what the chart's agent in %s mounts and reads: %+v %v", secretNS, secretName, fromFile, ns, pod.Volumes, pod.Containers[0].Args)
	}
}
