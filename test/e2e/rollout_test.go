//go:build !unit

// Package e2e runs rewind's rollout pipeline end to end against a real hub and three member
// clusters with workloads (kube-controller-manager, scheduler and kwok per member).
package e2e

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true}, &env)
}

var (
	hubOnce sync.Once
	hubC    client.Client
)

func hub(t *testing.T) client.Client {
	t.Helper()
	hubOnce.Do(func() {
		s := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(s)
		_ = v1alpha1.AddToScheme(s)
		c, err := client.New(env.Hub.RESTConfig(), client.Options{Scheme: s})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := install.Hub(ctx, c); err != nil {
			t.Fatal(err)
		}
		for i, m := range env.Members {
			kc, err := m.KubeconfigBytes()
			if err != nil {
				t.Fatal(err)
			}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-kubeconfig", Namespace: "rewind-system",
				Labels: map[string]string{controller.LabelMemberKubeconfig: "true"}}, Data: map[string][]byte{"kubeconfig": kc}}
			if err := c.Create(ctx, sec); err != nil {
				t.Fatal(err)
			}
			mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: map[string]string{"env": "test", "index": fmt.Sprint(i + 1)}},
				Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: sec.Name, Key: "kubeconfig"}}}
			if err := c.Create(ctx, mc); err != nil {
				t.Fatal(err)
			}
		}
		hubC = c
	})
	if hubC == nil {
		t.Fatal("hub setup failed")
	}
	return hubC
}

// startManager runs a manager until stop is called or the test ends.
// The manager authenticates as the controller's shipped ServiceAccount, with the shipped RBAC
// (enabled in the test's hub namespace ns): the suite never runs the controller as cluster-admin.
func startManager(t *testing.T, ns string, crashAt func(cluster, step string) bool) (stop func()) {
	t.Helper()
	return startManagerWith(t, ns, controller.Options{CrashAt: crashAt})
}

// startManagerWith runs a manager with options o (and the suite's addresses and gate poll).
func startManagerWith(t *testing.T, ns string, o controller.Options) (stop func()) {
	t.Helper()
	o.MetricsAddr, o.ProbeAddr, o.SkipNameValidation, o.GatePoll = "0", "0", true, 300*time.Millisecond
	mgr, err := controller.NewManager(testenv.ControllerConfig(t, env.Hub, ns), o)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.RunManager(t, mgr)
}

// operatorImage is a digest-pinned image for a release version.
func operatorImage(version string) string { return testfixture.OperatorImage(version) }

// Release variants.
const (
	healthy = ""
	// broken makes the operator Deployment unschedulable everywhere: it never becomes Available.
	broken = "      nodeSelector: {rewind.dev/no-such-node: \"true\"}\n"
	// avoidsMarked makes it unschedulable on nodes labelled rewind.dev/broken=true only.
	avoidsMarked = "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: rewind.dev/broken, operator: NotIn, values: [\"true\"]}]}]}}}\n"
)

// makeRelease creates a release of the MySQLCluster CRD and the operator Deployment.
func makeRelease(t *testing.T, ns, name, version, variant string) {
	t.Helper()
	if err := testfixture.CreateRelease(t.Context(), hub(t), t.TempDir(), ns, name, version, variant); err != nil {
		t.Fatal(err)
	}
}

// fleet is one test's world: a hub namespace with releases A, B (good) and Bad, and a rollout.
type fleet struct {
	t     *testing.T
	ns    string
	opNS  string
	crNS  string
	name  string
	waves []v1alpha1.Wave
}

func newFleet(t *testing.T, waves []v1alpha1.Wave) *fleet {
	t.Helper()
	c := hub(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	f := &fleet{t: t, ns: ns, opNS: "op-" + ns, crNS: "crs-" + ns, name: "mysql", waves: waves}
	makeRelease(t, ns, "mysql-a", "1.0.0", healthy)
	makeRelease(t, ns, "mysql-b", "2.0.0", healthy)
	makeRelease(t, ns, "mysql-bad", "2.0.1", broken)
	makeRelease(t, ns, "mysql-b-picky", "2.0.2", avoidsMarked)
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: f.name, Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: "mysql-a", InstallNamespace: f.opNS, Waves: waves,
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
	}}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Leave the members clean for the next test: no record, no CRD (so no CRs), no
		// namespaces, and wait until they are really gone.
		ctx := context.Background()
		for _, m := range env.Members {
			mc := memberClient(t, m)
			crd := &unstructured.Unstructured{}
			crd.SetAPIVersion("apiextensions.k8s.io/v1")
			crd.SetKind("CustomResourceDefinition")
			crd.SetName("mysqlclusters.database.example.com")
			objs := []client.Object{
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName("mysql-operator")}},
				crd,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.opNS}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.crNS}},
			}
			for _, o := range objs {
				_ = mc.Delete(ctx, o)
			}
			for _, o := range objs {
				err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
					err := mc.Get(ctx, client.ObjectKeyFromObject(o), o)
					return client.IgnoreNotFound(err) == nil && err != nil, nil
				})
				if err != nil {
					t.Logf("cleanup: %s %s still exists on %s", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), m.Name)
				}
			}
		}
	})
	return f
}

