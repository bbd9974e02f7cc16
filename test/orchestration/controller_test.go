//go:build !unit

package orchestration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

// A CEL health check that does not compile stops the rollout before any cluster changes,
// naming the expression; once fixed, the rollout goes on and Stalled is cleared.
func TestBadCELStallsBeforeAnyChange(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.CEL = []v1alpha1.CELCheck{{Kind: "MySQLCluster", Expression: "self.status.(ready"}}
	})
	startManager(t, f.NS, nil)
	c := f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, time.Minute)
	if !strings.Contains(c.Message, "self.status.(ready") || !strings.Contains(c.Message, "spec.healthGates.cel") {
		t.Errorf("Stalled must name the field and the expression: %s", c.Message)
	}
	var targets v1alpha1.RolloutTargetList
	if err := hub(t).List(t.Context(), &targets, client.InNamespace(f.NS)); err != nil || len(targets.Items) != 0 {
		t.Fatalf("no cluster may be planned, let alone changed: %d targets (%v)", len(targets.Items), err)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec != nil {
			t.Errorf("%s was changed: record %+v", m.Name, rec)
		}
	}
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.CEL = []v1alpha1.CELCheck{{Kind: "MySQLCluster", Expression: "!has(self.status) || self.status.phase != 'Broken'"}}
	})
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	if s := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); s != nil {
		t.Errorf("Stalled must be cleared once the rollout progresses: %+v", s)
	}
}

// A release that does not exist stalls the rollout (ReleaseNotFound); once it is created the
// rollout goes on and Stalled is cleared.
func TestMissingReleaseStallsThenRecovers(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	f.SetRelease("mysql-later", nil)
	startManager(t, f.NS, nil)
	c := f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonReleaseNotFound, time.Minute)
	if !strings.Contains(c.Message, `spec.release: release "mysql-later" does not exist in namespace `+f.NS) || strings.Count(c.Message, "not found") > 0 {
		t.Errorf("Stalled must name the release: %s", c.Message)
	}
	makeRelease(t, f.NS, "mysql-later", "1.1.0", healthy)
	ro := f.WaitPhase("mysql-later", v1alpha1.RolloutSucceeded, 2*time.Minute)
	if s := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); s != nil {
		t.Errorf("Stalled must be cleared once the release exists: %+v", s)
	}
}

// A rollout whose only wave selects members by a label no member has yet stalls (InvalidSpec);
// labelling a member is a change of the member, not of the Rollout, and the rollout goes on by
// itself, on the stall's retry.
func TestLabellingAMemberStartsARolloutStalledOnItsWaves(t *testing.T) {
	key := "wave.e2e.rewind.dev/" + strings.TrimPrefix(t.Name(), "Test")[:40]
	f := newFleet(t, []v1alpha1.Wave{{Name: "labelled", MaxConcurrency: 1,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{key: "yes"}}}})
	f.SetRelease("mysql-a", nil)
	startManager(t, f.NS, nil)
	f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, time.Minute)
	label := func(value *string) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			mc := &v1alpha1.MemberCluster{}
			if err := hub(t).Get(context.Background(), client.ObjectKey{Name: suite.Env.Members[0].Name}, mc); err != nil {
				return err
			}
			if value == nil {
				delete(mc.Labels, key)
			} else {
				if mc.Labels == nil {
					mc.Labels = map[string]string{}
				}
				mc.Labels[key] = *value
			}
			return hub(t).Update(context.Background(), mc)
		})
	}
	t.Cleanup(func() {
		if err := label(nil); err != nil {
			t.Errorf("removing the label %s: %v", key, err)
		}
	})
	yes := "yes"
	if err := label(&yes); err != nil {
		t.Fatal(err)
	}
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	if ro.Status.Targets.Total != 1 {
		t.Errorf("the labelled member only: %+v", ro.Status.Targets)
	}
}

// An approval belongs to one revision: the next release waits for its own.
func TestApprovalsBelongToOneRevision(t *testing.T) {
	waves := fleet.TwoWaves()
	waves[1].RequireApproval = true
	f := newFleet(t, waves)
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutWaitingForApproval, 2*time.Minute)
	rewind(t, f.NS, "rollout", "approve", f.Name, "rest")
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutWaitingForApproval, 2*time.Minute)
	if p := f.Phases(); p["member2"] != v1alpha1.ClusterPending || p["member3"] != v1alpha1.ClusterPending {
		t.Fatalf("wave rest started on revision %d with the approval of an earlier one: %v", ro.Status.Revision, p)
	}
	rewind(t, f.NS, "rollout", "approve", f.Name, "rest")
	f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 2*time.Minute)
}

