// Package fleet is the world the end-to-end test packages (test/e2e, test/orchestration,
// test/faults, test/pull and others) run rewind in: a Suite is a package's shared testbed with
// its hub set up once (rewind's CRDs and RBAC, every member registered), and a Fleet is one
// test's hub namespace with the sample operator's releases and a Rollout, cleaned off the
// members when the test ends.
package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// Operator is the sample operator every Fleet releases.
const Operator = "mysql-operator"

// Release variants (pod spec lines of the operator Deployment).
const (
	Healthy = ""
	// Broken makes the operator Deployment unschedulable everywhere: it never becomes Available.
	Broken = "      nodeSelector: {rewind.dev/no-such-node: \"true\"}\n"
	// AvoidsMarked makes it unschedulable on nodes labelled rewind.dev/broken=true only.
	AvoidsMarked = "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: rewind.dev/broken, operator: NotIn, values: [\"true\"]}]}]}}}\n"
)

// Suite is a test package's shared testbed: set Env from TestMain (testenv.Main(m, opts,
// &suite.Env)); the hub is set up on first use.
type Suite struct {
	Env *testbed.Testbed
	// Pull names the members Hub leaves unregistered: the test joins them in mode Pull
	// (rewind clusters join) and runs their agents. Their snapshots live in their hub
	// namespaces (SnapshotsOf and SnapshotEntries look there too).
	Pull []string

	once sync.Once
	hub  client.Client
}

