//go:build !unit

package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// kubeconfigVia writes a copy of the hub's kubeconfig whose server is server (a fault proxy in
// front of the hub) and returns its path.
func kubeconfigVia(t *testing.T, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Hub.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	path := filepath.Join(t.TempDir(), "hub-via-proxy.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// hubViaFaultProxy starts a fault proxy in front of the hub (no fault set) and returns the
// path of a kubeconfig through it and its faults.
func hubViaFaultProxy(t *testing.T) (string, *testbed.FaultInjector) {
	t.Helper()
	proxy, err := env.Hub.StartFaultProxy(testbed.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return kubeconfigVia(t, proxy.Server), proxy.Faults()
}

// TestCommandsRideOutABlipOfTheHub: a person's command goes on through a blip of its way to
// the hub (its first three requests answered 503, as by an API server restarting behind its
// load balancer) and through a write whose answer is lost after the hub acted on it. Each
// command starts with a new client, so the blip meets its discovery of rewind.dev too.
// Before, the first 503 failed the command; and a blip that met the discovery told the
// person to install rewind ("the hub does not serve rewind.dev/v1alpha1: run `rewind
// install`"), which the hub serves.
func TestCommandsRideOutABlipOfTheHub(t *testing.T) {
	ctx := t.Context()
	hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	createIdleRollout(t, ns, "mysql")
	createMySQLRelease(t, ns)
	kc, faults := hubViaFaultProxy(t)

	for _, args := range [][]string{
		{"snapshot", "list"},
		{"rollout", "status", "mysql"},
		{"history", "mysql"},
		{"rollout", "resume", "mysql"},
		{"rollout", "pause", "mysql"},
	} {
		before := faults.Counts().HTTPFaults
		if err := faults.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, Codes: []int{503}, Max: 3}}); err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, append(args, "--kubeconfig", kc, "-n", ns)...)
		faults.SetEnabled(false)
		if err != nil {
			t.Fatalf("%v through a blip of the hub (its first 3 requests answered 503): %v\n%s", args, err, out)
		}
		if faults.Counts().HTTPFaults == before {
			t.Fatalf("%v met no fault: the test proves nothing", args)
		}
	}

	// An outage longer than the retries fails the command, with the hub's answer, never with
	// advice to install what the hub serves.
	if err := faults.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, Codes: []int{503}}}); err != nil {
		t.Fatal(err)
	}
	out, err := run(ctx, "snapshot", "list", "--kubeconfig", kc, "-n", ns)
	faults.SetEnabled(false)
	if err == nil || strings.Contains(err.Error(), "rewind install") {
		t.Fatalf("snapshot list through a hub away: want its answer, got %v\n%s", err, out)
	}
	t.Logf("through a hub away: %v", err)

	// A person's rollback whose answer is lost after the hub wrote it: the command's retry
	// finds its own write done, and says so, instead of "rollout mysql already wants mysql-v1".
	before := faults.Counts().HTTPFaults
	if err := faults.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, LoseAnswers: true, MutatingOnly: true, Max: 1}}); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, "rollback", "mysql", "--to", "mysql-v1", "--reason", "lost answer", "--kubeconfig", kc, "-n", ns)
	faults.SetEnabled(false)
	if faults.Counts().HTTPFaults == before {
		t.Fatal("the rollback's write met no fault: the test proves nothing")
	}
	if err != nil {
		t.Fatalf("rollback whose answer was lost: %v\n%s", err, out)
	}
	if !strings.Contains(out, "rolling back from widget-v1 to mysql-v1") {
		t.Fatalf("rollback must say what it did:\n%s", out)
	}
	ro := &v1alpha1.Rollout{}
	if err := hubClient(t).Get(ctx, client.ObjectKey{Namespace: ns, Name: "mysql"}, ro); err != nil {
		t.Fatal(err)
	}
	if ro.Spec.Release != "mysql-v1" || !strings.HasPrefix(ro.Annotations[v1alpha1.AnnotationRollbackReason], "lost answer (at ") {
		t.Fatalf("rollout after the rollback: release %q, reason %q", ro.Spec.Release, ro.Annotations[v1alpha1.AnnotationRollbackReason])
	}
}