// The reason a person gave for one rollback is not reported for the next one.
func TestRollbackReasonIsReportedOnce(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.SetRelease("mysql-b", nil)
	f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 2*time.Minute)
	rewind(t, f.NS, "rollback", f.Name, "--reason", "latency doubled")
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 2*time.Minute)
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack); c == nil || !strings.Contains(c.Message, "latency doubled") {
		t.Fatalf("the first rollback must report its reason: %+v", c)
	}
	f.SetRelease("mysql-b", nil)
	f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 2*time.Minute)
	// A second rollback, by editing spec.release (as a GitOps commit does): no stale reason.
	f.SetRelease("mysql-a", nil)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 2*time.Minute)
	c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	if c == nil || c.Reason != v1alpha1.ReasonManualRollback || strings.Contains(c.Message, "latency doubled") {
		t.Fatalf("the second rollback must not report the first one's reason: %+v", c)
	}
	if h := ro.Status.History[len(ro.Status.History)-1]; strings.Contains(h.Reason, "latency doubled") {
		t.Fatalf("history reports a stale reason: %+v", h)
	}
}

// A rollback does not stop at a cluster whose restore fails: every other changed cluster is
// restored, then the rollout reports Failed with that cluster's cause.
func TestRollbackGoesOnPastAFailedRestore(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	// member2's snapshot payload is lost.
	snap := &v1alpha1.Snapshot{}
	if err := hub(t).Get(t.Context(), client.ObjectKey{Namespace: f.NS, Name: snaps["member2"]}, snap); err != nil {
		t.Fatal(err)
	}
	if err := (&snapshot.Hub{Client: hub(t)}).Delete(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	rewind(t, f.NS, "rollback", f.Name)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutFailed, 3*time.Minute)
	p := f.Phases()
	if p["member1"] != v1alpha1.ClusterRolledBack || p["member3"] != v1alpha1.ClusterRolledBack || p["member2"] != v1alpha1.ClusterFailed {
		t.Fatalf("member1 and member3 must be restored although member2's restore failed: %v", p)
	}
	stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
	if stalled == nil || stalled.Reason != v1alpha1.ReasonRollbackFailed || !strings.Contains(stalled.Message, "member2") || !strings.Contains(stalled.Message, snaps["member2"]) {
		t.Errorf("Stalled must say member2's restore failed and why: %+v", stalled)
	}
	if len(ro.Status.Failures) != 1 || ro.Status.Failures[0].Cluster != "member2" || ro.Status.Failures[0].Path != v1alpha1.PathRestore {
		t.Errorf("status.failures must list member2's restore: %+v", ro.Status.Failures)
	}
	f.AssertEqualsSnapshot(suite.Env.Members[0], snaps["member1"])
	f.AssertEqualsSnapshot(suite.Env.Members[2], snaps["member3"])
}

// A rollback whose restore failed on one cluster (its kubeconfig Secret unusable) had no way
// out: rewind retry refused (no failed release held) and a rollback went forward. Once the
// cause is fixed, rewind retry plans the release again: the failed cluster is restored and the
// others are left as they run.
func TestRetryAfterAFailedRestore(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)

	// member2's kubeconfig Secret becomes unusable (put back whatever happens).
	c := hub(t)
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: "rewind-system", Name: "member2-kubeconfig"}, sec); err != nil {
		t.Fatal(err)
	}
	good := sec.Data["kubeconfig"]
	setKubeconfig := func(ctx context.Context, data []byte) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s := &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(sec), s); err != nil {
				return err
			}
			s.Data["kubeconfig"] = data
			return c.Update(ctx, s)
		})
	}
	t.Cleanup(func() { _ = setKubeconfig(context.Background(), good) })
	if err := setKubeconfig(t.Context(), []byte("not a kubeconfig")); err != nil {
		t.Fatal(err)
	}
	rewind(t, f.NS, "rollback", f.Name)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutFailed, 3*time.Minute)
	if p := f.Phases(); p["member1"] != v1alpha1.ClusterRolledBack || p["member3"] != v1alpha1.ClusterRolledBack || p["member2"] != v1alpha1.ClusterFailed {
		t.Fatalf("member2's restore must fail and the others be restored: %v", p)
	}
	failedRevision := ro.Status.Revision

	if err := setKubeconfig(t.Context(), good); err != nil {
		t.Fatal(err)
	}
	if out := rewind(t, f.NS, "retry", f.Name); !strings.Contains(out, "retrying the rollback to mysql-a on the clusters whose restore failed") {
		t.Errorf("rewind retry:\n%s", out)
	}
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if ro.Status.Revision != failedRevision+1 || ro.Status.PreviousRelease != "mysql-b" {
		t.Errorf("the retry must be the next revision and keep the release before it: revision %d (failed %d), previous %s", ro.Status.Revision, failedRevision, ro.Status.PreviousRelease)
	}
	if p := f.Phases(); p["member2"] != v1alpha1.ClusterRolledBack || p["member1"] != v1alpha1.ClusterSucceeded || p["member3"] != v1alpha1.ClusterSucceeded {
		t.Errorf("the retry must restore member2 alone and leave the others as they run: %v", p)
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
	// Nothing failed is left to retry.
	if out, err := cli.Run(t.Context(), "retry", f.Name, "--kubeconfig", suite.Env.Hub.Kubeconfig, "-n", f.NS); err == nil || !strings.Contains(err.Error(), "nothing to retry") {
		ro := f.Rollout()
		t.Errorf("a retry of a rolled back rollout: %v\n%s\nstatus: failed %q (%s), history %+v", err, out, ro.Status.FailedRelease, ro.Status.FailureReason, ro.Status.History)
	}
}

