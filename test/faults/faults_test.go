//go:build !unit

// Package faults runs rewind's rollouts and rollbacks through the faults real fleets meet: a
// proxy in front of every member that resets every open connection and refuses new ones for a
// moment (a load balancer failing over, a managed control plane restarting), answers 429s and
// 5xx, or cuts a member off; and a member's kube-apiserver restarted in the middle of a step.
// Faults are not failures: every test ends with the same result an undisturbed run gives,
// every member compared object by object with its expected state.
package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

var suite fleet.Suite

// noFaults is the proxy's setting between tests: in place (TCP and HTTP layers), injecting
// nothing.
var noFaults = testbed.Faults{HTTPProxy: true}

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true, MemberFaults: &noFaults}, &suite.Env)
}

// allAtOnce is one wave of the three members.
func allAtOnce() []v1alpha1.Wave {
	return []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}}
}

// inject sets the faults of every member until the test ends, and returns a function that
// stops them early (so that the test checks the members without them).
func inject(t *testing.T, f testbed.Faults) (stop func()) {
	t.Helper()
	f.HTTPProxy = true
	if err := suite.Env.SetMemberFaults(f); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := suite.Env.SetMemberFaults(noFaults); err != nil {
				t.Errorf("turning the faults off: %v", err)
			}
			for _, m := range suite.Env.Members {
				m.Faults().Heal()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// resetOnEveryStep resets a member's connections, and refuses new ones for RefuseFor, each
// time one of its targets moves to another phase or step, until the test ends or stop is
// called. The periodic resets alone may miss a rollout that takes a few seconds; with these,
// every step rewind starts meets a fault, whatever the machine's pace.
func resetOnEveryStep(t *testing.T, f *fleet.Fleet) (stop func()) {
	t.Helper()
	members := map[string]*testbed.FaultInjector{}
	for _, m := range suite.Env.Members {
		members[m.Name] = m.Faults()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := map[string]string{}
		_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var list v1alpha1.RolloutTargetList
			if err := f.Hub().List(ctx, &list, client.InNamespace(f.NS), client.MatchingLabels{v1alpha1.LabelRollout: f.Name}); err != nil {
				return false, nil
			}
			for _, tg := range list.Items {
				at := fmt.Sprintf("%d/%s/%s/%s", tg.Status.Revision, tg.Status.Path, tg.Status.Phase, tg.Status.Step)
				if prev, ok := seen[tg.Spec.Cluster]; ok && prev != at {
					if fi := members[tg.Spec.Cluster]; fi != nil {
						fi.ResetNow()
					}
				}
				seen[tg.Spec.Cluster] = at
			}
			return false, nil
		})
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// faultRetries is how many faults rewind rode out so far: requests to the members sent again
// (the package's tests run one at a time, so they are this test's) and steps of the fleet run
// again.
func faultRetries(t *testing.T, f *fleet.Fleet) float64 {
	return fleet.Metric(t, "rewind_member_request_retries_total", nil) +
		fleet.Metric(t, "rewind_fault_retries_total", map[string]string{"namespace": f.NS})
}

// assertNoFailure checks that nothing failed: no failed release held, no automatic rollback,
// no failed target in the current revision.
func assertNoFailure(t *testing.T, f *fleet.Fleet) {
	t.Helper()
	ro := f.Rollout()
	if ro.Status.FailedRelease != "" || len(ro.Status.Failures) > 0 || ro.Status.Targets.Failed > 0 {
		t.Errorf("a fault is not a failure: failed release %q, failures %+v, targets %+v", ro.Status.FailedRelease, ro.Status.Failures, ro.Status.Targets)
	}
	if n := f.CountEvents("AutomaticRollback"); n > 0 {
		t.Errorf("faults rolled the fleet back %d times", n)
	}
}

// assertRuns checks that every member runs release, without drift: its installed-version
// record names it, and `rewind clusters check` finds what runs equal to the release.
func assertRuns(t *testing.T, f *fleet.Fleet, release string) {
	t.Helper()
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != release {
			t.Errorf("%s: record %+v, want %s", m.Name, rec, release)
		}
	}
	out := suite.Rewind(t, f.NS, "clusters", "check", "--operator", fleet.Operator, "--expect", release)
	if strings.Count(out, "OK") < len(suite.Env.Members) {
		t.Errorf("clusters check must find every member on %s without drift:\n%s", release, out)
	}
}

// upgraded brings a populated fleet to mysql-a, then upgrades it to mysql-b without faults,
// and returns the snapshots the upgrade took.
func upgraded(t *testing.T, f *fleet.Fleet) map[string]string {
	t.Helper()
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	return f.SnapshotsOf(ro.Status.Revision)
}

// An upgrade across three members while every connection to them is reset every few seconds
// (and new ones refused for a moment and a half after each reset): every cluster succeeds,
// nothing is rolled back, and each member runs the new release with its custom resources as
// they were.
func TestUpgradeUnderResets(t *testing.T) {
	f := suite.New(t, allAtOnce())
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	before, retried := suite.Env.FaultCounts(), faultRetries(t, f)

	stop := inject(t, testbed.Faults{ResetEvery: 3 * time.Second})
	stopSteps := resetOnEveryStep(t, f)
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 5*time.Minute)
	stopSteps()
	stop()
	injected := suite.Env.FaultCounts()
	t.Logf("faults injected: %s (before the upgrade: %s); fault retries: %.0f", injected, before, faultRetries(t, f)-retried)
	if injected.Resets == before.Resets || injected.ConnsReset+injected.ConnsRefused == before.ConnsReset+before.ConnsRefused {
		t.Fatalf("no fault was injected during the upgrade: the test proves nothing (%s)", injected)
	}
	if faultRetries(t, f) == retried {
		t.Errorf("rewind met no fault: the test proves nothing")
	}
	assertNoFailure(t, f)
	assertRuns(t, f, "mysql-b")
	for m, snap := range f.SnapshotsOf(ro.Status.Revision) {
		f.AssertStateUnchangedSince(suite.Member(t, m), snap)
	}
}