func memberClient(t *testing.T, m *testbed.Cluster) client.Client {
	t.Helper()
	c, err := client.New(m.RESTConfig(), client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fleet) rollout() *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	if err := hub(f.t).Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: f.name}, ro); err != nil {
		f.t.Fatal(err)
	}
	return ro
}

// setRelease asks for a release (an upgrade, or a rollback when it is an earlier one).
func (f *fleet) setRelease(rel string, mut func(*v1alpha1.RolloutSpec)) {
	f.t.Helper()
	ro := f.rollout()
	ro.Spec.Release = rel
	if mut != nil {
		mut(&ro.Spec)
	}
	if err := hub(f.t).Update(context.Background(), ro); err != nil {
		f.t.Fatal(err)
	}
}

// waitPhase waits for the rollout to reach a phase for the release.
func (f *fleet) waitPhase(release, phase string, timeout time.Duration) *v1alpha1.Rollout {
	f.t.Helper()
	var ro *v1alpha1.Rollout
	err := wait.PollUntilContextTimeout(f.t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ro = f.rollout()
		return ro.Status.CurrentRelease == release && ro.Status.Phase == phase, nil
	})
	if err != nil {
		f.t.Fatalf("rollout did not reach %s for %s: phase %s release %s, targets %+v, failures %+v, conditions %+v", phase, release, ro.Status.Phase, ro.Status.CurrentRelease, ro.Status.Targets, ro.Status.Failures, ro.Status.Conditions)
	}
	return ro
}

// target returns the rollout's target of a cluster.
func (f *fleet) target(cluster string) *v1alpha1.RolloutTarget {
	f.t.Helper()
	t := &v1alpha1.RolloutTarget{}
	if err := hub(f.t).Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: f.name + "-" + cluster}, t); err != nil {
		f.t.Fatal(err)
	}
	return t
}

// phases returns each target's phase in its current plan (Pending until its executor saw it).
func (f *fleet) phases() map[string]string {
	f.t.Helper()
	return f.phasesFor("")
}

// phasesFor is phases, for the targets that move to release only ("" for any).
func (f *fleet) phasesFor(release string) map[string]string {
	f.t.Helper()
	var list v1alpha1.RolloutTargetList
	if err := hub(f.t).List(f.t.Context(), &list, client.InNamespace(f.ns), client.MatchingLabels{v1alpha1.LabelRollout: f.name}); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, t := range list.Items {
		if release != "" && t.Spec.ToRelease != release {
			continue
		}
		out[t.Spec.Cluster] = v1alpha1.ClusterPending
		if t.Status.Revision == t.Spec.Revision && t.Status.Path == t.Spec.Path && t.Status.Phase != "" {
			out[t.Spec.Cluster] = t.Status.Phase
		}
	}
	return out
}

// snapshotsOf returns the snapshots the rollout took in a revision, by cluster.
func (f *fleet) snapshotsOf(revision int32) map[string]string {
	f.t.Helper()
	var list v1alpha1.SnapshotList
	if err := hub(f.t).List(f.t.Context(), &list, client.InNamespace(f.ns),
		client.MatchingLabels{v1alpha1.LabelRollout: f.name, v1alpha1.LabelRevision: fmt.Sprint(revision)}); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		out[s.Spec.Cluster] = s.Name
	}
	return out
}

