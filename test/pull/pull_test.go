//go:build !unit

// Package pull runs one Rollout over a mixed fleet: two push members the hub reaches
// (member1, member2) and two pull members (member3, member4) joined with `rewind clusters
// join`, whose agents run their targets. Each agent is `rewind agent` in a process of its
// own, as it would be a pod in its cluster; the hub's controller reaches neither pull member.
// Every test ends with every member compared object by object with its expected state.
package pull

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/agentproc"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

var pullMembers = []string{"member3", "member4"}

var suite = fleet.Suite{Pull: pullMembers}

// noFaults is the member proxies' setting between tests: in place, injecting nothing.
var noFaults = testbed.Faults{HTTPProxy: true}

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 4, Workloads: true, MemberFaults: &noFaults}, &suite.Env)
}

// allAtOnce is one wave of the four members.
func allAtOnce() []v1alpha1.Wave {
	return []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3", "member4"}, MaxConcurrency: 4}}
}

var (
	buildOnce sync.Once
	rewindBin string
	buildErr  error
)

// binary builds rewind once per run into the testbed's state folder (removed with it).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		rewindBin, buildErr = agentproc.BuildRewind(filepath.Join(suite.Env.StateDir, "bin"))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return rewindBin
}

var (
	joinOnce sync.Once
	joinErr  error
)

// joined joins the pull members once per run (rewind clusters join, as a person does); their
// bootstrap kubeconfigs and credential files are in the testbed's state folder.
func joined(t *testing.T) {
	t.Helper()
	suite.Hub(t)
	bin := binary(t)
	joinOnce.Do(func() {
		for i, name := range pullMembers {
			if joinErr = agentproc.Join(context.Background(), bin, suite.Env.Hub.Kubeconfig, name, bootstrapFile(name),
				"--label", "env=test", "--label", fmt.Sprintf("index=%d", i+3)); joinErr != nil {
				return
			}
		}
	})
	if joinErr != nil {
		t.Fatal(joinErr)
	}
}

func bootstrapFile(name string) string {
	return filepath.Join(suite.Env.StateDir, name+".bootstrap.yaml")
}

// agent is a pull member's `rewind agent` process.
type agent struct {
	t *testing.T
	*agentproc.Agent
}

// startAgent runs the agent of a pull member until the test ends.
func startAgent(t *testing.T, name string) *agent {
	t.Helper()
	joined(t)
	return startAgentWith(t, name, filepath.Join(suite.Env.StateDir, name+".credential.json"), filepath.Join(suite.Env.StateDir, name+".agent.log"))
}

// startAgentWith runs the agent of a pull member with credential file cred (the bootstrap
// token is spent with the first), its output appended to log, until the test ends.
func startAgentWith(t *testing.T, name, cred, log string) *agent {
	t.Helper()
	p, err := agentproc.Start(agentproc.Options{Bin: binary(t), Cluster: name,
		CredentialFile: cred, BootstrapFile: bootstrapFile(name),
		MemberKubeconfig: suite.Member(t, name).Kubeconfig, Args: []string{"--heartbeat-interval", "1s", "--gate-poll", "300ms"},
		Log: log})
	if err != nil {
		t.Fatal(err)
	}
	a := &agent{t: t, Agent: p}
	t.Cleanup(func() { a.stop(syscall.SIGTERM) })
	return a
}

// start starts the agent again.
func (a *agent) start() {
	a.t.Helper()
	if err := a.Start(); err != nil {
		a.t.Fatal(err)
	}
}

// stop sends sig to the agent's process (its own, by PID) and waits for it to end.
func (a *agent) stop(sig syscall.Signal) { a.Stop(sig) }

// exited says whether the agent's process ended by itself.
func (a *agent) exited() bool { return a.Exited() }

// mixedFleet is a fleet over the four members with both pull members' agents running.
func mixedFleet(t *testing.T) (*fleet.Fleet, map[string]*agent) {
	t.Helper()
	joined(t)
	f := suite.New(t, allAtOnce())
	for _, name := range pullMembers {
		bind(t, name, f.NS)
	}
	agents := map[string]*agent{}
	for _, name := range pullMembers {
		agents[name] = startAgent(t, name)
	}
	suite.StartManager(t, f.NS, controller.Options{})
	return f, agents
}

// copyOf reads a pull member's copy of the fleet's target of cluster.
func copyOf(t *testing.T, f *fleet.Fleet, cluster string) *v1alpha1.RolloutTarget {
	t.Helper()
	cp := &v1alpha1.RolloutTarget{}
	src := f.Target(cluster)
	if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.MemberNamespace(cluster), Name: target.CopyName(src)}, cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