// TestCommandsWhoseWritesLoseTheirAnswers: a person's command goes on when the hub acted on
// one of its writes and the answer was lost (a connection reset after the request was sent):
// a create (POST) and an update (PUT) of `rewind clusters add`, a Role of `rewind clusters
// join`, the OperatorRelease of `rewind release create`, the Snapshot of `rewind snapshot take`
// and its status (written once its payload is stored). Each finds its write done and ends as
// a run without the fault. Before, a lost create failed the command with the transport's
// error (the transport does not send a POST again), or with AlreadyExists where the command
// tried again itself (join); an update, sent again with the resourceVersion it had replaced,
// was refused with a conflict ("the object has been modified"), and so was the Snapshot's status
// write ("another writer changed its status since it was read": its own).
func TestCommandsWhoseWritesLoseTheirAnswers(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	kc, faults := hubViaFaultProxy(t)
	m := env.Members[0]
	t.Cleanup(func() {
		for _, name := range []string{"lost-a", "lost-b"} {
			_ = c.Delete(context.Background(), &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}})
			_ = c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rewind-system", Name: "member-" + name + "-kubeconfig"}})
		}
		_, _ = join.Leave(context.Background(), c, "lost-j")
	})

	// A member to take snapshots of, with a release whose CRDs to capture.
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add: %v\n%s", err, out)
	}
	createMySQLRelease(t, ns)
	take := func(name string) []string {
		return []string{"snapshot", "take", "--cluster", m.Name, "--operator", "mysql-operator", "--release", "mysql-v1",
			"--name", name, "--store", "dir://" + t.TempDir(), "--kubeconfig", kc, "-n", ns}
	}
	snapshots := "/apis/rewind.dev/v1alpha1/namespaces/" + ns + "/snapshots"

	secrets := "/api/v1/namespaces/rewind-system/secrets"
	members := "/apis/rewind.dev/v1alpha1/memberclusters"
	for _, tc := range []struct {
		what string
		// path is the prefix of the request whose answer is lost: the first POST, PUT,
		// PATCH or DELETE under it.
		path string
		args []string
	}{
		{"the Secret's create", secrets, []string{"clusters", "add", "lost-a", "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", kc}},
		{"the MemberCluster's create", members, []string{"clusters", "add", "lost-b", "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", kc}},
		// Another kubeconfig: the Secret changes (the same one would be a no-op, which the
		// second try of a PUT passes).
		{"the Secret's update", secrets + "/member-lost-a-kubeconfig", []string{"clusters", "add", "lost-a", "--kubeconfig", env.Members[1].Kubeconfig, "--hub-kubeconfig", kc, "--label", "env=lost"}},
		{"the MemberCluster's update", members + "/lost-b", []string{"clusters", "add", "lost-b", "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", kc, "--label", "env=lost"}},
		{"the create of the agent's Role", "/apis/rbac.authorization.k8s.io/v1/namespaces/" + v1alpha1.MemberNamespace("lost-j") + "/roles",
			[]string{"clusters", "join", "lost-j", "--bootstrap-kubeconfig", filepath.Join(t.TempDir(), "lost-j.yaml"), "--kubeconfig", kc}},
		{"the OperatorRelease's create", "/apis/rewind.dev/v1alpha1/namespaces/" + ns + "/operatorreleases",
			append(createArgs(ns, "widget-lost", releaseSources[0].version, releaseSources[0].image, releaseSources[0].args), "--kubeconfig", kc)},
		{"the Snapshot's create", snapshots, take("lost-create")},
		{"the Snapshot's status write (its payload stored)", snapshots + "/lost-status/status", take("lost-status")},
	} {
		before := faults.Counts().HTTPFaults
		if err := faults.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, LoseAnswers: true, MutatingOnly: true, Max: 1, PathPrefixes: []string{tc.path}}}); err != nil {
			t.Fatal(err)
		}
		out, err := run(ctx, tc.args...)
		faults.SetEnabled(false)
		if faults.Counts().HTTPFaults == before {
			t.Fatalf("%s: no answer lost: the case proves nothing\n%s", tc.what, out)
		}
		if err != nil {
			t.Errorf("%v, %s's answer lost: %v\n%s", tc.args[:3], tc.what, err, out)
		}
	}

	// Each ends as a run without the fault.
	for _, name := range []string{"lost-a", "lost-b"} {
		mc := &v1alpha1.MemberCluster{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
			t.Fatal(err)
		}
		secret := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "rewind-system", Name: "member-" + name + "-kubeconfig"}, secret); err != nil {
			t.Fatal(err)
		}
		if mc.Labels["env"] != "lost" || mc.Spec.KubeconfigSecretRef.Name != secret.Name || len(secret.Data[member.DefaultKubeconfigKey]) == 0 {
			t.Errorf("MemberCluster %s: labels %v, kubeconfig Secret %q (%d bytes)", name, mc.Labels, mc.Spec.KubeconfigSecretRef.Name, len(secret.Data[member.DefaultKubeconfigKey]))
		}
	}
	for _, o := range join.Objects("lost-j") {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("%T %s after the join: %v", o, client.ObjectKeyFromObject(o), err)
		}
	}
	for _, name := range []string{"lost-create", "lost-status"} {
		snap := &v1alpha1.Snapshot{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, snap); err != nil || !meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("Snapshot %s: %v, conditions %+v; want it Ready", name, err, snap.Status.Conditions)
		}
	}
	rel := &v1alpha1.OperatorRelease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "widget-lost"}, rel); err != nil || rel.Spec.Version != releaseSources[0].version {
		t.Errorf("OperatorRelease widget-lost: %v (version %q)", err, rel.Spec.Version)
	}
}