// populate creates 6 MySQLClusters with children on every member the rollout targets.
func (f *fleet) populate() {
	targeted := map[string]bool{}
	for _, w := range f.waves {
		for _, c := range w.Clusters {
			targeted[c] = true
		}
	}
	for _, m := range env.Members {
		if !targeted[m.Name] {
			continue
		}
		if err := testfixture.Populate(f.t.Context(), m.RESTConfig(), testfixture.Options{Namespaces: []string{f.crNS}, Count: 6, Children: true}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fleet) record(m *testbed.Cluster) *member.Record {
	rec, err := member.ReadRecord(f.t.Context(), memberClient(f.t, m), "mysql-operator")
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

// snapshotEntries loads a snapshot taken by the rollout.
func (f *fleet) snapshotEntries(name string) []snapshot.Entry {
	f.t.Helper()
	snap := &v1alpha1.Snapshot{}
	if err := hub(f.t).Get(f.t.Context(), client.ObjectKey{Namespace: f.ns, Name: name}, snap); err != nil {
		f.t.Fatal(err)
	}
	_, entries, err := (&snapshot.Hub{Client: hub(f.t)}).Load(f.t.Context(), snap)
	if err != nil {
		f.t.Fatal(err)
	}
	return entries
}

// assertEqualsSnapshot checks that every object of the snapshot equals the live one.
func (f *fleet) assertEqualsSnapshot(m *testbed.Cluster, snap string) {
	f.t.Helper()
	entries := f.snapshotEntries(snap)
	cl := testenv.Member(f.t, m)
	crs := 0
	for _, e := range entries {
		gvk := e.Object.GroupVersionKind()
		ri, _, err := cl.ResourceClient(cl.Dynamic, e.Object)
		if err != nil {
			f.t.Fatal(err)
		}
		live, err := ri.Get(f.t.Context(), e.Object.GetName(), metav1.GetOptions{})
		if err != nil {
			f.t.Errorf("%s: %s %s: %v", m.Name, gvk.Kind, e.Object.GetName(), err)
			continue
		}
		if gvk.Kind == "MySQLCluster" {
			crs++
		}
		if !restore.Equal(e.Object, live) {
			f.t.Errorf("%s: %s %s/%s differs from snapshot %s", m.Name, gvk.Kind, e.Object.GetNamespace(), e.Object.GetName(), snap)
		}
	}
	if crs == 0 {
		f.t.Errorf("snapshot %s holds no MySQLClusters: the comparison proves nothing", snap)
	}
}

func waves2() []v1alpha1.Wave {
	return []v1alpha1.Wave{
		{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
		{Name: "rest", Clusters: []string{"member2", "member3"}, MaxConcurrency: 2},
	}
}

func TestWave1FailsRollsBackAndWave2NeverStarts(t *testing.T) {
	f := newFleet(t, waves2())
	startManager(t, f.ns, nil)
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.populate()
	f.setRelease("mysql-bad", nil)
	ro := f.waitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)

	cond := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	if cond == nil || cond.Reason != v1alpha1.ReasonAutomaticRollback || !strings.Contains(cond.Message, "member1") || !strings.Contains(cond.Message, "health gate") {
		t.Errorf("RolledBack condition must give the automatic reason: %+v", cond)
	}
	// The failure is held in status; spec.release is left as the person (or Git) set it.
	if ro.Spec.Release != "mysql-bad" || ro.Status.FailedRelease != "mysql-bad" || !strings.Contains(ro.Status.FailureReason, "member1") {
		t.Errorf("spec.release %s, status.failedRelease %s (%s): the automatic rollback must hold the failure in status, not write spec",
			ro.Spec.Release, ro.Status.FailedRelease, ro.Status.FailureReason)
	}
	bad := ro.Status.History[len(ro.Status.History)-2]
	if bad.Release != "mysql-bad" || bad.Outcome != "RolledBack" || !ro.Status.History[len(ro.Status.History)-1].Automatic {
		t.Errorf("history: %+v", ro.Status.History)
	}
	snaps := f.snapshotsOf(bad.Revision)
	snap := snaps["member1"]
	if snap == "" {
		t.Fatalf("no pre-change snapshot recorded for member1: %+v", snaps)
	}
	if _, ok := snaps["member2"]; ok {
		t.Errorf("wave 2 must never start, but member2 has a snapshot")
	}
	for _, m := range env.Members {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
	f.assertEqualsSnapshot(env.Members[0], snap)
}

func TestUpgradeThenManualRollback(t *testing.T) {
	f := newFleet(t, waves2())
	startManager(t, f.ns, nil)
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.populate()
	f.setRelease("mysql-b", nil)
	ro := f.waitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	for _, m := range env.Members {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-b" || rec.Version != "2.0.0" {
			t.Errorf("%s record %+v, want mysql-b", m.Name, rec)
		}
	}
	snaps := f.snapshotsOf(ro.Status.Revision)
	// A MySQLCluster created on member1 since the upgrade's snapshot: the rollback keeps it
	// (spec.pruneOnRollback is off) and says so.
	if err := testfixture.Populate(t.Context(), env.Members[0].RESTConfig(), testfixture.Options{Namespaces: []string{f.crNS}, Offset: 100, Count: 1}); err != nil {
		t.Fatal(err)
	}
	// `rewind rollback` sets spec.release back to A: rollback is a desired state.
	out := rewind(t, f.ns, "rollback", f.name)
	if got := f.rollout().Spec.Release; got != "mysql-a" || !strings.Contains(out, "rolling back from mysql-b to mysql-a") {
		t.Fatalf("rewind rollback must set spec.release to mysql-a, got %s:\n%s", got, out)
	}
	ro = f.waitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if out := rewind(t, f.ns, "history", f.name); strings.Count(out, "Succeeded") < 2 || !strings.Contains(out, "mysql-b") {
		t.Errorf("rewind history:\n%s", out)
	}
	if out := rewind(t, f.ns, "rollout", "status", f.name); !strings.Contains(out, "RolledBack") || strings.Count(out, "Restore") < 3 {
		t.Errorf("rewind rollout status:\n%s", out)
	}
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack); c == nil || c.Reason != v1alpha1.ReasonManualRollback {
		t.Errorf("RolledBack condition %+v", c)
	}
	for _, m := range env.Members {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
		f.assertEqualsSnapshot(m, snaps[m.Name])
	}
	f.waitEvent("KeptSinceSnapshot", "member1: kept 1 objects created since snapshot "+snaps["member1"], f.crNS+"/db-00100")
}

// waitEvent waits until an Event about the rollout with reason holds every one of texts.
func (f *fleet) waitEvent(reason string, texts ...string) {
	f.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(f.t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := hub(f.t).List(ctx, &evs, client.InNamespace(f.ns)); err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			if e.Regarding.Name != f.name || e.Reason != reason {
				continue
			}
			seen = append(seen, e.Note)
			if !slices.ContainsFunc(texts, func(s string) bool { return !strings.Contains(e.Note, s) }) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.t.Errorf("no %s Event holds %q: %v (seen: %q)", reason, texts, err, seen)
	}
}

func TestWave2FailsRollsBackWave1Too(t *testing.T) {
	f := newFleet(t, waves2())
	// A restore memory budget of one byte: the two restores take turns, the second woken
	// when the first gives the memory back.
	startManagerWith(t, f.ns, controller.Options{RestoreMemory: 1})
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.populate()
	// member2's node is marked, so mysql-b-picky's operator never schedules there only.
	markNode(t)
	f.setRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Timeout = &metav1.Duration{Duration: 8 * time.Second}
	})
	ro := f.waitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	snaps := f.snapshotsOf(ro.Status.History[len(ro.Status.History)-2].Revision)
	if snaps["member1"] == "" || snaps["member2"] == "" {
		t.Fatalf("wave 1 and wave 2 clusters should have pre-change snapshots: %v", snaps)
	}
	for _, m := range env.Members {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
	// Wave 1's member1 was rolled back too.
	f.assertEqualsSnapshot(env.Members[0], snaps["member1"])
	f.assertEqualsSnapshot(env.Members[1], snaps["member2"])
	if img := f.operatorImageOn(env.Members[0]); img != operatorImage("1.0.0") {
		t.Errorf("member1 runs %v after the rollback, want A's image", img)
	}
}

func TestMemberLostMidRollout(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2", "member3"}, MaxConcurrency: 3}})
	startManager(t, f.ns, nil)
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	lost := env.Members[2]
	lost.StopAPIServer()
	t.Cleanup(func() { _ = lost.StartAPIServer(context.Background()) })
	f.setRelease("mysql-b", nil)
	ro := f.waitPhase("mysql-a", v1alpha1.RolloutRolledBack, 4*time.Minute)
	cond := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack)
	if cond == nil || !strings.Contains(cond.Message, "member3") || !strings.Contains(cond.Message, "unreachable") {
		t.Errorf("the rollback reason must name the lost member and say it is unreachable: %+v", cond)
	}
	for _, m := range env.Members[:2] {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a (the policy rolls back every changed cluster)", m.Name, rec)
		}
	}
}