// assertAll checks every member's record names rel and its operator state equals snapshot
// snaps[member] (whole: true; else the state a release does not change).
func assertAll(t *testing.T, f *fleet.Fleet, rel string, snaps map[string]string, whole bool) {
	t.Helper()
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec == nil || rec.Release != rel || rec.Rollout != f.NS+"/"+f.Name {
			t.Errorf("%s record %+v, want %s of rollout %s/%s", m.Name, rec, rel, f.NS, f.Name)
		}
		if snaps[m.Name] == "" {
			t.Errorf("%s: no snapshot of the revision: %v", m.Name, snaps)
			continue
		}
		if whole {
			f.AssertEqualsSnapshot(m, snaps[m.Name])
		} else {
			f.AssertStateUnchangedSince(m, snaps[m.Name])
		}
	}
}

// TestMixedFleetUpgradeFailedGateAndRollback: one Rollout over two push and two pull members
// upgrades all four, rolls all four back at a person's word, and rolls all four back when
// the next release's health gates fail (RollbackAll); each ends with every member compared with
// its snapshot object by object. The pull members' snapshots are in their hub namespaces,
// the hub held no credential of theirs, and the targets' status shows what their agents did.
func TestMixedFleetUpgradeFailedGateAndRollback(t *testing.T) {
	f, _ := mixedFleet(t)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	f.Populate()

	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 4*time.Minute)
	upgrade := f.SnapshotsOf(ro.Status.Revision)
	assertAll(t, f, "mysql-b", upgrade, false)
	for _, name := range pullMembers {
		if _, ok := upgrade[name]; !ok {
			continue
		}
		snap := &v1alpha1.Snapshot{}
		if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.MemberNamespace(name), Name: upgrade[name]}, snap); err != nil {
			t.Errorf("pull member %s's snapshot must be in its hub namespace: %v", name, err)
		}
		if cp := copyOf(t, f, name); cp.Status.Phase != v1alpha1.ClusterSucceeded || cp.Status.Revision != ro.Status.Revision {
			t.Errorf("%s's copy: %+v", name, cp.Status)
		}
	}

	// A MySQLCluster created on a pull member since the upgrade's snapshot: the rollback keeps
	// it (spec.pruneOnRollback is off) and says so on the Rollout, as for a push member, though
	// the agent may not write Events there: its note in the copy's status is relayed.
	const kept = "member3"
	if err := testfixture.Populate(t.Context(), suite.Member(t, kept).RESTConfig(), testfixture.Options{Namespaces: []string{f.CRNS}, Offset: 100, Count: 1}); err != nil {
		t.Fatal(err)
	}

	// A person's rollback to mysql-a: back to the snapshots taken before mysql-b.
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "mixed fleet")
	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	assertAll(t, f, "mysql-a", upgrade, true)
	keptNote := kept + ": kept 1 objects created since snapshot " + upgrade[kept]
	f.WaitEvent("KeptSinceSnapshot", keptNote, f.CRNS+"/db-00100")
	if notes := f.Target(kept).Status.Notes; len(notes) != 1 || notes[0].Reason != "KeptSinceSnapshot" || !strings.Contains(notes[0].Message, keptNote) {
		t.Errorf("%s's target notes %+v, want its KeptSinceSnapshot", kept, notes)
	}

	// A failed gate: every member goes back to its snapshot of mysql-a.
	bad := failAndRollBackAll(t, f)
	assertAll(t, f, "mysql-a", f.SnapshotsOf(bad.Revision), true)
}

// failAndRollBackAll rolls out mysql-bad, whose gate fails, with failure policy RollbackAll,
// waits for the fleet to be rolled back to mysql-a, and returns the failed revision's entry.
func failAndRollBackAll(t *testing.T, f *fleet.Fleet) v1alpha1.Revision {
	t.Helper()
	after := f.Rollout().Status.Revision
	f.SetRelease("mysql-bad", func(s *v1alpha1.RolloutSpec) { s.FailurePolicy = v1alpha1.FailurePolicyRollbackAll })
	poll(t, "the failed release's revision", 2*time.Minute, func(context.Context) (bool, error) {
		return f.Rollout().Status.Revision > after, nil
	})
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	bad := ro.Status.History[len(ro.Status.History)-2]
	if bad.Release != "mysql-bad" || bad.Outcome != "RolledBack" {
		t.Fatalf("history: %+v", ro.Status.History)
	}
	return bad
}