// Hub returns a client of the hub, with rewind's CRDs and RBAC installed and every member
// registered (labels env=test and index=N), the first time it is called.
func (s *Suite) Hub(t testing.TB) client.Client {
	t.Helper()
	s.once.Do(func() {
		sch := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(sch)
		_ = v1alpha1.AddToScheme(sch)
		c, err := client.New(s.Env.Hub.RESTConfig(), client.Options{Scheme: sch})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := install.Hub(ctx, c); err != nil {
			t.Fatal(err)
		}
		for i, m := range s.Env.Members {
			if slices.Contains(s.Pull, m.Name) {
				continue
			}
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
		s.hub = c
	})
	if s.hub == nil {
		t.Fatal("hub setup failed")
	}
	return s.hub
}

// StartManager runs a manager with options o until stop is called or the test ends. It
// authenticates as the controller's shipped ServiceAccount with the shipped RBAC (enabled in
// the hub namespace ns): the suites never run the controller as cluster-admin. Metrics and
// probes are off; a gate is polled every 300 ms and members probed every 500 ms unless o says
// otherwise.
func (s *Suite) StartManager(t *testing.T, ns string, o controller.Options) (stop func()) {
	t.Helper()
	return s.StartManagerVia(t, ns, "", o)
}

// StartManagerVia is StartManager with the controller reaching its hub at server (a fault
// proxy in front of the hub's API server, with a certificate of the testbed's CA); "" is the
// hub's own address.
func (s *Suite) StartManagerVia(t *testing.T, ns, server string, o controller.Options) (stop func()) {
	t.Helper()
	o.MetricsAddr, o.ProbeAddr, o.SkipNameValidation = "0", "0", true
	if o.GatePoll == 0 {
		o.GatePoll = 300 * time.Millisecond
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 500 * time.Millisecond // a lost member is noticed within seconds
	}
	cfg := testenv.ControllerConfig(t, s.Env.Hub, ns)
	if server != "" {
		cfg.Host = server
	}
	mgr, err := controller.NewManager(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.RunManager(t, mgr)
}

// MakeRelease creates a release of the MySQLCluster CRD and the operator Deployment.
func (s *Suite) MakeRelease(t *testing.T, ns, name, version, variant string) {
	t.Helper()
	if err := testfixture.CreateRelease(t.Context(), s.Hub(t), t.TempDir(), ns, name, version, variant); err != nil {
		t.Fatal(err)
	}
}

// MemberClient returns an admin client of a member.
func MemberClient(t testing.TB, m *testbed.Cluster) client.Client {
	t.Helper()
	c, err := client.New(m.RESTConfig(), client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Member returns the member of that name.
func (s *Suite) Member(t testing.TB, name string) *testbed.Cluster {
	t.Helper()
	for _, m := range s.Env.Members {
		if m.Name == name {
			return m
		}
	}
	t.Fatalf("no member %s", name)
	return nil
}

// SetUnreachableTimeout gives a member a spec.unreachableTimeout until the test ends.
func (s *Suite) SetUnreachableTimeout(t *testing.T, name string, d time.Duration) {
	t.Helper()
	set := func(d *metav1.Duration) error {
		mc := &v1alpha1.MemberCluster{}
		if err := s.Hub(t).Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		mc.Spec.UnreachableTimeout = d
		return s.Hub(t).Update(context.Background(), mc)
	}
	if err := set(&metav1.Duration{Duration: d}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(nil); err != nil {
			t.Errorf("resetting %s's unreachableTimeout: %v", name, err)
		}
	})
}

// Rewind runs the CLI in-process against the suite's hub, in namespace ns.
func (s *Suite) Rewind(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := cli.Run(t.Context(), append(args, "--kubeconfig", s.Env.Hub.Kubeconfig, "-n", ns)...)
	if err != nil {
		t.Fatalf("rewind %v: %v\n%s", args, err, out)
	}
	return out
}

// Fleet is one test's world: a hub namespace with releases mysql-a (1.0.0), mysql-b (2.0.0),
// mysql-bad (2.0.1, never healthy) and mysql-b-picky (2.0.2, unhealthy on marked nodes), and
// the Rollout "mysql" installing mysql-a with the given waves.
type Fleet struct {
	T *testing.T
	S *Suite
	// NS is the hub namespace; OpNS the operator's namespace on the members; CRNS the
	// namespace Populate fills; Name the Rollout's name.
	NS, OpNS, CRNS, Name string
	Waves                []v1alpha1.Wave
}

// New makes a test's fleet. When the test ends, the members are left clean for the next one:
// no record, no CRD (so no CRs), no namespaces.
func (s *Suite) New(t *testing.T, waves []v1alpha1.Wave) *Fleet {
	t.Helper()
	c := s.Hub(t)
	ns := testenv.Namespace(t, s.Env.Hub.RESTConfig())
	f := &Fleet{T: t, S: s, NS: ns, OpNS: "op-" + ns, CRNS: "crs-" + ns, Name: "mysql", Waves: waves}
	s.MakeRelease(t, ns, "mysql-a", "1.0.0", Healthy)
	s.MakeRelease(t, ns, "mysql-b", "2.0.0", Healthy)
	s.MakeRelease(t, ns, "mysql-bad", "2.0.1", Broken)
	s.MakeRelease(t, ns, "mysql-b-picky", "2.0.2", AvoidsMarked)
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: f.Name, Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: Operator, Release: "mysql-a", InstallNamespace: f.OpNS, Waves: waves,
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
	}}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, m := range s.Env.Members {
			mc := MemberClient(t, m)
			crd := &unstructured.Unstructured{}
			crd.SetAPIVersion("apiextensions.k8s.io/v1")
			crd.SetKind("CustomResourceDefinition")
			crd.SetName("mysqlclusters.database.example.com")
			objs := []client.Object{
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName(Operator)}},
				crd,
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.OpNS}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.CRNS}},
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

// Hub is the suite's hub client.
func (f *Fleet) Hub() client.Client { return f.S.Hub(f.T) }

// Rollout reads the fleet's Rollout.
func (f *Fleet) Rollout() *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	if err := f.Hub().Get(context.Background(), client.ObjectKey{Namespace: f.NS, Name: f.Name}, ro); err != nil {
		f.T.Fatal(err)
	}
	return ro
}