func TestCrashAtEachStep(t *testing.T) {
	upgrade := slices.DeleteFunc(slices.Clone(target.UpgradeSteps), func(s string) bool { return s == target.StepDone })
	rollback := slices.DeleteFunc(slices.Clone(target.RestoreSteps), func(s string) bool { return s == target.StepDone })
	type crash struct{ path, step string }
	var crashes []crash
	for _, s := range upgrade {
		crashes = append(crashes, crash{"upgrade", s})
	}
	for _, s := range rollback {
		crashes = append(crashes, crash{"rollback", s})
	}
	for _, cr := range crashes {
		t.Run(cr.path+"/"+cr.step, func(t *testing.T) {
			f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
			stop := startManager(t, f.ns, nil)
			f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
			f.populate()
			if cr.path == "rollback" {
				f.setRelease("mysql-b", nil)
				f.waitPhase("mysql-b", v1alpha1.RolloutSucceeded, 2*time.Minute)
			}
			stop()
			// A manager that crashes when member1 reaches the step ...
			var crashed sync.Once
			hit := make(chan struct{})
			stop = startManager(t, f.ns, func(cluster, step string) bool {
				if cluster == "member1" && step == cr.step {
					crashed.Do(func() { close(hit) })
					return true
				}
				return false
			})
			to := "mysql-b"
			if cr.path == "rollback" {
				to = "mysql-a"
			}
			f.setRelease(to, nil)
			select {
			case <-hit:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the rollout never reached %s", cr.step)
			}
			stop()
			// ... and a fresh one finishes the job.
			startManager(t, f.ns, nil)
			want := v1alpha1.RolloutSucceeded
			if cr.path == "rollback" {
				want = v1alpha1.RolloutRolledBack
			}
			f.waitPhase(to, want, 3*time.Minute)
			if rec := f.record(env.Members[0]); rec == nil || rec.Release != to {
				t.Errorf("record %+v, want %s", rec, to)
			}
			var snaps v1alpha1.SnapshotList
			if err := hub(t).List(t.Context(), &snaps, client.InNamespace(f.ns)); err != nil {
				t.Fatal(err)
			}
			wantSnaps := 2 // one before A (the first install) and one before B
			if len(snaps.Items) != wantSnaps {
				names := []string{}
				for _, s := range snaps.Items {
					names = append(names, s.Name)
				}
				t.Errorf("want %d snapshots (no duplicate), got %v", wantSnaps, names)
			}
			if cr.path == "rollback" {
				f.assertEqualsSnapshot(env.Members[0], f.target("member1").Spec.Snapshot)
			}
		})
	}
}

