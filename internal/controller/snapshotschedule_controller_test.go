//go:build !unit

package controller

import (
	"context"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

const testCommit = "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90"

// scheduleFixture registers member1 in the hub (labelled env=test), creates the release
// mysql-v1 in ns, installs its CRD with 6 CRs on the member and records it as installed.
func scheduleFixture(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := t.Context()
	m := env.Members[0]
	cl := testenv.Member(t, m)
	objs := []*unstructured.Unstructured{testfixture.MySQLCRD()}
	if _, err := apply.Objects(ctx, cl, objs, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := testfixture.Populate(ctx, m.RESTConfig(), testfixture.Options{Namespaces: []string{"sched-a"}, Count: 6, Children: true}); err != nil {
		t.Fatal(err)
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		t.Fatal(err)
	}
	rel := &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Name: "mysql-v1", Namespace: ns}, Spec: v1alpha1.OperatorReleaseSpec{
		Operator: "mysql-operator", Version: "1.0.0", GitCommit: testCommit, Image: "example.com/mysql-operator:" + testCommit,
		Format: v1alpha1.FormatManifests, Digest: release.Digest(canonical),
	}}
	if _, err := release.Create(ctx, c, rel, canonical); err != nil {
		t.Fatal(err)
	}
	if err := member.WriteRecord(ctx, cl.Client, member.Record{Operator: "mysql-operator", Release: "mysql-v1", Version: "1.0.0", Namespace: "mysql-system"}); err != nil {
		t.Fatal(err)
	}
	registerMember(t, c, ns)
}

// registerMember registers member1 in the hub, labelled env=test, with its kubeconfig Secret
// in ns; it is removed when the test ends.
func registerMember(t *testing.T, c client.Client, ns string) {
	t.Helper()
	ctx := t.Context()
	m := env.Members[0]
	kc, err := os.ReadFile(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member1-kubeconfig", Namespace: ns}, Data: map[string][]byte{"kubeconfig": kc}}); err != nil {
		t.Fatal(err)
	}
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Labels: map[string]string{"env": "test"}}, Spec: v1alpha1.MemberClusterSpec{
		KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: ns, Name: "member1-kubeconfig", Key: "kubeconfig"},
	}}
	if err := c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), mc) })
}

