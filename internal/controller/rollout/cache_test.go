package rollout

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// These tests run the Rollout reconciler with an informer cache that is behind the API server
// (the fake client stands for the API server; the cache serves RolloutTargets as they were
// before the reconciler's own last writes), as happens on a loaded host: a reconcile must not
// act on what the cache has not caught up with yet.

// laggingCache is the manager's cache, behind the API server for RolloutTargets (and, with
// rollouts, Rollouts): it serves them from behind, everything else from the API server.
// Writes go to the API server.
type laggingCache struct {
	client.Client
	behind   client.Reader
	rollouts bool
}

func (c laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *v1alpha1.RolloutTarget:
		return c.behind.Get(ctx, key, obj, opts...)
	case *v1alpha1.Rollout:
		if c.rollouts {
			return c.behind.Get(ctx, key, obj, opts...)
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c laggingCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.RolloutTargetList); ok {
		return c.behind.List(ctx, list, opts...)
	}
	return c.Client.List(ctx, list, opts...)
}

// generations is the API server's handling of a RolloutTarget's metadata.generation, which the
// fake client does not have: a write that changes the spec moves it, and a JSON patch whose
// test fails is refused as Invalid (422), as kube-apiserver refuses it. Target spec writes
// test the generation they read (patch.Spec).
type generations struct{ client.Client }

func (c generations) stored(ctx context.Context, obj client.Object) *v1alpha1.RolloutTarget {
	if _, ok := obj.(*v1alpha1.RolloutTarget); !ok {
		return nil
	}
	tg := &v1alpha1.RolloutTarget{}
	if c.Client.Get(ctx, client.ObjectKeyFromObject(obj), tg) != nil {
		return nil
	}
	return tg
}

func (c generations) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if old := c.stored(ctx, obj); old != nil {
		obj.SetGeneration(old.Generation)
		if !equality.Semantic.DeepEqual(old.Spec, obj.(*v1alpha1.RolloutTarget).Spec) {
			obj.SetGeneration(old.Generation + 1)
		}
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c generations) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	old := c.stored(ctx, obj)
	if err := c.Client.Patch(ctx, obj, p, opts...); err != nil {
		if p.Type() == types.JSONPatchType {
			return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
		return err
	}
	if old != nil && !equality.Semantic.DeepEqual(old.Spec, obj.(*v1alpha1.RolloutTarget).Spec) {
		obj.SetGeneration(old.Generation + 1)
		return c.Client.Update(ctx, obj)
	}
	return nil
}

var testNow = time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// revisionTwo is a Rollout that started revision 2 (a -> b) over member1 (wave canary) and
// member2, member3 (wave rest).
func revisionTwo() *v1alpha1.Rollout {
	start := metav1.NewTime(testNow.Add(-time.Minute))
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: "fleet", UID: "rollout-uid", Generation: 2},
		Spec: v1alpha1.RolloutSpec{Operator: "mysql-operator", Release: "b", InstallNamespace: "op", Waves: []v1alpha1.Wave{
			{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
			{Name: "rest", Clusters: []string{"member2", "member3"}, MaxConcurrency: 2},
		}},
		Status: v1alpha1.RolloutStatus{Revision: 2, CurrentRelease: "b", PreviousRelease: "a", Phase: v1alpha1.RolloutProgressing,
			Targets: v1alpha1.TargetCounts{Total: 3},
			History: []v1alpha1.Revision{{Revision: 1, Release: "a", Outcome: "Succeeded"}, {Revision: 2, Release: "b", Outcome: "InProgress", StartedAt: &start}}},
	}
}

// targetOf is a cluster's target of ro at a revision, planned as path; its status is of the
// revision before (its executor has not seen the plan) unless set.
func targetOf(ro *v1alpha1.Rollout, cluster string, wave, revision int32, path, from, to string) *v1alpha1.RolloutTarget {
	return &v1alpha1.RolloutTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ro.Namespace, Name: TargetName(ro.Name, cluster),
			Labels: map[string]string{v1alpha1.LabelRollout: ro.Name, v1alpha1.LabelCluster: cluster},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Rollout", Name: ro.Name, UID: ro.UID,
				Controller: ptr.To(true)}}},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: ro.Name, Cluster: cluster, Revision: revision, Wave: wave, Path: path,
			FromRelease: from, ToRelease: to, Operator: ro.Spec.Operator, InstallNamespace: ro.Spec.InstallNamespace},
		Status: v1alpha1.RolloutTargetStatus{Revision: revision - 1, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterSucceeded, Step: "Done"},
	}
}