// rewind runs the CLI in-process against the shared hub.
func rewind(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := cli.Run(t.Context(), append(args, "--kubeconfig", env.Hub.Kubeconfig, "-n", ns)...)
	if err != nil {
		t.Fatalf("rewind %v: %v\n%s", args, err, out)
	}
	return out
}

func TestApprovalPauseAndResume(t *testing.T) {
	waves := waves2()
	waves[1].RequireApproval = true
	// Wave canary bakes: wave rest comes only after member1 checked its health at its end.
	waves[0].BakeTime = &metav1.Duration{Duration: 3 * time.Second}
	f := newFleet(t, waves)
	// Paused from the start: nothing happens until it is resumed.
	rewind(t, f.ns, "rollout", "pause", f.name)
	startManager(t, f.ns, nil)
	f.waitPhase("mysql-a", v1alpha1.RolloutPaused, time.Minute)
	if p := f.phases(); p["member1"] != v1alpha1.ClusterPending || f.target("member1").Spec.Start {
		t.Fatalf("a paused rollout must not start a cluster: %v", p)
	}
	rewind(t, f.ns, "rollout", "resume", f.name)
	// Wave 1 runs, then wave 2 waits for a person.
	f.waitPhase("mysql-a", v1alpha1.RolloutWaitingForApproval, 2*time.Minute)
	for cluster, phase := range f.phases() {
		want := v1alpha1.ClusterPending
		if cluster == "member1" {
			want = v1alpha1.ClusterSucceeded
		}
		if phase != want {
			t.Errorf("%s is %s while wave 2 waits for approval, want %s", cluster, phase, want)
		}
	}
	// The bake passed on a check made at or after its end, not on the time alone (the last
	// re-check can be up to one poll interval before it).
	if tg := f.target("member1"); tg.Spec.HealthyUntil == nil || tg.Status.HealthCheckedAt == nil || tg.Status.HealthCheckedAt.Before(tg.Spec.HealthyUntil) {
		t.Errorf("wave rest was reached with member1 healthy until %v, last checked at %v: the bake needs a check at or after its end",
			tg.Spec.HealthyUntil, tg.Status.HealthCheckedAt)
	}
	if out := rewind(t, f.ns, "rollout", "status", f.name); !strings.Contains(out, "rewind rollout approve") {
		t.Errorf("status must say how to approve:\n%s", out)
	}
	rewind(t, f.ns, "rollout", "approve", f.name)
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	for _, m := range env.Members {
		if rec := f.record(m); rec == nil || rec.Release != "mysql-a" {
			t.Errorf("%s record %+v, want mysql-a", m.Name, rec)
		}
	}
}