// A person's rollback while every connection is reset every few seconds ends RolledBack, and
// every member is exactly its snapshot again.
func TestRollbackUnderResets(t *testing.T) {
	f := suite.New(t, allAtOnce())
	suite.StartManager(t, f.NS, controller.Options{})
	snaps := upgraded(t, f)
	retried := faultRetries(t, f)

	stop := inject(t, testbed.Faults{ResetEvery: 3 * time.Second})
	stopSteps := resetOnEveryStep(t, f)
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "rolled back under resets")
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	stopSteps()
	stop()
	t.Logf("faults injected: %s; fault retries: %.0f", suite.Env.FaultCounts(), faultRetries(t, f)-retried)
	if faultRetries(t, f) == retried {
		t.Errorf("rewind met no fault: the test proves nothing")
	}
	if ro.Status.Targets.RolledBack != 3 || ro.Status.Targets.Failed != 0 {
		t.Errorf("every cluster must be restored, none failed: %+v", ro.Status.Targets)
	}
	assertRuns(t, f, "mysql-a")
	for _, m := range suite.Env.Members {
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
}

// 429s (with Retry-After) and 500, 503 and 504 answers for a fifth of the requests to every
// member, through an upgrade and a person's rollback: both end as they would without them.
func TestThrottledAndFailingRequests(t *testing.T) {
	injected := upgradeAndRollBackUnder(t, testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 0.2, Codes: []int{429, 500, 503, 504}}})
	for _, code := range []int{429, 500, 503, 504} {
		if injected.HTTPByCode[code] == 0 {
			t.Errorf("no %d was injected: the test proves less than it says", code)
		}
	}
}

// Three in ten of the writes to every member are done and their answers lost (the connection
// breaks after the member's API server acted: the fault that tells whether sending a write
// again is safe), through an upgrade and a person's rollback: both end as they would without
// them.
func TestWritesWhoseAnswersAreLost(t *testing.T) {
	injected := upgradeAndRollBackUnder(t, testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 0.3, LoseAnswers: true, MutatingOnly: true}})
	if injected.HTTPByCode[0] == 0 {
		t.Errorf("no answer was lost: the test proves nothing")
	}
}