// world is an API server (server) and a reconciler whose cache holds the targets as cached.
type world struct {
	t      *testing.T
	server client.Client
	r      *Reconciler
	events *events.FakeRecorder
	ro     *v1alpha1.Rollout
}

// newWorld stores ro and the targets as cached on the API server, gives the reconciler a
// cache holding them, then applies the writes the cache has not seen yet (newer) on the API
// server only. newer nil: the cache is up to date.
func newWorld(t *testing.T, ro *v1alpha1.Rollout, cached []*v1alpha1.RolloutTarget, newer func(server client.Client)) *world {
	t.Helper()
	s := testScheme(t)
	objs := []client.Object{ro}
	for _, tg := range cached {
		if tg.Generation == 0 {
			tg.Generation = 1
		}
		objs = append(objs, tg)
	}
	server := generations{fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.Rollout{}, &v1alpha1.RolloutTarget{}).WithObjects(objs...).Build()}
	var list v1alpha1.RolloutTargetList
	if err := server.List(t.Context(), &list); err != nil {
		t.Fatal(err)
	}
	stored := &v1alpha1.Rollout{}
	if err := server.Get(t.Context(), client.ObjectKeyFromObject(ro), stored); err != nil {
		t.Fatal(err)
	}
	seen := []client.Object{stored}
	for i := range list.Items {
		seen = append(seen, &list.Items[i])
	}
	behind := fake.NewClientBuilder().WithScheme(s).WithStatusSubresource(&v1alpha1.Rollout{}, &v1alpha1.RolloutTarget{}).WithObjects(seen...).Build()
	if newer != nil {
		newer(server)
	}
	rec := events.NewFakeRecorder(100)
	return &world{t: t, server: server, events: rec, ro: ro, r: &Reconciler{Client: laggingCache{Client: server, behind: behind}, Hub: laggingCache{Client: server, behind: behind}, Live: server,
		Recorder: rec, Now: func() time.Time { return testNow }}}
}

func (w *world) reconcile() (ctrl.Result, error) {
	w.t.Helper()
	return w.r.Reconcile(w.t.Context(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: w.ro.Namespace, Name: w.ro.Name}})
}

func (w *world) target(cluster string) *v1alpha1.RolloutTarget {
	w.t.Helper()
	tg := &v1alpha1.RolloutTarget{}
	if err := w.server.Get(w.t.Context(), client.ObjectKey{Namespace: w.ro.Namespace, Name: TargetName(w.ro.Name, cluster)}, tg); err != nil {
		w.t.Fatal(err)
	}
	return tg
}

func (w *world) rollout() *v1alpha1.Rollout {
	w.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := w.server.Get(w.t.Context(), client.ObjectKeyFromObject(w.ro), ro); err != nil {
		w.t.Fatal(err)
	}
	return ro
}