// markNode labels every node of member2 so mysql-b-picky's operator cannot be scheduled on
// that member, until unmark is called or the test ends.
func markNode(t *testing.T) (unmark func()) {
	t.Helper()
	m2 := memberClient(t, env.Members[1])
	var nodes corev1.NodeList
	if err := m2.List(t.Context(), &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatal("member2 has no node to mark")
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		orig := n.DeepCopy()
		n.Labels["rewind.dev/broken"] = "true"
		// A merge patch carries no resourceVersion: kwok's heartbeats cannot make it conflict.
		if err := m2.Patch(t.Context(), n, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	unmark = func() {
		once.Do(func() {
			var nodes corev1.NodeList
			if err := m2.List(context.Background(), &nodes); err != nil {
				t.Errorf("unmarking member2's nodes: %v", err)
				return
			}
			for i := range nodes.Items {
				n := &nodes.Items[i]
				orig := n.DeepCopy()
				delete(n.Labels, "rewind.dev/broken")
				if err := m2.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
					t.Errorf("unmarking member2's node %s: %v", n.Name, err)
				}
			}
		})
	}
	t.Cleanup(unmark)
	return unmark
}

// operatorImageOn returns the image the operator Deployment of the fleet runs on a member.
func (f *fleet) operatorImageOn(m *testbed.Cluster) string {
	f.t.Helper()
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := memberClient(f.t, m).Get(f.t.Context(), client.ObjectKey{Namespace: f.opNS, Name: "mysql-operator"}, dep); err != nil {
		f.t.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	img, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	return img
}

// events waits until the events about the rollout include the given reasons (they are
// written asynchronously) and returns the notes by reason.
func (f *fleet) events(reasons ...string) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	err := wait.PollUntilContextTimeout(f.t.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var evs eventsv1.EventList
		if err := hub(f.t).List(ctx, &evs, client.InNamespace(f.ns)); err != nil {
			return false, err
		}
		out = map[string]string{}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Rollout" && e.Regarding.Name == f.name {
				out[e.Reason] += e.Note + "\n"
			}
		}
		for _, r := range reasons {
			if _, ok := out[r]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.t.Errorf("events about rollout %s: want reasons %v, have %v: %v", f.name, reasons, out, err)
	}
	return out
}