// SetRelease asks for a release (an upgrade, or a rollback when it is an earlier one), with
// mut changing the rest of the spec.
func (f *Fleet) SetRelease(rel string, mut func(*v1alpha1.RolloutSpec)) {
	f.T.Helper()
	ro := f.Rollout()
	ro.Spec.Release = rel
	if mut != nil {
		mut(&ro.Spec)
	}
	if err := f.Hub().Update(context.Background(), ro); err != nil {
		f.T.Fatal(err)
	}
}

// WaitPhase waits for the rollout to reach a phase for the release.
func (f *Fleet) WaitPhase(release, phase string, timeout time.Duration) *v1alpha1.Rollout {
	f.T.Helper()
	var ro *v1alpha1.Rollout
	err := wait.PollUntilContextTimeout(f.T.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ro = f.Rollout()
		return ro.Status.CurrentRelease == release && ro.Status.Phase == phase, nil
	})
	if err != nil {
		f.T.Fatalf("rollout did not reach %s for %s: phase %s release %s, targets %+v, failures %+v, conditions %+v; %s", phase, release, ro.Status.Phase, ro.Status.CurrentRelease, ro.Status.Targets, ro.Status.Failures, ro.Status.Conditions, f.describeTargets())
	}
	return ro
}

// describeTargets says where each of the rollout's targets is, for a test that failed.
func (f *Fleet) describeTargets() string {
	var list v1alpha1.RolloutTargetList
	if err := f.Hub().List(context.Background(), &list, client.InNamespace(f.NS), client.MatchingLabels{v1alpha1.LabelRollout: f.Name}); err != nil {
		return "targets: " + err.Error()
	}
	var b strings.Builder
	b.WriteString("targets:")
	for _, t := range list.Items {
		st := t.Status
		fmt.Fprintf(&b, "\n  %s: spec revision %d path %s; status revision %d path %s phase %s step %s restore steps %v attempt %d faults %d waiting for %q message %q snapshot %q",
			t.Spec.Cluster, t.Spec.Revision, t.Spec.Path, st.Revision, st.Path, st.Phase, st.Step, st.RestoreSteps, st.Attempt, st.Faults, st.WaitingFor, st.Message, st.Snapshot)
	}
	return b.String()
}

// WaitCondition waits until the rollout has a condition of type typ with the given status and
// reason.
func (f *Fleet) WaitCondition(typ string, status metav1.ConditionStatus, reason string, timeout time.Duration) *metav1.Condition {
	f.T.Helper()
	var c *metav1.Condition
	err := wait.PollUntilContextTimeout(f.T.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		c = meta.FindStatusCondition(f.Rollout().Status.Conditions, typ)
		return c != nil && c.Status == status && c.Reason == reason, nil
	})
	if err != nil {
		f.T.Fatalf("condition %s did not become %s (%s): %+v", typ, status, reason, c)
	}
	return c
}

// Target returns the rollout's target of a cluster.
func (f *Fleet) Target(cluster string) *v1alpha1.RolloutTarget {
	f.T.Helper()
	t := &v1alpha1.RolloutTarget{}
	if err := f.Hub().Get(f.T.Context(), client.ObjectKey{Namespace: f.NS, Name: f.Name + "-" + cluster}, t); err != nil {
		f.T.Fatal(err)
	}
	return t
}

// Phases returns each target's phase in its current plan (Pending until its executor saw it).
func (f *Fleet) Phases() map[string]string {
	f.T.Helper()
	return f.PhasesFor("")
}