// upgradeAndRollBackUnder upgrades a populated fleet to mysql-b and rolls it back to mysql-a
// (a person's rollback) with faults on every member's way, and checks that both end as they
// would without them: nothing fails or is rolled back by the faults, every cluster is
// restored, and every member is its snapshot again. It returns the HTTP faults injected, by
// code (0: an answer lost).
func upgradeAndRollBackUnder(t *testing.T, faults testbed.Faults) (injected testbed.FaultCounts) {
	t.Helper()
	f := suite.New(t, allAtOnce())
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	before := suite.Env.FaultCounts()

	stop := inject(t, faults)
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 5*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	assertNoFailure(t, f)
	suite.Rewind(t, f.NS, "rollback", f.Name)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	stop()
	after := suite.Env.FaultCounts()
	injected = testbed.FaultCounts{HTTPRequests: after.HTTPRequests - before.HTTPRequests, HTTPFaults: after.HTTPFaults - before.HTTPFaults, HTTPByCode: map[int]int64{}}
	for code, n := range after.HTTPByCode {
		if d := n - before.HTTPByCode[code]; d > 0 {
			injected.HTTPByCode[code] = d
		}
	}
	t.Logf("HTTP faults injected: %s", injected)
	if ro.Status.Targets.RolledBack != 3 || ro.Status.Targets.Failed != 0 {
		t.Errorf("every cluster must be restored, none failed: %+v", ro.Status.Targets)
	}
	assertRuns(t, f, "mysql-a")
	for _, m := range suite.Env.Members {
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
	return injected
}

// The controller reaches its hub through a fault proxy that resets its connections every 3 s,
// loses the answers of a fifth of its writes (done by the hub) through an upgrade, and answers
// a fifth of its requests with 429, 500, 503 or 504 (a hub API server restarting behind its
// load balancer, or one under load) through a person's rollback: both
// end as they would without them, nothing fails and nothing is rolled back by the faults, and
// every member is its snapshot again. (The other tests of the package fault the way to the
// members; test/pull's, the agents' way to the hub.)
func TestControllerRidesOutFaultsOfItsHub(t *testing.T) {
	proxy, err := suite.Env.Hub.StartFaultProxy(testbed.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	f := suite.New(t, allAtOnce())
	suite.StartManagerVia(t, f.NS, proxy.Server, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()

	// The upgrade (which creates the targets and the Snapshots): a fifth of the controller's
	// writes are done by the hub and their answers lost.
	if err := proxy.Faults().Set(testbed.Faults{HTTPProxy: true, ResetEvery: 3 * time.Second,
		HTTP: testbed.HTTPFaults{Fraction: 0.2, LoseAnswers: true, MutatingOnly: true}}); err != nil {
		t.Fatal(err)
	}
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 5*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	assertNoFailure(t, f)
	upgrade := proxy.Faults().Counts()
	if err := proxy.Faults().Set(testbed.Faults{HTTPProxy: true, ResetEvery: 3 * time.Second,
		HTTP: testbed.HTTPFaults{Fraction: 0.2, Codes: []int{429, 500, 503, 504}}}); err != nil {
		t.Fatal(err)
	}
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "under faults of the controller's way to its hub")
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	injected := proxy.Faults().Counts()
	proxy.Faults().SetEnabled(false)
	t.Logf("faults injected on the controller's way to its hub: %s", injected)
	if upgrade.HTTPByCode[0] == 0 || injected.HTTPFaults == upgrade.HTTPFaults || injected.ConnsReset == 0 {
		t.Fatalf("a fault was not injected on the way to the hub (%s): the test proves less than it says", injected)
	}
	if ro.Status.Targets.RolledBack != 3 || ro.Status.Targets.Failed != 0 {
		t.Errorf("every cluster must be restored, none failed: %+v", ro.Status.Targets)
	}
	assertRuns(t, f, "mysql-a")
	for _, m := range suite.Env.Members {
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
}

// restartAt returns a CrashAt hook that restarts member's kube-apiserver (same etcd, same
// port) the first time step starts on it, and goes on: the step then meets an API server that
// is down, then starting. The test waits for the restart to be over when it ends.
func restartAt(t *testing.T, memberName, step string) func(cluster, s string) bool {
	m := suite.Member(t, memberName)
	var once sync.Once
	var done <-chan error
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if done == nil {
			t.Errorf("%s never started %s: the test proves nothing", memberName, step)
			return
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return func(cluster, s string) bool {
		if cluster == memberName && s == step {
			once.Do(func() {
				mu.Lock()
				defer mu.Unlock()
				done = m.BeginRestartAPIServer(context.Background())
			})
		}
		return false
	}
}

// A member's kube-apiserver restarted while a step runs on it: the step resumes when it is
// back, and the cluster ends as an undisturbed run leaves it.
func TestAPIServerRestartedDuringAStep(t *testing.T) {
	for _, step := range []string{target.StepSnapshot, target.StepApplyWorkloads} {
		t.Run(step, func(t *testing.T) {
			f := suite.New(t, allAtOnce())
			stopManager := suite.StartManager(t, f.NS, controller.Options{})
			f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
			f.Populate()
			stopManager()
			suite.StartManager(t, f.NS, controller.Options{CrashAt: restartAt(t, "member2", step)})
			// The member's own controllers (its kube-controller-manager's informers) back off
			// while their API server is down, up to 30 s between tries, and see the new
			// Deployment only after that: the health gate's usual 20 s could end before the
			// deployment controller saw it (a loaded CI machine failed so, at ApplyWorkloads).
			// That is the member's recovery, not rewind's; rewind's part (the step resumed, no
			// failure) is what this test checks.
			f.SetRelease("mysql-b", func(s *v1alpha1.RolloutSpec) { s.HealthGates.Timeout = &metav1.Duration{Duration: 2 * time.Minute} })
			ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 5*time.Minute)
			assertNoFailure(t, f)
			assertRuns(t, f, "mysql-b")
			for m, snap := range f.SnapshotsOf(ro.Status.Revision) {
				f.AssertStateUnchangedSince(suite.Member(t, m), snap)
			}
		})
	}
}

// A member's kube-apiserver restarted in the middle of a rollback's storage migration (the
// release rolled back from stores MySQLClusters at v1beta1; the snapshot's CRD at v1alpha1):
// the restore resumes when the API server is back, and every member is exactly its snapshot,
// CRDs (storage version, storedVersions) included.
func TestAPIServerRestartedDuringTheStorageMigration(t *testing.T) {
	f := suite.New(t, allAtOnce())
	if err := testfixture.CreateReleaseWithCRD(t.Context(), suite.Hub(t), t.TempDir(), f.NS, "mysql-c", "3.0.0", fleet.Healthy, testfixture.MySQLCRDv1beta1YAML); err != nil {
		t.Fatal(err)
	}
	stopManager := suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-c", nil)
	ro := f.WaitPhase("mysql-c", v1alpha1.RolloutSucceeded, 3*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	// Every custom resource is written again under the new release: stored at v1beta1.
	for _, m := range suite.Env.Members {
		if err := testfixture.Touch(t.Context(), m.RESTConfig(), f.CRNS); err != nil {
			t.Fatal(err)
		}
	}
	stopManager()
	suite.StartManager(t, f.NS, controller.Options{CrashAt: restartAt(t, "member2", "Restore: migrate mysqlclusters.database.example.com")})
	suite.Rewind(t, f.NS, "rollback", f.Name)
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	if ro.Status.Targets.RolledBack != 3 || ro.Status.Targets.Failed != 0 {
		t.Errorf("every cluster must be restored, none failed: %+v", ro.Status.Targets)
	}
	assertRuns(t, f, "mysql-a")
	for _, m := range suite.Env.Members {
		f.AssertEqualsSnapshot(m, snaps[m.Name])
	}
}

// A member cut off for longer than its unreachableTimeout: its target waits (the default
// unreachablePolicy, Hold) and the Rollout's Waiting condition says so; the other clusters and
// the Rollout fail nothing. When the member is reachable again the rollout goes on by itself
// and every member runs the new release.
func TestMemberCutOffPastItsTimeoutWaitsThenGoesOn(t *testing.T) {
	f := suite.New(t, allAtOnce())
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	const cut = "member3"
	suite.SetUnreachableTimeout(t, cut, 5*time.Second)
	inject(t, testbed.Faults{}) // the proxy in place; member3 alone is cut off
	suite.Member(t, cut).Faults().RefuseFor(10 * time.Minute)
	f.SetRelease("mysql-b", nil)

	var ro *v1alpha1.Rollout
	// The Rollout's preflight reads each member before the wave opens: the cut-off one is not
	// read past its budget (each refused read is retried: about 95 s in all before the budget,
	// in CI run 4 of 2026-12-03), or not at all once its health probe finds it unreachable.
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		ro = f.Rollout()
		c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionWaiting)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonMemberUnreachable && strings.Contains(c.Message, cut), nil
	})
	if err != nil {
		t.Fatalf("the Rollout must say %s is unreachable and waited for: %+v", cut, ro.Status.Conditions)
	}
	if st := f.Target(cut).Status; st.WaitingFor != v1alpha1.ReasonMemberUnreachable || st.Phase != v1alpha1.ClusterUpgrading {
		t.Errorf("%s's target must wait: %+v", cut, st)
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionPreflight); c == nil ||
		!(strings.Contains(c.Message, cut+" (not read within") || strings.Contains(c.Message, cut+" (unreachable since")) {
		t.Errorf("the preflight must not read %s past its budget, nor once its probe finds it unreachable: %+v", cut, c)
	}
	assertNoFailure(t, f)

	suite.Member(t, cut).Faults().Heal()
	ro = f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionWaiting); c != nil {
		t.Errorf("nothing waits any more: %+v", c)
	}
	assertNoFailure(t, f)
	assertRuns(t, f, "mysql-b")
}

