//go:build !unit

package ha

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

const (
	operator = "mysql-operator"
	rollout  = "mysql"
	// crs is how many MySQLClusters (each with a StatefulSet, Service, ConfigMap and Secret)
	// the member holds when the snapshot and the restore run.
	crs = 100
)

// TestLeaderKilledDuringSnapshotAndRestore runs the same rollout story twice: once
// uninterrupted, once with the leader killed (SIGKILL) while the pre-upgrade snapshot is taken
// and again while the automatic rollback restores the member. Both must end the same way.
func TestLeaderKilledDuringSnapshotAndRestore(t *testing.T) {
	bin := buildController(t)
	hub := testenv.HubClient(t, env.Hub.RESTConfig())
	registerMember(t, hub)

	reference := newRun(t, hub, bin, false).story()
	cleanMember(t)
	interrupted := newRun(t, hub, bin, true).story()

	if !reflect.DeepEqual(reference, interrupted) {
		t.Errorf("the interrupted rollout ended differently from the uninterrupted one:\n%s", diff(reference, interrupted))
	}
}

// registerMember makes the member reachable as rewind-member (config/member), not as admin.
func registerMember(t *testing.T, hub client.Client) {
	t.Helper()
	ctx := t.Context()
	m := env.Members[0]
	mc := memberClient(t)
	root, err := filepath.Abs(filepath.Join("..", "..", "config", "member"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), root)
	if err != nil {
		t.Fatalf("kustomize build config/member: %v", err)
	}
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		if err := apply.Apply(ctx, mc, u); err != nil {
			t.Fatalf("applying config/member to %s: %v", m.Name, err)
		}
	}
	cs, err := kubernetes.NewForConfig(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(rbac.SystemNamespace).CreateToken(ctx, "rewind-member", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for rewind-member: %v", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[m.Name] = &clientcmdapi.Cluster{Server: m.Server, CertificateAuthorityData: m.RESTConfig().CAData}
	kc.AuthInfos["rewind-member"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts[m.Name] = &clientcmdapi.Context{Cluster: m.Name, AuthInfo: "rewind-member"}
	kc.CurrentContext = m.Name
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-kubeconfig", Namespace: rbac.SystemNamespace,
		Labels: map[string]string{controller.LabelMemberKubeconfig: "true"}}, Data: map[string][]byte{"kubeconfig": kcBytes}}
	if err := hub.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: rbac.SystemNamespace, Name: sec.Name, Key: "kubeconfig"}}}
	if err := hub.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

func memberClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(env.Members[0].RESTConfig(), client.Options{Scheme: member.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run is one telling of the story in its own hub namespace, with its own controller processes.
type run struct {
	t          *testing.T
	hub        client.Client
	bin        string
	kubeconfig string
	kill       bool
	ns         string
	opNS, crNS string
	procs      *procs
}

func newRun(t *testing.T, hub client.Client, bin string, kill bool) *run {
	t.Helper()
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	r := &run{t: t, hub: hub, bin: bin, kill: kill, ns: ns, opNS: "op-" + ns, crNS: "crs-" + ns, procs: &procs{}}
	// The controller as its ServiceAccount, with the shipped RBAC and this namespace enabled.
	r.kubeconfig = testenv.KubeconfigFile(t, testenv.ControllerConfig(t, env.Hub, ns))
	t.Cleanup(func() { r.procs.stopAll(t) })
	return r
}

// outcome is how a story ended, without what differs between two tellings (names of
// namespaces, UIDs, times).
type outcome struct {
	Phase, CurrentRelease, FailedRelease string
	Revision                             int32
	History                              []string
	Conditions                           []string
	Targets                              []string
	Snapshots                            []string
	Record                               string
}

// story installs release A, fills the member with MySQLClusters, upgrades to B (the leader
// dies during the snapshot), then to a broken release whose health gate fails, so the
// rollout rolls back automatically (the leader dies during the restore).
func (r *run) story() outcome {
	t := r.t
	mode := "uninterrupted"
	if r.kill {
		mode = "leader killed"
	}
	t.Logf("%s: namespace %s", mode, r.ns)
	r.makeRelease("mysql-a", "1.0.0", false)
	r.makeRelease("mysql-b", "2.0.0", false)
	r.makeRelease("mysql-bad", "2.0.1", true)
	r.procs.start(t, r.bin, r.kubeconfig, mode+"-1")
	r.procs.start(t, r.bin, r.kubeconfig, mode+"-2")

	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: rollout, Namespace: r.ns}, Spec: v1alpha1.RolloutSpec{
		Operator: operator, Release: "mysql-a", InstallNamespace: r.opNS,
		Waves:       []v1alpha1.Wave{{Name: "all", Clusters: []string{env.Members[0].Name}}},
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 20 * time.Second}},
	}}
	if err := r.hub.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	r.waitPhase("mysql-a", v1alpha1.RolloutSucceeded)
	if err := testfixture.Populate(t.Context(), env.Members[0].RESTConfig(), testfixture.Options{Namespaces: []string{r.crNS}, Count: crs, Children: true}); err != nil {
		t.Fatal(err)
	}

	// Upgrade: the leader dies while the member's pre-upgrade snapshot is taken.
	leader := r.procs.leader(t, t.Context())
	r.setRelease("mysql-b")
	if r.kill {
		// As soon as the Snapshot of revision 2 exists: the capture has begun.
		var snap *v1alpha1.Snapshot
		r.killLeaderWhen(leader, &v1alpha1.SnapshotList{}, func(o client.Object) bool {
			s := o.(*v1alpha1.Snapshot)
			snap = s
			return s.Labels[v1alpha1.LabelRevision] == "2" && !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
		}, func() (bool, string) {
			if err := r.hub.Get(t.Context(), client.ObjectKeyFromObject(snap), snap); err != nil {
				t.Fatal(err)
			}
			tg := r.target()
			return !meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) && tg.Status.Step == target.StepSnapshot,
				fmt.Sprintf("snapshot %s (Ready %v, journal step %s)", snap.Name, meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady), tg.Status.Step)
		})
		r.procs.start(t, r.bin, r.kubeconfig, mode+"-3") // the Deployment would restart the pod
	}
	r.waitPhase("mysql-b", v1alpha1.RolloutSucceeded)

	// A broken release: its gate fails, and the automatic rollback restores the member from the
	// snapshot taken before it. The leader dies while that restore runs.
	leader = r.procs.leader(t, t.Context())
	r.setRelease("mysql-bad")
	if r.kill {
		// As soon as the restore quiesced the operator: it is rewriting the member's objects.
		restoring := func(tg *v1alpha1.RolloutTarget) bool {
			return tg.Status.Revision == tg.Spec.Revision && tg.Spec.Path == v1alpha1.PathRestore && tg.Status.Step == target.StepRestore
		}
		r.killLeaderWhen(leader, &v1alpha1.RolloutTargetList{}, func(o client.Object) bool {
			tg := o.(*v1alpha1.RolloutTarget)
			return restoring(tg) && slices.Contains(tg.Status.RestoreSteps, restore.StepQuiesce)
		}, func() (bool, string) {
			tg := r.target()
			return restoring(tg) && !slices.Contains(tg.Status.RestoreSteps, restore.StepResume),
				fmt.Sprintf("the restore of snapshot %s (restore steps done: %v)", tg.Spec.Snapshot, tg.Status.RestoreSteps)
		})
	}
	final := r.waitPhase("mysql-b", v1alpha1.RolloutRolledBack)
	r.assertMemberEqualsSnapshot(final)
	r.procs.stopAll(t)
	return r.outcome()
}

// killLeaderWhen kills the leader with SIGKILL as soon as a watched object of the run's
// namespace satisfies trigger, checks with still (which reads the hub after the death: only
// the dead leader wrote there, and no standby leads yet) that the work it was doing was not
// finished, and that the standby leads within takeoverBound.
func (r *run) killLeaderWhen(leader *proc, list client.ObjectList, trigger func(client.Object) bool, still func() (bool, string)) {
	t := r.t
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, list, client.InNamespace(r.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for hit := false; !hit; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the moment to kill came")
			}
			obj, isObj := ev.Object.(client.Object)
			hit = isObj && (ev.Type == watch.Added || ev.Type == watch.Modified) && trigger(obj)
		case <-ctx.Done():
			t.Fatalf("the moment to kill never came; leader log:\n%s", leader.logTail())
		}
	}
	before := r.lease()
	killedAt := time.Now()
	leader.kill(t)

	during, what := still()
	if !during {
		t.Fatalf("the leader was killed too late: %s", what)
	}
	t.Logf("killed leader %s (SIGKILL) during %s", leader.name, what)

	err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*takeoverBound, true, func(context.Context) (bool, error) {
		holder := ptr.Deref(r.lease().Spec.HolderIdentity, "")
		return holder != "" && holder != ptr.Deref(before.Spec.HolderIdentity, ""), nil
	})
	took := time.Since(killedAt)
	if err != nil {
		t.Fatalf("no standby took the lease within %s of the leader's death", 2*takeoverBound)
	}
	if took > takeoverBound {
		t.Errorf("the standby took over %s after the leader died, want at most %s (lease %s, retry %s)", took.Round(time.Millisecond), takeoverBound, leaseDuration, retryPeriod)
	}
	standby := r.procs.leader(t, t.Context())
	if standby == leader {
		t.Fatal("the killed process still leads")
	}
	t.Logf("standby %s took over %s after the leader died (bound %s)", standby.name, took.Round(time.Millisecond), takeoverBound)
}