func snapshotNames(t *testing.T, c client.Client, ns string) []string {
	t.Helper()
	var list v1alpha1.SnapshotList
	if err := c.List(t.Context(), &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelSchedule: "hourly"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

func TestSnapshotScheduleTakesExpiresAndKeepsReferenced(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	scheduleFixture(t, c, ns)

	// A folder store, probed Ready by its reconciler.
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "folder", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderFolder, Path: t.TempDir()}}
	if err := c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := (&SnapshotStoreReconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)}); err != nil {
		t.Fatal(err)
	}

	sc := &v1alpha1.SnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Name: "hourly", Namespace: ns}, Spec: v1alpha1.SnapshotScheduleSpec{
		Schedule: "0 * * * *", Operator: "mysql-operator", Store: "folder", TTL: &metav1.Duration{Duration: 90 * time.Minute}, Retention: 10,
		ClusterSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "test"}},
	}}
	if err := c.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(sc), sc); err != nil {
		t.Fatal(err)
	}
	hour := sc.CreationTimestamp.Truncate(time.Hour).Add(time.Hour) // the first run
	now := hour.Add(-time.Minute)
	r := &SnapshotScheduleReconciler{Client: c, Members: &member.Cache{Hub: c}, Releases: &release.Cache{}, Now: func() time.Time { return now }}
	reconcile := func() (ctrl.Result, *v1alpha1.SnapshotSchedule) {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(sc)})
		if err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.SnapshotSchedule{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sc), got); err != nil {
			t.Fatal(err)
		}
		return res, got
	}
	name := func(h time.Time) string { return "hourly-member1-" + h.UTC().Format("20060102-1504") }

	// Not due yet: nothing taken, the requeue is the time left.
	res, got := reconcile()
	if res.RequeueAfter != time.Minute || len(snapshotNames(t, c, ns)) != 0 || !got.Status.NextScheduleTime.Time.Equal(hour) {
		t.Fatalf("before the first run: requeue %s, snapshots %v, next %v", res.RequeueAfter, snapshotNames(t, c, ns), got.Status.NextScheduleTime)
	}

	// Run 1 at hour: a snapshot into the store, expiring 90 minutes later.
	now = hour.Add(10 * time.Second)
	_, got = reconcile()
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) || len(got.Status.LastRun) != 1 || got.Status.LastRun[0].Snapshot != name(hour) {
		t.Fatalf("after run 1: %+v", got.Status)
	}
	first := &v1alpha1.Snapshot{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name(hour)}, first); err != nil {
		t.Fatal(err)
	}
	if first.Status.Store != "folder" || first.Status.Counts.CustomResources != 6 || first.Annotations[v1alpha1.AnnotationExpiresAt] != hour.Add(90*time.Minute).UTC().Format(time.RFC3339) {
		t.Fatalf("the scheduled snapshot: store %q, counts %+v, annotations %v", first.Status.Store, first.Status.Counts, first.Annotations)
	}
	// Reconciling again within the hour takes nothing more.
	now = hour.Add(30 * time.Minute)
	reconcile()
	if names := snapshotNames(t, c, ns); len(names) != 1 {
		t.Fatalf("a second reconcile in the same hour: %v", names)
	}

	// Run 2 at hour+1h; run 1 has not expired yet (hour+90m).
	now = hour.Add(time.Hour + time.Second)
	reconcile()
	if names := snapshotNames(t, c, ns); !slices.Equal(names, []string{name(hour), name(hour.Add(time.Hour))}) {
		t.Fatalf("after run 2: %v", names)
	}
	// Run 2 is referenced by a RolloutTarget (a rollout restores it).
	rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "mysql-member1", Namespace: ns}, Spec: v1alpha1.RolloutTargetSpec{
		Rollout: "mysql", Cluster: "member1", Revision: 1, Path: v1alpha1.PathRestore, ToRelease: "mysql-v1", Snapshot: name(hour.Add(time.Hour)),
		Operator: "mysql-operator", InstallNamespace: "mysql-system",
	}}
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	// Run 3 at hour+2h: run 1 expired (hour+90m) and goes; run 2 stays.
	now = hour.Add(2*time.Hour + time.Second)
	reconcile()
	if names := snapshotNames(t, c, ns); !slices.Equal(names, []string{name(hour.Add(time.Hour)), name(hour.Add(2 * time.Hour))}) {
		t.Fatalf("after run 3: %v", names)
	}
	// Hours later (runs 4..6 were missed; one run takes their place): run 2 is past its
	// expiry but referenced, and stays; run 3 goes.
	now = hour.Add(5*time.Hour + time.Second)
	_, got = reconcile()
	if names := snapshotNames(t, c, ns); !slices.Equal(names, []string{name(hour.Add(time.Hour)), name(hour.Add(5 * time.Hour))}) {
		t.Fatalf("after run 6: %v (expired so far: %d)", names, got.Status.Expired)
	}
	if got.Status.Expired != 2 || !got.Status.LastScheduleTime.Time.Equal(hour.Add(5*time.Hour)) {
		t.Fatalf("status: expired %d, last %v", got.Status.Expired, got.Status.LastScheduleTime)
	}

	// Retention by count: keep 1. The next run keeps the newest and the referenced one.
	got.Spec.Retention = 1
	got.Spec.TTL = nil
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	now = hour.Add(6*time.Hour + time.Second)
	reconcile()
	if names := snapshotNames(t, c, ns); !slices.Equal(names, []string{name(hour.Add(time.Hour)), name(hour.Add(6 * time.Hour))}) {
		t.Fatalf("after run 7 with retention 1: %v", names)
	}
	// Once nothing references it, retention removes it too.
	if err := c.Delete(ctx, rt); err != nil {
		t.Fatal(err)
	}
	now = hour.Add(7*time.Hour + time.Second)
	reconcile()
	if names := snapshotNames(t, c, ns); !slices.Equal(names, []string{name(hour.Add(7 * time.Hour))}) {
		t.Fatalf("after run 8: %v", names)
	}

	// A store that is not Ready holds the run, with the reason.
	if err := c.Get(ctx, client.ObjectKeyFromObject(st), st); err != nil {
		t.Fatal(err)
	}
	st.Spec.Path = "/proc/no-such-folder"
	if err := c.Update(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := (&SnapshotStoreReconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)}); err != nil {
		t.Fatal(err)
	}
	now = hour.Add(8*time.Hour + time.Second)
	res, got = reconcile()
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); cond == nil || cond.Reason != v1alpha1.ReasonStoreNotReady || res.RequeueAfter != storeRetry {
		t.Fatalf("with the store not Ready: %+v, requeue %s", cond, res.RequeueAfter)
	}
	if !got.Status.LastScheduleTime.Time.Equal(hour.Add(7 * time.Hour)) {
		t.Fatalf("a held run must not count as done: last %v", got.Status.LastScheduleTime)
	}
}

func TestSnapshotScheduleRejectsABadSpec(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	sc := &v1alpha1.SnapshotSchedule{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}, Spec: v1alpha1.SnapshotScheduleSpec{
		Schedule: "every day", Operator: "mysql-operator"}}
	if err := c.Create(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	r := &SnapshotScheduleReconciler{Client: c, Members: &member.Cache{Hub: c}, Releases: &release.Cache{}}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(sc)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(sc), sc); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(sc.Status.Conditions, v1alpha1.ConditionStalled)
	if cond == nil || cond.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(cond.Message, `spec.schedule "every day"`) {
		t.Fatalf("Stalled condition %+v", cond)
	}
}
