//go:build !unit

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
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
	proxy, err := env.Hub.StartFaultProxy(testbed.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kc := kubeconfigVia(t, proxy.Server)
	faults := proxy.Faults()

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