// update changes an object on the API server (its cached copy stays as it was).
func update[T client.Object](t *testing.T, c client.Client, obj T, mutate func(T)) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	mutate(obj)
	if err := c.Update(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	mutate(obj) // the update wrote the spec and read back the status as stored
	if err := c.Status().Update(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
}

// The race TestWave1FailsRollsBackAndWave2NeverStarts met on a loaded host: the Rollout
// recorded revision 2, whose targets it wrote first, but the cache still holds member1's target
// of revision 1. Wave canary then had no cluster at the current revision, counted as done, and
// wave rest opened: member2 and member3 took snapshots while member1 failed its gate.
func TestAWaveIsNotDoneWhileItsTargetIsStaleInTheCache(t *testing.T) {
	ro := revisionTwo()
	rev1 := targetOf(ro, "member1", 0, 1, v1alpha1.PathUpgrade, "", "a")
	w := newWorld(t, ro, []*v1alpha1.RolloutTarget{
		rev1,
		targetOf(ro, "member2", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
		targetOf(ro, "member3", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
	}, func(server client.Client) {
		update(t, server, rev1.DeepCopy(), func(tg *v1alpha1.RolloutTarget) {
			tg.Spec.Revision, tg.Spec.FromRelease, tg.Spec.ToRelease = 2, "a", "b"
		})
	})
	for range 3 { // a requeue, or another event, does not open it either
		if _, err := w.reconcile(); err != nil {
			t.Error(err)
			break
		}
	}
	for _, c := range []string{"member2", "member3"} {
		if w.target(c).Spec.Start {
			t.Errorf("wave rest opened (%s started) while wave canary's member1 had not even started", c)
		}
	}
	if !w.target("member1").Spec.Start {
		t.Error("member1, seen on the API server at revision 2, must be started")
	}
	if got := w.rollout().Status; got.CurrentWave != 0 || got.Targets.Total != 3 {
		t.Errorf("currentWave %d, targets %+v: want wave 0 of 3 targets", got.CurrentWave, got.Targets)
	}
}

// A target the API server does not hold at the revision either (deleted by hand) does not
// count as done: the rollout says it stalls and opens nothing.
func TestAMissingTargetStallsTheRollout(t *testing.T) {
	ro := revisionTwo()
	w := newWorld(t, ro, []*v1alpha1.RolloutTarget{
		targetOf(ro, "member2", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
		targetOf(ro, "member3", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
	}, nil)
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if w.target("member2").Spec.Start || w.target("member3").Spec.Start {
		t.Error("wave rest opened while a target of wave canary is missing")
	}
	got := w.rollout().Status
	stalled := false
	for _, c := range got.Conditions {
		stalled = stalled || c.Type == v1alpha1.ConditionStalled && c.Reason == ReasonTargetsMissing && strings.Contains(c.Message, "holds 2 of them")
	}
	if !stalled || got.CurrentWave != 0 {
		t.Errorf("currentWave %d, conditions %+v: want wave 0, Stalled %s", got.CurrentWave, got.Conditions, ReasonTargetsMissing)
	}
}

// RollbackFailed: the reconciler set member1's failed upgrade to a restore, but the cache
// still shows it as a failed upgrade. The restore is not asked for (and counted, and told)
// again, and the reconcile does not fail on the conflict its stale copy meets.
func TestARestoreOfAFailedClusterIsAskedForOnce(t *testing.T) {
	ro := revisionTwo()
	ro.Spec.FailurePolicy = v1alpha1.FailurePolicyRollbackFailed
	ro.Status.History[1].Reason = "cluster member1 failed at HealthGate: unhealthy"
	failed := targetOf(ro, "member1", 0, 2, v1alpha1.PathUpgrade, "a", "b")
	failed.Spec.Start, failed.Spec.Snapshot = true, "mysql-member1-r2"
	failed.Status = v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterFailed, Step: "HealthGate",
		Message: "unhealthy", Snapshot: "mysql-member1-r2"}
	w := newWorld(t, ro, []*v1alpha1.RolloutTarget{
		failed,
		targetOf(ro, "member2", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
		targetOf(ro, "member3", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
	}, func(server client.Client) {
		update(t, server, failed.DeepCopy(), func(tg *v1alpha1.RolloutTarget) {
			tg.Spec.Path, tg.Spec.FromRelease, tg.Spec.ToRelease = v1alpha1.PathRestore, "b", "a"
			tg.Spec.Reason = "cluster member1 failed at HealthGate: unhealthy; restoring it to a"
		})
	})
	if _, err := w.reconcile(); err != nil {
		t.Fatalf("a stale copy of a target must not fail the reconcile: %v", err)
	}
	close(w.events.Events)
	for e := range w.events.Events {
		if strings.Contains(e, "ClusterRollback") {
			t.Errorf("the restore of member1 was asked for again: %s", e)
		}
	}
	if tg := w.target("member1"); tg.Spec.Path != v1alpha1.PathRestore || tg.Spec.ToRelease != "a" {
		t.Errorf("member1: %+v", tg.Spec)
	}
	if got := w.rollout().Status; got.Phase != v1alpha1.RolloutRollingBack {
		t.Errorf("phase %s, want %s while member1 is restored", got.Phase, v1alpha1.RolloutRollingBack)
	}
}

// A wave's bake passes only on a health check made at or after its end: the bake time alone
// does not open the next wave, a check one poll before the end does not either.
func TestTheNextWaveWaitsForTheCheckAtTheEndOfTheBake(t *testing.T) {
	ro := revisionTwo()
	ro.Spec.Waves[0].BakeTime = &metav1.Duration{Duration: 10 * time.Second}
	bakeStart := metav1.NewTime(testNow.Add(-15 * time.Second))
	ro.Status.BakeStartedAt = &bakeStart
	until := metav1.NewTime(bakeStart.Add(10 * time.Second))
	baked := targetOf(ro, "member1", 0, 2, v1alpha1.PathUpgrade, "a", "b")
	early := metav1.NewTime(until.Add(-300 * time.Millisecond))
	baked.Spec.Start, baked.Spec.HealthyUntil = true, &until
	baked.Status = v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterSucceeded, Step: "Done", HealthCheckedAt: &early}
	w := newWorld(t, ro, []*v1alpha1.RolloutTarget{
		baked,
		targetOf(ro, "member2", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
		targetOf(ro, "member3", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
	}, nil)
	for range 2 {
		if _, err := w.reconcile(); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.rollout().Status; got.CurrentWave != 0 || got.Phase != v1alpha1.RolloutBaking || w.target("member2").Spec.Start {
		t.Fatalf("wave %d, phase %s, member2 started %t: the last check (%s) was before the bake's end (%s)",
			got.CurrentWave, got.Phase, w.target("member2").Spec.Start, early.UTC(), until.UTC())
	}
	// member1 checks at the end of the bake.
	w = newWorld(t, w.rollout(), []*v1alpha1.RolloutTarget{w.target("member1"), w.target("member2"), w.target("member3")}, nil)
	update(t, w.server, w.target("member1"), func(tg *v1alpha1.RolloutTarget) { tg.Status.HealthCheckedAt = &until })
	w.r.Client = w.server
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.rollout().Status; got.CurrentWave != 1 || !w.target("member2").Spec.Start || !w.target("member3").Spec.Start {
		t.Errorf("wave %d, member2 started %t: the bake passed, wave rest opens in the same reconcile", got.CurrentWave, w.target("member2").Spec.Start)
	}
}

// After its status patch opened wave rest (and found it waits for approval), the reconciler
// is woken again before the cache holds that patch: it does not act on the Rollout as it was
// (wave canary just done), which would move to wave rest again, tell it again, and fail on
// the conflict its status patch meets.
func TestAReconcileDoesNotActOnTheRolloutBeforeItsOwnLastWrite(t *testing.T) {
	ro := revisionTwo()
	ro.Spec.Waves[1].RequireApproval = true
	done := targetOf(ro, "member1", 0, 2, v1alpha1.PathUpgrade, "a", "b")
	done.Spec.Start = true
	done.Status = v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterSucceeded, Step: "Done"}
	w := newWorld(t, ro, []*v1alpha1.RolloutTarget{
		done,
		targetOf(ro, "member2", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
		targetOf(ro, "member3", 1, 2, v1alpha1.PathUpgrade, "a", "b"),
	}, nil)
	w.r.Client = laggingCache{Client: w.server, behind: w.r.Client.(laggingCache).behind, rollouts: true}
	if _, err := w.reconcile(); err != nil {
		t.Fatal(err)
	}
	if got := w.rollout().Status; got.CurrentWave != 1 || got.Phase != v1alpha1.RolloutWaitingForApproval {
		t.Fatalf("wave %d, phase %s: want wave rest waiting for approval", got.CurrentWave, got.Phase)
	}
	if _, err := w.reconcile(); err != nil {
		t.Errorf("a reconcile of the Rollout as the cache still holds it: %v", err)
	}
	close(w.events.Events)
	told := 0
	for e := range w.events.Events {
		if strings.Contains(e, "PhaseWaitingForApproval") {
			told++
		}
	}
	if told != 1 {
		t.Errorf("wave rest's wait for approval was told %d times, want once", told)
	}
}