// TestAgentKilledDuringRestoreResumes: a pull member's agent killed (SIGKILL) in the middle of
// its restore leaves the target waiting as an unreachable push member's does once its
// heartbeat is lost; started again, the agent resumes the restore from its journal, which it
// keeps in its member, not on the hub (no step of it twice, the upgrade's snapshot not taken
// again), and the member ends equal to its snapshot, as an uninterrupted restore leaves it.
func TestAgentKilledDuringRestoreResumes(t *testing.T) {
	const victim = "member3"
	f, agents := mixedFleet(t)
	setPullTimeouts(t, victim, 4*time.Second)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 4*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	upgraded := copyOf(t, f, victim)

	// Killed as soon as the agent's journal in its member holds the restore's first point: a
	// watch, not a poll, so that the kill lands inside the restore.
	journal := client.ObjectKey{Namespace: member.RecordNamespace, Name: target.MemberJournalName(upgraded.Name)}
	mc, err := client.NewWithWatch(suite.Member(t, victim).RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := mc.Watch(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(journal.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", journal.Name)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "crash test")
	deadline := time.After(4 * time.Minute)
	killed := false
	for !killed {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				t.Fatal("the watch of the member's restore journal ended")
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && cm.Data["completed"] != "" {
				agents[victim].stop(syscall.SIGKILL)
				killed = true
			}
		case <-deadline:
			t.Fatal("the agent never journaled a point of its restore")
		}
	}
	cm := &corev1.ConfigMap{}
	if err := mc.Get(t.Context(), journal, cm); err != nil {
		t.Fatal(err)
	}
	journaled := strings.Split(cm.Data["completed"], ",")
	atKill := copyOf(t, f, victim)
	if atKill.Status.Step != target.StepRestore || target.Terminal(atKill.Status.Phase) {
		t.Fatalf("the kill did not land inside the restore: the copy says %s %s", atKill.Status.Phase, atKill.Status.Step)
	}
	if len(atKill.Status.RestoreSteps) != 0 {
		t.Errorf("the agent wrote its restore's points to the hub (%v): they are journaled in the member (%v)", atKill.Status.RestoreSteps, journaled)
	}

	// While the agent is down, its target waits (MemberUnreachable), as a push member's does.
	poll(t, "the target of the killed agent's member waiting", 2*time.Minute, func(ctx context.Context) (bool, error) {
		tt := f.Target(victim)
		return tt.Status.WaitingFor == v1alpha1.ReasonMemberUnreachable && tt.Status.Phase == v1alpha1.ClusterRollingBack, nil
	})
	if p := f.Rollout().Status.Phase; p == v1alpha1.RolloutRolledBack || p == v1alpha1.RolloutFailed {
		t.Fatalf("the rollout ended (%s) while a member's restore is not done", p)
	}

	agents[victim].start()
	ro = f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	done := copyOf(t, f, victim)
	if done.Status.StartedAt == nil || atKill.Status.StartedAt == nil || !done.Status.StartedAt.Equal(atKill.Status.StartedAt) {
		t.Errorf("the restore started again instead of resuming: started %v before the kill, %v after", atKill.Status.StartedAt, done.Status.StartedAt)
	}
	// Every point once, in order, reported to the hub with the restore's next step; those
	// journaled before the kill were not run again.
	if !slices.Equal(done.Status.RestoreSteps, restore.Steps) {
		t.Errorf("the copy's restore steps after the restore: %v, want %v (each once)", done.Status.RestoreSteps, restore.Steps)
	}
	if len(journaled) > len(done.Status.RestoreSteps) || !slices.Equal(done.Status.RestoreSteps[:len(journaled)], journaled) {
		t.Errorf("the journal was not resumed: %v in the member before the kill, %v after", journaled, done.Status.RestoreSteps)
	}
	if err := mc.Get(t.Context(), journal, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the member's restore journal %s stays after the restore ended (%v)", journal, err)
	}
	if upgraded.Status.Snapshot != snaps[victim] {
		t.Errorf("the upgrade's snapshot %s, the revision's %s", upgraded.Status.Snapshot, snaps[victim])
	}
	if tt := f.Target(victim); tt.Status.WaitingFor != "" || tt.Status.Phase != v1alpha1.ClusterRolledBack {
		t.Errorf("the target after the agent came back: %s, waiting for %q", tt.Status.Phase, tt.Status.WaitingFor)
	}
	assertAll(t, f, "mysql-a", snaps, true)
}

// TestAgentRidesOutFaults: the pull members' agents upgrade and roll back while their API
// servers' proxies reset connections every few seconds and answer a fifth of requests with
// 429 or 5xx: faults are retried, never a verdict, and the result is an undisturbed run's.
func TestAgentRidesOutFaults(t *testing.T) {
	f, agents := mixedFleet(t)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	f.Populate()
	faults := testbed.Faults{HTTPProxy: true, ResetEvery: 3 * time.Second,
		HTTP: testbed.HTTPFaults{Fraction: 0.2, Codes: []int{429, 500, 503, 504}}}
	for _, name := range pullMembers {
		if err := suite.Member(t, name).Faults().Set(faults); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range pullMembers {
			_ = suite.Member(t, name).Faults().Set(noFaults)
			suite.Member(t, name).Faults().Heal()
		}
	})
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 6*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "under faults")
	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 6*time.Minute)
	var injected testbed.FaultCounts
	for _, name := range pullMembers {
		injected = injected.Add(suite.Member(t, name).Faults().Counts())
		_ = suite.Member(t, name).Faults().Set(noFaults)
		suite.Member(t, name).Faults().Heal()
		if agents[name].exited() {
			t.Errorf("the agent of %s exited under faults", name)
		}
	}
	if injected.HTTPFaults == 0 || injected.ConnsReset == 0 {
		t.Fatal("no fault was injected: the test proves nothing")
	}
	t.Logf("faults injected on the pull members: %s", injected)
	assertRolledBack(t, f, "mysql-a", snaps)
}