// A dry run (spec.dryRun) and rewind plan while one member is cut off: the others are planned,
// and the cut-off one is reported as not planned, not waited for. Before, each of its refused
// requests was retried and the plan of the member started again from the beginning up to four
// times: the Planned condition came minutes later (the preflight's budget, be098c0, did not
// cover the dry run), and rewind plan waited as long.
func TestDryRunAndPlanGoOnPastACutOffMember(t *testing.T) {
	f := suite.New(t, allAtOnce())
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	const cut = "member3"
	suite.SetUnreachableTimeout(t, cut, 5*time.Second)
	inject(t, testbed.Faults{}) // the proxy in place; member3 alone is cut off
	suite.Member(t, cut).Faults().RefuseFor(10 * time.Minute)

	// rewind plan: the cut-off member past --member-timeout is reported, the others planned.
	start := time.Now()
	out, err := cli.Run(t.Context(), "plan", f.Name, "--release", "mysql-b", "--member-timeout", "10s", "--kubeconfig", suite.Env.Hub.Kubeconfig, "-n", f.NS)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 clusters could not be planned") {
		t.Errorf("rewind plan must fail for the cut-off member alone: %v\n%s", err, out)
	}
	if took > time.Minute {
		t.Errorf("rewind plan took %s with --member-timeout 10s", took.Round(time.Second))
	}
	plans := strings.Split(out, "\n")
	for _, m := range []string{"member1", "member2"} {
		i := slices.IndexFunc(plans, func(l string) bool { return strings.HasPrefix(l, m+" ") })
		if i < 0 || !strings.Contains(plans[i], "mysql-a") {
			t.Errorf("rewind plan must plan %s (installed mysql-a):\n%s", m, out)
		}
	}
	if !strings.Contains(out, cut+":\n  cannot be planned: not planned within 10s") {
		t.Errorf("rewind plan must say %s was not planned within 10s:\n%s", cut, out)
	}

	// The controller's probe finds member3 unreachable; a dry run does not read it then.
	err = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		mc := &v1alpha1.MemberCluster{}
		if err := f.Hub().Get(ctx, client.ObjectKey{Name: cut}, mc); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionFalse(mc.Status.Conditions, v1alpha1.ConditionReachable), nil
	})
	if err != nil {
		t.Fatalf("%s must be found unreachable: %v", cut, err)
	}
	revision := f.Rollout().Status.Revision
	f.SetRelease("mysql-b", func(s *v1alpha1.RolloutSpec) { s.DryRun = true })
	c := f.WaitCondition(v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, 90*time.Second)
	ro := f.Rollout()
	if ro.Status.Revision != revision {
		t.Errorf("the dry run started a revision: %d (was %d)", ro.Status.Revision, revision)
	}
	if !strings.Contains(c.Message, "1 clusters could not be planned") {
		t.Errorf("the Planned condition must count the cut-off member: %s", c.Message)
	}
	p := ro.Status.Plan
	if p == nil || len(p.Clusters) != 3 {
		t.Fatalf("status.plan: %+v", p)
	}
	for _, cp := range p.Clusters {
		switch {
		case cp.Cluster == cut:
			if !strings.Contains(cp.Error, "unreachable since") && !strings.Contains(cp.Error, "not planned within") {
				t.Errorf("%s's plan must say it is unreachable: %+v", cut, cp)
			}
		case cp.Error != "" || cp.Path != v1alpha1.PathUpgrade || cp.Updates == 0:
			t.Errorf("%s must be planned: %+v", cp.Cluster, cp)
		}
	}
	assertNoFailure(t, f)
}