// target reads the run's only RolloutTarget.
func (r *run) target() *v1alpha1.RolloutTarget {
	tg := &v1alpha1.RolloutTarget{}
	if err := r.hub.Get(r.t.Context(), client.ObjectKey{Namespace: r.ns, Name: rollout + "-" + env.Members[0].Name}, tg); err != nil {
		r.t.Fatal(err)
	}
	return tg
}

func (r *run) lease() *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	if err := r.hub.Get(r.t.Context(), client.ObjectKey{Namespace: rbac.SystemNamespace, Name: controller.LeaderElectionID}, l); err != nil {
		r.t.Fatal(err)
	}
	return l
}

func (r *run) snapshots() []string {
	var list v1alpha1.SnapshotList
	if err := r.hub.List(r.t.Context(), &list, client.InNamespace(r.ns)); err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		ready := meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady)
		out = append(out, fmt.Sprintf("%s ready=%v crds=%d crs=%d associated=%d", s.Name, ready, s.Status.Counts.CRDs, s.Status.Counts.CustomResources, s.Status.Counts.Associated))
	}
	slices.Sort(out)
	return out
}

func (r *run) rollout() *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	if err := r.hub.Get(r.t.Context(), client.ObjectKey{Namespace: r.ns, Name: rollout}, ro); err != nil {
		r.t.Fatal(err)
	}
	return ro
}

func (r *run) setRelease(rel string) {
	r.t.Helper()
	err := wait.PollUntilContextTimeout(r.t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ro := r.rollout()
		ro.Spec.Release = rel
		err := r.hub.Update(ctx, ro)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		r.t.Fatal(err)
	}
}

func (r *run) waitPhase(rel, phase string) *v1alpha1.Rollout {
	r.t.Helper()
	var ro *v1alpha1.Rollout
	err := wait.PollUntilContextTimeout(r.t.Context(), 200*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		ro = r.rollout()
		return ro.Status.CurrentRelease == rel && ro.Status.Phase == phase, nil
	})
	if err != nil {
		var logs strings.Builder
		for _, p := range r.procs.all {
			fmt.Fprintf(&logs, "--- %s (alive %v):\n%s\n", p.name, p.alive(), p.logTail())
		}
		r.t.Fatalf("rollout did not reach %s for %s: phase %s release %s, conditions %+v\n%s", phase, rel, ro.Status.Phase, ro.Status.CurrentRelease, ro.Status.Conditions, logs.String())
	}
	return ro
}

// outcome summarizes how the story ended.
func (r *run) outcome() outcome {
	ro := r.rollout()
	norm := func(s string) string { return strings.ReplaceAll(s, r.ns, "NS") }
	o := outcome{Phase: ro.Status.Phase, CurrentRelease: ro.Status.CurrentRelease, FailedRelease: ro.Status.FailedRelease, Revision: ro.Status.Revision}
	for _, h := range ro.Status.History {
		o.History = append(o.History, fmt.Sprintf("revision %d %s %s automatic=%v", h.Revision, h.Release, h.Outcome, h.Automatic))
	}
	for _, c := range ro.Status.Conditions {
		o.Conditions = append(o.Conditions, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Reason))
	}
	slices.Sort(o.Conditions)
	var targets v1alpha1.RolloutTargetList
	if err := r.hub.List(r.t.Context(), &targets, client.InNamespace(r.ns)); err != nil {
		r.t.Fatal(err)
	}
	for _, tg := range targets.Items {
		st := tg.Status
		o.Targets = append(o.Targets, fmt.Sprintf("%s revision %d/%d %s %s->%s %s %s attempt=%d snapshot=%s message=%q", tg.Spec.Cluster, tg.Spec.Revision, st.Revision,
			tg.Spec.Path, tg.Spec.FromRelease, tg.Spec.ToRelease, st.Phase, st.Step, st.Attempt, st.Snapshot, norm(st.Message)))
	}
	o.Snapshots = r.snapshots()
	rec, err := member.ReadRecord(r.t.Context(), memberClient(r.t), operator)
	if err != nil || rec == nil {
		r.t.Fatalf("member record: %v %v", rec, err)
	}
	o.Record = fmt.Sprintf("%s %s %s snapshot=%s rollout=%s", rec.Release, rec.Version, rec.Image, rec.Snapshot, norm(rec.Rollout))
	return o
}