// metric sums the samples (counter values, or histogram counts) of a metric family whose
// labels include the given ones, from the controller's Prometheus registry.
func metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
	samples:
		for _, m := range fam.GetMetric() {
			for k, v := range labels {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == k && l.GetValue() == v)
				}
				if !found {
					continue samples
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestFailurePolicies runs a wave-2 failure (member2 only) under the two policies that do
// not roll everything back. Under Pause, wave 2 takes one cluster at a time, member2 first,
// so member3 is still Pending when member2 fails. Under RollbackFailed, wave 2 takes both:
// member3, in flight, finishes its upgrade while member2 alone is restored, and a new
// release afterwards starts from what each cluster runs.
func TestFailurePolicies(t *testing.T) {
	for _, policy := range []string{v1alpha1.FailurePolicyRollbackFailed, v1alpha1.FailurePolicyPause} {
		t.Run(policy, func(t *testing.T) {
			waves := waves2()
			waves[1].MaxConcurrency = 1
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				waves[1].MaxConcurrency = 2
			}
			f := newFleet(t, waves)
			startManager(t, f.ns, nil)
			f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
			f.populate()
			markNode(t)
			clusterRollbacks := metric(t, "rewind_cluster_phase_transitions_total", map[string]string{"reason": "ClusterRollback"})
			restores := metric(t, "rewind_restores_total", map[string]string{"namespace": f.ns})
			f.setRelease("mysql-b-picky", func(s *v1alpha1.RolloutSpec) {
				s.FailurePolicy = policy
				s.HealthGates.Timeout = &metav1.Duration{Duration: 8 * time.Second}
			})
			ro := f.waitPhase("mysql-b-picky", v1alpha1.RolloutFailed, 3*time.Minute)

			stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
			if stalled == nil || stalled.Status != metav1.ConditionTrue || !strings.Contains(stalled.Message, "member2") {
				t.Errorf("a failed rollout must be Stalled, naming member2: %+v", stalled)
			}
			if ro.Spec.Release != "mysql-b-picky" {
				t.Errorf("%s must not set spec.release back, got %s", policy, ro.Spec.Release)
			}
			phases := f.phases()
			want := map[string]string{"member1": v1alpha1.ClusterSucceeded, "member2": v1alpha1.ClusterFailed, "member3": v1alpha1.ClusterPending}
			wantDone := "1/3"
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				want["member2"], want["member3"], wantDone = v1alpha1.ClusterRolledBack, v1alpha1.ClusterSucceeded, "2/3"
			}
			if !reflect.DeepEqual(phases, want) {
				t.Errorf("cluster phases %v, want %v", phases, want)
			}
			if ro.Status.ClustersDone != wantDone {
				t.Errorf("status.clustersDone %q, want %s (the clusters that run the new release)", ro.Status.ClustersDone, wantDone)
			}
			rev := ro.Status.History[len(ro.Status.History)-1]
			if rev.Release != "mysql-b-picky" || rev.Outcome != "Failed" || !strings.Contains(rev.Reason, "member2") {
				t.Errorf("the revision must be recorded as Failed because of member2: %+v", rev)
			}

			// member1 keeps the new release: neither policy touches a cluster that passed.
			if img := f.operatorImageOn(env.Members[0]); img != operatorImage("2.0.2") {
				t.Errorf("member1 runs %s, want mysql-b-picky's image", img)
			}
			if rec := f.record(env.Members[0]); rec == nil || rec.Release != "mysql-b-picky" {
				t.Errorf("member1 record %+v, want mysql-b-picky", rec)
			}
			if policy == v1alpha1.FailurePolicyPause {
				// member3 never started.
				if img := f.operatorImageOn(env.Members[2]); img != operatorImage("1.0.0") {
					t.Errorf("member3 runs %s, want mysql-a's image: wave 2 must stop at the failure", img)
				}
			} else if img := f.operatorImageOn(env.Members[2]); img != operatorImage("2.0.2") {
				t.Errorf("member3 runs %s, want mysql-b-picky's image: it was in flight and passed", img)
			}
			wantEvents := []string{"Failed"}
			if policy == v1alpha1.FailurePolicyRollbackFailed {
				wantEvents = append(wantEvents, "ClusterRollback")
			}
			evs := f.events(wantEvents...)
			switch policy {
			case v1alpha1.FailurePolicyRollbackFailed:
				// member2 alone is restored, exactly, to its pre-change snapshot.
				m2 := f.target("member2")
				snap := m2.Spec.Snapshot
				if snap == "" || m2.Spec.Path != v1alpha1.PathRestore || m2.Spec.ToRelease != "mysql-a" {
					t.Fatalf("member2 must be restored to its pre-change snapshot and mysql-a: %+v", m2.Spec)
				}
				f.assertEqualsSnapshot(env.Members[1], snap)
				if img := f.operatorImageOn(env.Members[1]); img != operatorImage("1.0.0") {
					t.Errorf("member2 runs %s after its restore, want mysql-a's image", img)
				}
				if rec := f.record(env.Members[1]); rec == nil || rec.Release != "mysql-a" {
					t.Errorf("member2 record %+v, want mysql-a", rec)
				}
				if !strings.Contains(evs["ClusterRollback"], "member2") {
					t.Errorf("no ClusterRollback event naming member2: %v", evs)
				}
				if got := metric(t, "rewind_cluster_phase_transitions_total", map[string]string{"reason": "ClusterRollback"}); got < clusterRollbacks+1 {
					t.Errorf("rewind_cluster_phase_transitions_total{reason=ClusterRollback} went from %v to %v, want at least +1", clusterRollbacks, got)
				}
				if got := metric(t, "rewind_restores_total", map[string]string{"namespace": f.ns, "cluster": "member2", "outcome": "Succeeded"}); got != 1 || restores != 0 {
					t.Errorf("rewind_restores_total{cluster=member2,outcome=Succeeded} is %v (had %v before): want exactly one restore", got, restores)
				}
			case v1alpha1.FailurePolicyPause:
				// member2 stays as the failure left it, for a person to look at.
				if img := f.operatorImageOn(env.Members[1]); img != operatorImage("2.0.2") {
					t.Errorf("member2 runs %s, want mysql-b-picky's image left in place", img)
				}
				if _, ok := evs["ClusterRollback"]; ok {
					t.Errorf("Pause must not restore a cluster: %v", evs)
				}
				if got := metric(t, "rewind_restores_total", map[string]string{"namespace": f.ns}); got != restores {
					t.Errorf("Pause ran a restore: rewind_restores_total went from %v to %v", restores, got)
				}
			}
			if !strings.Contains(evs["Failed"], "failure policy "+policy) {
				t.Errorf("no Failed event naming the policy: %v", evs)
			}
			if policy != v1alpha1.FailurePolicyRollbackFailed {
				return
			}
			// The next release starts from what each cluster runs: mysql-b-picky on member1 and
			// member3, mysql-a again on member2 (its precheck expects mysql-a).
			f.setRelease("mysql-b", nil)
			f.waitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
			for _, m := range env.Members {
				if rec := f.record(m); rec == nil || rec.Release != "mysql-b" {
					t.Errorf("%s record %+v, want mysql-b", m.Name, rec)
				}
			}
		})
	}
}

