//go:build !unit

package orchestration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/test/fleet"
)

// gitops stands in for Flux or Argo CD: it re-applies the Rollout's spec from "Git" every
// interval with server-side apply, under its own field manager and with force.
type gitops struct {
	mu      sync.Mutex
	release string
	applies int
}

func (g *gitops) set(rel string) {
	g.mu.Lock()
	g.release = rel
	g.mu.Unlock()
}

func (g *gitops) run(ctx context.Context, t *testing.T, f *fleet.Fleet, interval time.Duration) {
	for {
		g.mu.Lock()
		rel := g.release
		g.mu.Unlock()
		ro := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Rollout",
			"metadata": map[string]any{"name": f.Name, "namespace": f.NS},
			"spec": map[string]any{
				"operator": "mysql-operator", "release": rel, "installNamespace": f.OpNS,
				"waves":       []any{map[string]any{"name": "canary", "clusters": []any{"member1"}}, map[string]any{"name": "rest", "clusters": []any{"member2", "member3"}, "maxConcurrency": int64(2)}},
				"healthGates": map[string]any{"timeout": "20s"},
			},
		}}
		err := hub(t).Apply(ctx, client.ApplyConfigurationFromUnstructured(ro), client.FieldOwner("gitops"), client.ForceOwnership)
		if err != nil && ctx.Err() == nil {
			t.Errorf("the GitOps stand-in could not apply: %v", err)
		}
		g.mu.Lock()
		g.applies++
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// kstatusOf computes the Rollout's kstatus, as Flux's health checks do.
func kstatusOf(t *testing.T, ro *v1alpha1.Rollout) status.Status {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ro)
	if err != nil {
		t.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		t.Fatal(err)
	}
	return res.Status
}

// argoHealth runs config/argocd/rollout-health.lua on the Rollout, as Argo CD does.
func argoHealth(t *testing.T, ro *v1alpha1.Rollout) (string, string) {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", "rollout-health.lua"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(ro)
	if err != nil {
		t.Fatal(err)
	}
	var obj any
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(string(script)); err != nil {
		t.Fatalf("the health script fails: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("the health script returns %v, not a table", L.Get(-1))
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch t := v.(type) {
	case map[string]any:
		tbl := L.NewTable()
		for k, e := range t {
			tbl.RawSetString(k, toLua(L, e))
		}
		return tbl
	case []any:
		tbl := L.NewTable()
		for _, e := range t {
			tbl.Append(toLua(L, e))
		}
		return tbl
	case string:
		return lua.LString(t)
	case float64:
		return lua.LNumber(t)
	case bool:
		return lua.LBool(t)
	}
	return lua.LNil
}

// A GitOps tool keeps applying the spec that asks for a release; the release fails its gate
// and rewind rolls every changed cluster back. rewind must not attempt the release again
// (it does not write spec, so nothing is there to fight), and `kubectl get`, kstatus (Flux)
// and the Argo CD health check must all say clearly that it failed.
func TestGitOpsToolNeverFightsAnAutomaticRollback(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	startManager(t, f.NS, nil)
	g := &gitops{release: "mysql-a"}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { g.run(ctx, t, f, 2*time.Second); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	if st := kstatusOf(t, ro); st != status.CurrentStatus {
		t.Errorf("kstatus of a rollout that succeeded: %s, want Current", st)
	}
	if hs, msg := argoHealth(t, ro); hs != "Healthy" {
		t.Errorf("Argo CD health of a rollout that succeeded: %s (%s), want Healthy", hs, msg)
	}
	f.Populate()

	// A commit asks for the bad release.
	g.set("mysql-bad")
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	revision := ro.Status.Revision
	if ro.Spec.Release != "mysql-bad" || ro.Status.FailedRelease != "mysql-bad" {
		t.Fatalf("spec.release %s, status.failedRelease %s: the failure must be held in status", ro.Spec.Release, ro.Status.FailedRelease)
	}
	started := f.CountEvents("RevisionStarted")

	// For 60 s the GitOps tool keeps applying mysql-bad; rewind must not try it again.
	deadline := time.Now().Add(60 * time.Second)
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 61*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := f.Rollout()
		if cur.Status.Revision != revision || cur.Status.CurrentRelease != "mysql-a" || cur.Status.Phase != v1alpha1.RolloutRolledBack {
			t.Fatalf("the failed release was attempted again: revision %d -> %d, phase %s, release %s", revision, cur.Status.Revision, cur.Status.Phase, cur.Status.CurrentRelease)
		}
		return time.Now().After(deadline), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	applies := g.applies
	g.mu.Unlock()
	if applies < 20 {
		t.Fatalf("the GitOps stand-in applied only %d times: the test proves little", applies)
	}
	if n := f.CountEvents("RevisionStarted"); n != started {
		t.Errorf("%d revisions started while the failure was held", n-started)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}

	// What people and tools see.
	ro = f.Rollout()
	if st := kstatusOf(t, ro); st != status.FailedStatus {
		t.Errorf("kstatus of a rolled-back rollout: %s, want Failed (not InProgress forever)", st)
	}
	if hs, msg := argoHealth(t, ro); hs != "Degraded" || !strings.Contains(msg, "mysql-bad") {
		t.Errorf("Argo CD health of a rolled-back rollout: %s (%s), want Degraded naming mysql-bad", hs, msg)
	}
	out, err := runKubectl(t, "get", "rollouts.rewind.dev", f.Name, "-n", f.NS)
	if err != nil || !strings.Contains(out, "RolledBack") {
		t.Errorf("kubectl get must show the phase RolledBack: %v\n%s", err, out)
	}

	// A person asks for a retry: the release is attempted once more (and fails again).
	rewind(t, f.NS, "retry", f.Name)
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		ro = f.Rollout()
		return ro.Status.Revision >= revision+2 && ro.Status.Phase == v1alpha1.RolloutRolledBack, nil
	})
	if err != nil || ro.Status.Revision != revision+2 || ro.Status.FailedRelease != "mysql-bad" {
		t.Errorf("a retry must run the release once more, then roll it back again: revision %d -> %d, phase %s, failed %s",
			revision, ro.Status.Revision, ro.Status.Phase, ro.Status.FailedRelease)
	}
	// Git goes back to mysql-a: the rollout is Ready again.
	g.set("mysql-a")
	f.WaitCondition(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonSucceeded, time.Minute)
}

// runKubectl runs the testbed's kubectl against the hub.
func runKubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bins, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(bins.APIServer), "kubectl")
	out, err := exec.CommandContext(t.Context(), bin, append(args, "--kubeconfig", suite.Env.Hub.Kubeconfig)...).CombinedOutput()
	return string(out), err
}