// assertMemberEqualsSnapshot checks that every object of the snapshot the rollback restored
// equals the live one.
func (r *run) assertMemberEqualsSnapshot(ro *v1alpha1.Rollout) {
	t := r.t
	var targets v1alpha1.RolloutTargetList
	if err := r.hub.List(t.Context(), &targets, client.InNamespace(r.ns)); err != nil {
		t.Fatal(err)
	}
	if len(targets.Items) != 1 || targets.Items[0].Spec.Path != v1alpha1.PathRestore || targets.Items[0].Spec.Snapshot == "" {
		t.Fatalf("want one restored target, got %+v", targets.Items)
	}
	snap := &v1alpha1.Snapshot{}
	if err := r.hub.Get(t.Context(), client.ObjectKey{Namespace: r.ns, Name: targets.Items[0].Spec.Snapshot}, snap); err != nil {
		t.Fatal(err)
	}
	_, entries, err := (&snapshot.Hub{Client: r.hub}).Load(t.Context(), snap)
	if err != nil {
		t.Fatalf("loading snapshot %s (checksum verified): %v", snap.Name, err)
	}
	m := env.Members[0]
	dc, err := discovery.NewDiscoveryClientForConfig(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crsSeen := 0
	for _, e := range entries {
		gvk := e.Object.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s: %v", gvk, err)
			continue
		}
		live, err := dyn.Resource(mapping.Resource).Namespace(e.Object.GetNamespace()).Get(t.Context(), e.Object.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s/%s of snapshot %s: %v", gvk.Kind, e.Object.GetNamespace(), e.Object.GetName(), snap.Name, err)
			continue
		}
		if gvk.Kind == "MySQLCluster" {
			crsSeen++
		}
		if !restore.Equal(e.Object, live) {
			t.Errorf("%s %s/%s differs from snapshot %s", gvk.Kind, e.Object.GetNamespace(), e.Object.GetName(), snap.Name)
		}
	}
	if crsSeen != crs {
		t.Errorf("snapshot %s holds %d MySQLClusters, want %d", snap.Name, crsSeen, crs)
	}
}

// makeRelease creates a release of the MySQLCluster CRD and the operator Deployment; a broken
// one is unschedulable everywhere, so its health gate fails.
func (r *run) makeRelease(name, version string, broken bool) {
	podSpec := ""
	if broken {
		podSpec = "      nodeSelector: {rewind.dev/no-such-node: \"true\"}\n"
	}
	if err := testfixture.CreateRelease(r.t.Context(), r.hub, r.t.TempDir(), r.ns, name, version, podSpec); err != nil {
		r.t.Fatal(err)
	}
}

// cleanMember removes what a story left on the member: the record and the CRD (so its CRs).
// The operator and CR namespaces are per story.
func cleanMember(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	mc := memberClient(t)
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("mysqlclusters.database.example.com")
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName(operator)}},
		crd,
	}
	for _, o := range objs {
		_ = mc.Delete(ctx, o)
	}
	for _, o := range objs {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := mc.Get(ctx, client.ObjectKeyFromObject(o), o)
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		})
		if err != nil {
			t.Fatalf("cleaning the member: %s %s is still there", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
		}
	}
}

// diff lists the fields of two outcomes that differ.
func diff(a, b outcome) string {
	var out strings.Builder
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			fmt.Fprintf(&out, "%s:\n  uninterrupted: %v\n  interrupted:   %v\n", va.Type().Field(i).Name, va.Field(i).Interface(), vb.Field(i).Interface())
		}
	}
	return out.String()
}