// TestRetriesExhaustedStalls makes a step fail on every attempt (an admission policy on
// member1 refuses the new operator Deployment): after MaxAttempts the cluster fails, the
// rollout (failure policy Pause) is Stalled with reason RetriesExhausted, and once a person
// removes the cause, `rewind rollback` brings member1 back.
func TestRetriesExhaustedStalls(t *testing.T) {
	f := newFleet(t, []v1alpha1.Wave{{Name: "one", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	startManager(t, f.ns, nil)
	f.waitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.populate()
	m1 := memberClient(t, env.Members[0])
	const denied = "operator version 2.0.0 is not allowed on this cluster"
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": "deny-2-0-0-" + f.ns},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"deployments"}}}},
			"validations": []any{map[string]any{
				"expression": "!has(object.metadata.labels) || !('version' in object.metadata.labels) || object.metadata.labels['version'] != '2.0.0'",
				"message":    denied}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": "deny-2-0-0-" + f.ns},
		"spec": map[string]any{"policyName": "deny-2-0-0-" + f.ns, "validationActions": []any{"Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": f.opNS}}}},
	}}
	for _, o := range []*unstructured.Unstructured{policy, binding} {
		if err := m1.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	removePolicy := func() {
		for _, o := range []*unstructured.Unstructured{binding, policy} {
			_ = m1.Delete(context.Background(), o)
		}
	}
	t.Cleanup(removePolicy)
	// The policy is enforced once the API server has compiled it: probe with a dry run.
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "probe", "namespace": f.opNS, "labels": map[string]any{"version": "2.0.0"}},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "probe"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "probe"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.com/probe:1"}}}}},
	}}
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := m1.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), denied), nil
	})
	if err != nil {
		t.Fatalf("the admission policy is not enforced: %v", err)
	}

	f.setRelease("mysql-b", func(s *v1alpha1.RolloutSpec) { s.FailurePolicy = v1alpha1.FailurePolicyPause })
	ro := f.waitPhase("mysql-b", v1alpha1.RolloutFailed, 3*time.Minute)
	c := f.target("member1").Status
	if c.Phase != v1alpha1.ClusterFailed || c.Step != target.StepApplyWorkloads || c.Attempt != target.MaxAttempts {
		t.Errorf("member1 must fail at %s after %d attempts: %+v", target.StepApplyWorkloads, target.MaxAttempts, c)
	}
	// The attempts waited out their backoff (1s, 2s, 4s, 8s) although every attempt wrote the
	// status, which triggers a reconcile (status times have one-second precision).
	if c.StepStartedAt == nil || c.FinishedAt == nil {
		t.Errorf("member1 has no step start or finish time: %+v", c)
	} else if took := c.FinishedAt.Sub(c.StepStartedAt.Time); took < 14*time.Second {
		t.Errorf("%d attempts took %v: the backoff (1s, 2s, 4s, 8s) was not honoured", target.MaxAttempts, took)
	}
	stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != v1alpha1.ReasonRetriesExhausted ||
		!strings.Contains(stalled.Message, fmt.Sprintf("attempt %d of %d", target.MaxAttempts, target.MaxAttempts)) || !strings.Contains(stalled.Message, denied) {
		t.Errorf("Stalled must say the retries ran out and why: %+v", stalled)
	}
	if out := rewind(t, f.ns, "rollout", "status", f.name); !strings.Contains(out, denied) {
		t.Errorf("rollout status must show the cause:\n%s", out)
	}

	// A person removes the cause and rolls back.
	removePolicy()
	rewind(t, f.ns, "rollback", f.name)
	ro = f.waitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if s := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled); s != nil {
		t.Errorf("the rollback must clear Stalled: %+v", s)
	}
	if rec := f.record(env.Members[0]); rec == nil || rec.Release != "mysql-a" {
		t.Errorf("member1 record %+v, want mysql-a", rec)
	}
	f.assertEqualsSnapshot(env.Members[0], c.Snapshot)
}