// The clusters of a wave change at once, each on its own worker: two are in flight together,
// and one held at its health gate does not hold the others.
func TestWaveClustersRunInParallel(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	// Each cluster, on reaching its snapshot, waits (up to 30s) until all three have reached
	// theirs: clusters run one after another would never meet there.
	var mu sync.Mutex
	arrived := map[string]bool{}
	all := make(chan struct{})
	maxTogether := 0
	startManager(t, f.NS, func(cluster, step string) bool {
		if step != target.StepSnapshot {
			return false
		}
		mu.Lock()
		arrived[cluster] = true
		if len(arrived) == 3 {
			select {
			case <-all:
			default:
				close(all)
			}
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(30 * time.Second):
		}
		mu.Lock()
		maxTogether = max(maxTogether, len(arrived))
		mu.Unlock()
		return false
	})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	mu.Lock()
	together := maxTogether
	mu.Unlock()
	if together != 3 {
		t.Errorf("the three clusters of the wave must be opened together: at most %d were", together)
	}
	f.Populate()
	// member2's nodes are marked: mysql-b-picky's operator stays Pending there, so member2
	// waits at its health gate while member1 and member3 finish.
	unmark := suite.MarkMember2(t)
	f.SetRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
		s.FailurePolicy = v1alpha1.FailurePolicyPause
	})
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := f.PhasesFor("mysql-b-picky")
		return p["member1"] == v1alpha1.ClusterSucceeded && p["member3"] == v1alpha1.ClusterSucceeded, nil
	})
	if err != nil {
		t.Fatalf("member1 and member3 did not finish while member2 waited: %v", f.PhasesFor("mysql-b-picky"))
	}
	if m2 := f.Target("member2"); m2.Status.Phase != v1alpha1.ClusterUpgrading || m2.Status.Step != target.StepHealthGate {
		t.Fatalf("member2 must still wait at its health gate: %+v", m2.Status)
	}
	unmark()
	f.WaitPhase("mysql-b-picky", v1alpha1.RolloutSucceeded, 2*time.Minute)
}

// A release with a kind the member does not serve (a ServiceMonitor, and prometheus-operator's
// CRDs are not installed) fails the precheck before anything changes, naming the kind and the
// missing API.
func TestPrecheckRefusesAKindTheMemberDoesNotServe(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	dir := t.TempDir()
	monitor := "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: mysql-operator}\nspec: {selector: {matchLabels: {app: mysql-operator}}, endpoints: [{port: metrics}]}\n"
	if err := os.WriteFile(filepath.Join(dir, "monitor.yaml"), []byte(monitor), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := testfixture.CreateRelease(t.Context(), hub(t), dir, f.NS, "mysql-monitored", "1.1.0", healthy); err != nil {
		t.Fatal(err)
	}
	f.SetRelease("mysql-monitored", func(s *v1alpha1.RolloutSpec) { s.FailurePolicy = v1alpha1.FailurePolicyPause })
	startManager(t, f.NS, nil)
	ro := f.WaitPhase("mysql-monitored", v1alpha1.RolloutFailed, 2*time.Minute)
	c := f.Target("member1").Status
	if c.Step != target.StepPrecheck || !strings.Contains(c.Message, "monitoring.coreos.com/v1 ServiceMonitor (API monitoring.coreos.com/v1 not found)") {
		t.Errorf("member1 must fail its precheck naming the kind and the missing API: %+v", c)
	}
	if s := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); s == nil || s.Reason != v1alpha1.ReasonPrecheckFailed {
		t.Errorf("Stalled must say the precheck failed: %+v", s)
	}
	if rec := f.Record(suite.Env.Members[0]); rec != nil {
		t.Errorf("nothing may change before the precheck passes: record %+v", rec)
	}
	if snaps := f.SnapshotsOf(ro.Status.Revision); len(snaps) != 0 {
		t.Errorf("no snapshot may be taken before the precheck passes: %v", snaps)
	}
}

// The targets of a wave are opened at once, not one hub write after another: each write that
// opens a target waits (up to 10s) until all three are in flight.
func TestWaveOpensItsClustersAtOnce(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	var mu sync.Mutex
	inFlight, most := 0, 0
	all := make(chan struct{})
	open := sync.OnceFunc(func() { close(all) })
	cfg := testenv.ControllerConfig(t, suite.Env.Hub, f.NS)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodPatch || !strings.Contains(req.URL.Path, "/rollouttargets/") || strings.HasSuffix(req.URL.Path, "/status") || req.Body == nil {
				return rt.RoundTrip(req)
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			if !bytes.Contains(body, []byte(`"start":true`)) {
				return rt.RoundTrip(req)
			}
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			if inFlight == 3 {
				open()
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
			}
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
			return rt.RoundTrip(req)
		})
	})
	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true, GatePoll: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if most != 3 {
		t.Errorf("the wave's three targets must be opened at once: at most %d of the writes that open them were in flight together", most)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