// assertRolledBack checks that every target of rel ended RolledBack and that every member runs
// rel, its operator state equal to its snapshot in snaps.
func assertRolledBack(t *testing.T, f *fleet.Fleet, rel string, snaps map[string]string) {
	t.Helper()
	for _, tt := range f.PhasesFor(rel) {
		if tt != v1alpha1.ClusterRolledBack {
			t.Errorf("phases after the rollback: %v", f.PhasesFor(rel))
			break
		}
	}
	assertAll(t, f, rel, snaps, true)
}

// bind lets Rollouts of namespace ns target member name (spec.boundNamespaces) until the
// test ends.
func bind(t *testing.T, name, ns string) {
	t.Helper()
	c := suite.Hub(t)
	set := func(add bool) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			mc := &v1alpha1.MemberCluster{}
			if err := c.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
				return err
			}
			mc.Spec.BoundNamespaces = slices.DeleteFunc(mc.Spec.BoundNamespaces, func(s string) bool { return s == ns })
			if add {
				mc.Spec.BoundNamespaces = append(mc.Spec.BoundNamespaces, ns)
			}
			return c.Update(context.Background(), mc)
		})
	}
	if err := set(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(false); err != nil {
			t.Errorf("unbinding %s from %s: %v", name, ns, err)
		}
	})
}

// TestPullMemberNeedsBinding: a Rollout may target a pull member only from a namespace the
// member is bound to: unbound, naming it stalls the Rollout before any cluster changes, with
// the fix in the message. Bound, the Rollout goes on by itself. (Push members stay
// targetable from every namespace while unbound: every other test targets them so.)
func TestPullMemberNeedsBinding(t *testing.T) {
	joined(t)
	f := suite.New(t, []v1alpha1.Wave{{Name: "edge", Clusters: []string{"member3"}, MaxConcurrency: 1}})
	startAgent(t, "member3")
	suite.StartManager(t, f.NS, controller.Options{})
	c := f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, 2*time.Minute)
	if !strings.Contains(c.Message, `"member3", which is not bound to namespace `+f.NS) || !strings.Contains(c.Message, "boundNamespaces") {
		t.Errorf("Stalled must say member3 is not bound to %s, and how to bind it: %s", f.NS, c.Message)
	}
	if rec := f.Record(suite.Member(t, "member3")); rec != nil {
		t.Fatalf("an unbound member was changed: %+v", rec)
	}
	var targets v1alpha1.RolloutTargetList
	if err := suite.Hub(t).List(t.Context(), &targets, client.InNamespace(f.NS)); err != nil || len(targets.Items) != 0 {
		t.Fatalf("no target may be planned for an unbound member: %d (%v)", len(targets.Items), err)
	}

	// Bound, the stalled Rollout goes on by itself: member3, run by its agent.
	bind(t, "member3", f.NS)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	if p := f.Phases(); len(p) != 1 || p["member3"] != v1alpha1.ClusterSucceeded {
		t.Fatalf("bound, member3 must be targeted: %v", p)
	}
	if rec := f.Record(suite.Member(t, "member3")); rec == nil || rec.Release != "mysql-a" {
		t.Fatalf("member3's record %+v, want mysql-a", rec)
	}
}

// setPullTimeouts makes a pull member's heartbeat grace period (unreachableTimeout) d and
// its check interval a second, until the test ends.
func setPullTimeouts(t *testing.T, name string, d time.Duration) {
	t.Helper()
	c := suite.Hub(t)
	set := func(timeout, interval *metav1.Duration) error {
		mc := &v1alpha1.MemberCluster{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		mc.Spec.UnreachableTimeout, mc.Spec.CheckInterval = timeout, interval
		return c.Update(context.Background(), mc)
	}
	if err := set(&metav1.Duration{Duration: d}, &metav1.Duration{Duration: time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(nil, nil); err != nil {
			t.Errorf("resetting %s's timeouts: %v", name, err)
		}
	})
}

func poll(t *testing.T, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s did not happen: %v", what, err)
	}
}