// PhasesFor is Phases, for the targets that move to release only ("" for any).
func (f *Fleet) PhasesFor(release string) map[string]string {
	f.T.Helper()
	var list v1alpha1.RolloutTargetList
	if err := f.Hub().List(f.T.Context(), &list, client.InNamespace(f.NS), client.MatchingLabels{v1alpha1.LabelRollout: f.Name}); err != nil {
		f.T.Fatal(err)
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

// SnapshotsOf returns the snapshots the rollout took in a revision, by cluster: in the
// fleet's namespace, and in the hub namespaces of the suite's pull members.
func (f *Fleet) SnapshotsOf(revision int32) map[string]string {
	f.T.Helper()
	out := map[string]string{}
	for _, ns := range f.snapshotNamespaces() {
		var list v1alpha1.SnapshotList
		if err := f.Hub().List(f.T.Context(), &list, client.InNamespace(ns),
			client.MatchingLabels{v1alpha1.LabelRollout: f.Name, v1alpha1.LabelRevision: fmt.Sprint(revision)}); err != nil {
			f.T.Fatal(err)
		}
		for _, s := range list.Items {
			if s.Spec.Rollout == f.NS+"/"+f.Name {
				out[s.Spec.Cluster] = s.Name
			}
		}
	}
	return out
}

// snapshotNamespaces are where the fleet's snapshots are: its namespace, then the pull
// members'.
func (f *Fleet) snapshotNamespaces() []string {
	out := []string{f.NS}
	for _, m := range f.S.Pull {
		out = append(out, v1alpha1.MemberNamespace(m))
	}
	return out
}

// Populate creates 6 MySQLClusters with children on every member the rollout targets.
func (f *Fleet) Populate() {
	f.T.Helper()
	targeted := map[string]bool{}
	for _, w := range f.Waves {
		for _, c := range w.Clusters {
			targeted[c] = true
		}
	}
	for _, m := range f.S.Env.Members {
		if !targeted[m.Name] {
			continue
		}
		if err := testfixture.Populate(f.T.Context(), m.RESTConfig(), testfixture.Options{Namespaces: []string{f.CRNS}, Count: 6, Children: true}); err != nil {
			f.T.Fatal(err)
		}
	}
}

// Record reads the operator's installed-version record on a member (nil: none).
func (f *Fleet) Record(m *testbed.Cluster) *member.Record {
	f.T.Helper()
	rec, err := member.ReadRecord(f.T.Context(), MemberClient(f.T, m), Operator)
	if err != nil {
		f.T.Fatal(err)
	}
	return rec
}

// SnapshotEntries loads a snapshot taken by the rollout (a pull member's from its hub
// namespace, with its key there).
func (f *Fleet) SnapshotEntries(name string) []snapshot.Entry {
	f.T.Helper()
	for i, ns := range f.snapshotNamespaces() {
		snap := &v1alpha1.Snapshot{}
		err := f.Hub().Get(f.T.Context(), client.ObjectKey{Namespace: ns, Name: name}, snap)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			f.T.Fatal(err)
		}
		h := &snapshot.Hub{Client: f.Hub()}
		if i > 0 {
			h.KeyNamespace = ns
		}
		_, entries, err := h.Load(f.T.Context(), snap)
		if err != nil {
			f.T.Fatal(err)
		}
		return entries
	}
	f.T.Fatalf("snapshot %s not found in %v", name, f.snapshotNamespaces())
	return nil
}

// AssertEqualsSnapshot checks that every object of the snapshot equals the live one, object by
// object, and that the snapshot holds custom resources (else the comparison proves nothing).
func (f *Fleet) AssertEqualsSnapshot(m *testbed.Cluster, snap string) {
	f.T.Helper()
	f.assertEquals(m, snap, func(*unstructured.Unstructured) bool { return true })
}

// AssertStateUnchangedSince checks that the operator's state on a member, every custom
// resource and every object the snapshot holds outside the operator's install namespace (what
// the custom resources own), equals the snapshot taken before an upgrade: a release changes
// its own objects (CRDs, the operator's Deployment and RBAC), never that state.
func (f *Fleet) AssertStateUnchangedSince(m *testbed.Cluster, snap string) {
	f.T.Helper()
	f.assertEquals(m, snap, func(u *unstructured.Unstructured) bool {
		return u.GetNamespace() != "" && u.GetNamespace() != f.OpNS
	})
}

func (f *Fleet) assertEquals(m *testbed.Cluster, snap string, keep func(*unstructured.Unstructured) bool) {
	f.T.Helper()
	entries := f.SnapshotEntries(snap)
	cl := testenv.Member(f.T, m)
	crs := 0
	for _, e := range entries {
		if !keep(e.Object) {
			continue
		}
		gvk := e.Object.GroupVersionKind()
		ri, _, err := cl.ResourceClient(cl.Dynamic, e.Object)
		if err != nil {
			f.T.Fatal(err)
		}
		live, err := ri.Get(f.T.Context(), e.Object.GetName(), metav1.GetOptions{})
		if err != nil {
			f.T.Errorf("%s: %s %s: %v", m.Name, gvk.Kind, e.Object.GetName(), err)
			continue
		}
		if gvk.Kind == "MySQLCluster" {
			crs++
		}
		if !restore.Equal(e.Object, live) {
			f.T.Errorf("%s: %s %s/%s differs from snapshot %s", m.Name, gvk.Kind, e.Object.GetNamespace(), e.Object.GetName(), snap)
		}
	}
	if crs == 0 {
		f.T.Errorf("snapshot %s holds no MySQLClusters: the comparison proves nothing", snap)
	}
}

// OperatorImageOn returns the image the operator Deployment of the fleet runs on a member.
func (f *Fleet) OperatorImageOn(m *testbed.Cluster) string {
	f.T.Helper()
	dep := &unstructured.Unstructured{}
	dep.SetAPIVersion("apps/v1")
	dep.SetKind("Deployment")
	if err := MemberClient(f.T, m).Get(f.T.Context(), client.ObjectKey{Namespace: f.OpNS, Name: Operator}, dep); err != nil {
		f.T.Fatal(err)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	img, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	return img
}

// rolloutEvents lists the Events about the fleet's Rollout.
func (f *Fleet) rolloutEvents(ctx context.Context) ([]eventsv1.Event, error) {
	var evs eventsv1.EventList
	if err := f.Hub().List(ctx, &evs, client.InNamespace(f.NS)); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(evs.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind != "Rollout" || e.Regarding.Name != f.Name
	}), nil
}

// CountEvents counts the Events about the rollout with a reason.
func (f *Fleet) CountEvents(reason string) int {
	f.T.Helper()
	evs, err := f.rolloutEvents(f.T.Context())
	if err != nil {
		f.T.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

// WaitEvent waits until an Event about the rollout with reason holds every one of texts.
func (f *Fleet) WaitEvent(reason string, texts ...string) {
	f.T.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(f.T.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := f.rolloutEvents(ctx)
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range evs {
			if e.Reason != reason {
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
		f.T.Errorf("no %s Event holds %q: %v (seen: %q)", reason, texts, err, seen)
	}
}

// Events waits until the events about the rollout include the given reasons (they are written
// asynchronously) and returns the notes by reason.
func (f *Fleet) Events(reasons ...string) map[string]string {
	f.T.Helper()
	out := map[string]string{}
	err := wait.PollUntilContextTimeout(f.T.Context(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := f.rolloutEvents(ctx)
		if err != nil {
			return false, err
		}
		out = map[string]string{}
		for _, e := range evs {
			out[e.Reason] += e.Note + "\n"
		}
		for _, r := range reasons {
			if _, ok := out[r]; !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.T.Errorf("events about rollout %s: want reasons %v, have %v: %v", f.Name, reasons, out, err)
	}
	return out
}

// Metric sums the samples (counter values, histogram counts, gauges) of a metric family whose
// labels include the given ones, from the in-process controller's Prometheus registry.
func Metric(t testing.TB, name string, labels map[string]string) float64 {
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

// TwoWaves are the waves most tests roll out in: a canary (member1), then member2 and member3
// together.
func TwoWaves() []v1alpha1.Wave {
	return []v1alpha1.Wave{
		{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
		{Name: "rest", Clusters: []string{"member2", "member3"}, MaxConcurrency: 2},
	}
}

// MarkMember2 labels every node of member2 rewind.dev/broken=true, so a release of the
// AvoidsMarked variant cannot be scheduled on that member, until unmark is called or the test
// ends.
func (s *Suite) MarkMember2(t *testing.T) (unmark func()) {
	t.Helper()
	m2 := MemberClient(t, s.Env.Members[1])
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
