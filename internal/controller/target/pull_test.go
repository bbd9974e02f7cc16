package target

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/release"
)

// TestRelayedStatus: the status a pull member's target shows is its copy's (once the agent
// wrote one), with the observed generation of the target's own spec; while the member's agent
// is lost, an opened, unfinished target waits (or fails with unreachablePolicy Fail); a
// target not opened or done does not; a target the hub failed keeps its failure.
func TestRelayedStatus(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{Now: func() time.Time { return now }}
	spec := v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade, Start: true}
	mk := func(gen int64, st v1alpha1.RolloutTargetStatus) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: spec, Status: st}
	}
	reachable := func(status metav1.ConditionStatus) *v1alpha1.MemberCluster {
		return &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}, Status: v1alpha1.MemberClusterStatus{
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: status, Reason: "AgentHeartbeatLost",
				LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}}}
	}
	running := v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: StepSnapshot, ObservedGeneration: 7}
	up := reachable(metav1.ConditionTrue)
	lost := reachable(metav1.ConditionUnknown)

	// Nothing from the agent yet: the target keeps what it shows.
	before := v1alpha1.RolloutTargetStatus{Revision: 1, Phase: v1alpha1.ClusterSucceeded}
	if got, _ := r.relayedStatus(mk(3, before), mk(7, v1alpha1.RolloutTargetStatus{}), up); got.Revision != 1 || got.Phase != v1alpha1.ClusterSucceeded {
		t.Errorf("before the agent wrote anything: %+v", got)
	}
	// The agent's status, its generation translated: the copy at generation 7 saw this spec.
	got, _ := r.relayedStatus(mk(3, before), mk(7, running), up)
	if got.Step != StepSnapshot || got.Phase != v1alpha1.ClusterUpgrading || got.ObservedGeneration != 3 {
		t.Errorf("relayed: %+v", got)
	}
	// A copy whose spec is behind the target's has not seen it.
	cp := mk(7, running)
	cp.Spec.Start = false
	if got, _ := r.relayedStatus(mk(3, v1alpha1.RolloutTargetStatus{ObservedGeneration: 2}), cp, up); got.ObservedGeneration != 2 {
		t.Errorf("a copy behind the target's spec: observedGeneration %d, want 2", got.ObservedGeneration)
	}
	// The agent lost: the running target waits.
	got, requeue := r.relayedStatus(mk(3, before), mk(7, running), lost)
	if got.WaitingFor != v1alpha1.ReasonMemberUnreachable || got.WaitingSince == nil || !strings.Contains(got.Message, "Hold") || requeue <= 0 {
		t.Errorf("agent lost: %+v (requeue %s)", got, requeue)
	}
	// ... or fails with unreachablePolicy Fail, and the failure stays once the agent is back.
	failing := mk(3, before)
	failing.Spec.UnreachablePolicy = v1alpha1.UnreachablePolicyFail
	got, _ = r.relayedStatus(failing, mk(7, running), lost)
	if got.Phase != v1alpha1.ClusterFailed || !strings.Contains(got.Message, "unreachablePolicy Fail") {
		t.Errorf("agent lost, policy Fail: %+v", got)
	}
	failing.Status = *got
	if got, _ := r.relayedStatus(failing, mk(7, running), up); got.Phase != v1alpha1.ClusterFailed {
		t.Errorf("the hub's failure must stay when the agent is back: %+v", got)
	}
	// Not opened, or done: no wait.
	closed := mk(3, before)
	closed.Spec.Start = false
	if got, _ := r.relayedStatus(closed, mk(7, running), lost); got.WaitingFor != "" {
		t.Errorf("a target not opened must not wait: %+v", got)
	}
	done := running
	done.Phase, done.Step = v1alpha1.ClusterSucceeded, StepDone
	if got, _ := r.relayedStatus(mk(3, before), mk(7, done), lost); got.WaitingFor != "" || got.Phase != v1alpha1.ClusterSucceeded {
		t.Errorf("a done target must not wait: %+v", got)
	}
	// A revision the agent has not seen waits from its start.
	if got, _ := r.relayedStatus(mk(3, before), mk(7, before), lost); got.Revision != 2 || got.Phase != v1alpha1.ClusterPending || got.WaitingFor != v1alpha1.ReasonMemberUnreachable {
		t.Errorf("a new revision while the agent is lost: %+v", got)
	}
}

func TestMemberSnapshotName(t *testing.T) {
	if got := MemberSnapshotName("team-a", "mysql-edge-r2"); got != "team-a.mysql-edge-r2" {
		t.Errorf("planned name: %s", got)
	}
	if got := MemberSnapshotName("team-a", "team-a.mysql-edge-r2"); got != "team-a.mysql-edge-r2" {
		t.Errorf("a name the copy gave back: %s", got)
	}
	if got := MemberSnapshotName("team-a", ""); got != "" {
		t.Errorf("no snapshot: %q", got)
	}
}

func TestCopyName(t *testing.T) {
	tt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql-edge"}}
	if got := CopyName(tt); got != "team-a.mysql-edge" {
		t.Errorf("CopyName %s", got)
	}
	if !IsCopy(&v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelSourceNamespace: "team-a"}}}) || IsCopy(tt) {
		t.Error("IsCopy")
	}
}

// TestLivenessChanged: a pull member's status writes that leave its Reachable condition as
// it was (the agent's heartbeat every 30 s) do not wake its targets; a change of that
// condition or of the mode does; a push member's writes never do.
func TestLivenessChanged(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	mk := func(mode string, status metav1.ConditionStatus, reason string, since metav1.Time, heartbeat string) *v1alpha1.MemberCluster {
		mc := &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{Mode: mode}}
		mc.Annotations = map[string]string{"beat": heartbeat}
		if status != "" {
			mc.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: status, Reason: reason, LastTransitionTime: since, Message: "heartbeat " + heartbeat}}
		}
		return mc
	}
	later := metav1.NewTime(t0.Add(time.Minute))
	for _, tc := range []struct {
		name     string
		old, cur *v1alpha1.MemberCluster
		want     bool
	}{
		{"a heartbeat", mk(v1alpha1.ModePull, metav1.ConditionTrue, "AgentHeartbeat", t0, "1"), mk(v1alpha1.ModePull, metav1.ConditionTrue, "AgentHeartbeat", t0, "2"), false},
		{"the agent lost", mk(v1alpha1.ModePull, metav1.ConditionTrue, "AgentHeartbeat", t0, "1"), mk(v1alpha1.ModePull, metav1.ConditionUnknown, "AgentHeartbeatLost", later, "1"), true},
		{"the agent back", mk(v1alpha1.ModePull, metav1.ConditionUnknown, "AgentHeartbeatLost", t0, "1"), mk(v1alpha1.ModePull, metav1.ConditionTrue, "AgentHeartbeat", later, "2"), true},
		{"first heard from", mk(v1alpha1.ModePull, "", "", t0, "0"), mk(v1alpha1.ModePull, metav1.ConditionTrue, "AgentHeartbeat", t0, "1"), true},
		{"a new reason", mk(v1alpha1.ModePull, metav1.ConditionFalse, "A", t0, "1"), mk(v1alpha1.ModePull, metav1.ConditionFalse, "B", t0, "1"), true},
		{"push to pull", mk(v1alpha1.ModePush, metav1.ConditionTrue, "Probe", t0, "1"), mk(v1alpha1.ModePull, metav1.ConditionTrue, "Probe", t0, "1"), true},
		{"pull to push", mk(v1alpha1.ModePull, metav1.ConditionTrue, "Probe", t0, "1"), mk(v1alpha1.ModePush, metav1.ConditionTrue, "Probe", t0, "1"), true},
		{"a push member's probe", mk(v1alpha1.ModePush, metav1.ConditionTrue, "Probe", t0, "1"), mk(v1alpha1.ModePush, metav1.ConditionFalse, "Probe", later, "2"), false},
	} {
		if got := livenessChanged(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.cur}); got != tc.want {
			t.Errorf("%s: livenessChanged %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRelayFoldsConflicts: a relay that meets a conflict (its read of the target or the copy
// was behind: the agent writes the copy's status, the hub the target's) runs again soon from a
// fresh read, as every status write does, instead of returning an error: the error made the
// workqueue back off exponentially, per target, up to minutes at 1,000 members.
func TestRelayFoldsConflicts(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	spec := v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade, Start: true}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"}, Spec: spec}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc, tgt).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	r := &Reconciler{Client: hub, Hub: hub, APIReader: hub}
	ctx := context.Background()

	// The finalizer write from a stale read.
	stale := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), stale); err != nil {
		t.Fatal(err)
	}
	fresh := stale.DeepCopy()
	fresh.Annotations = map[string]string{"touched": "by someone else"}
	if err := hub.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	res, err := r.relay(ctx, stale, mc)
	if err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Fatalf("a conflicting finalizer write: result %+v, error %v; want a requeue within a second and no error", res, err)
	}

	// The copy's spec update from a stale read of the copy.
	cur := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	if _, err := r.relay(ctx, cur, mc); err != nil {
		t.Fatalf("relay: %v", err)
	}
	cp := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.MemberNamespace("edge"), Name: CopyName(tgt)}, cp); err != nil {
		t.Fatalf("the copy was not written: %v", err)
	}
	// The copy's spec patch refused by its generation test (the relay's own last write of
	// the copy was not in its cache yet): soon again, no error.
	gen := &copyGenerations{Client: hub, read: 1, live: 2, refuse: 1}
	r.Client, r.APIReader = gen, gen.liveReader()
	cur.Spec.Revision = 3
	res, err = r.relay(ctx, cur, mc)
	if gen.refused != 1 || err != nil || res.RequeueAfter <= 0 || res.RequeueAfter > time.Second {
		t.Fatalf("a copy's spec patch that failed its generation test (%d refused): result %+v, error %v; want a requeue within a second and no error", gen.refused, res, err)
	}
	// Refused over an unchanged generation: the API server refused the spec itself; that is
	// an error, not a stale copy.
	gen = &copyGenerations{Client: hub, read: 1, live: 1, refuse: 1}
	r.Client, r.APIReader = gen, gen.liveReader()
	if _, err := r.relay(ctx, cur, mc); gen.refused != 1 || err == nil {
		t.Fatalf("a copy's spec the API server refuses (%d refused): error %v; want the error", gen.refused, err)
	}
}

// TestCopySpecWriteIgnoresAgentStatusWrites: the agent writes its copy's status between the
// relay's read of the copy and its write of the copy's new spec (at 1,000 members it does so
// all the time). The spec is written at once, over the agent's status, which stays: it was
// refused before (the optimistic lock on resourceVersion), and the relay ran again.
func TestCopySpecWriteIgnoresAgentStatusWrites(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc, tgt).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	r := &Reconciler{Client: hub, Hub: hub, APIReader: hub}
	ctx := context.Background()
	cur := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	if _, err := r.relay(ctx, cur, mc); err != nil { // the copy is created
		t.Fatalf("relay: %v", err)
	}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	copyKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace("edge"), Name: CopyName(tgt)}
	agent := &agentWritesAfterRead{Client: hub, key: copyKey}
	r.Client = agent
	cur.Spec.Start = true
	res, err := r.relay(ctx, cur, mc)
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("relay: result %+v, error %v; want the copy written at once", res, err)
	}
	got := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, copyKey, got); err != nil {
		t.Fatal(err)
	}
	if agent.writes != 1 || !got.Spec.Start {
		t.Errorf("the copy's spec.start is %v after the agent's %d status writes; want true (the relay's write refused by the agent's status write)", got.Spec.Start, agent.writes)
	}
	if got.Status.Phase != v1alpha1.ClusterUpgrading {
		t.Errorf("the copy's status.phase is %q; want the agent's %q, kept", got.Status.Phase, v1alpha1.ClusterUpgrading)
	}
}

// agentWritesAfterRead writes the copy's status, as its agent does, right after the relay
// read the copy (once): the copy the relay holds is one resourceVersion behind.
type agentWritesAfterRead struct {
	client.Client
	key    client.ObjectKey
	writes int
}

func (a *agentWritesAfterRead) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := a.Client.Get(ctx, key, obj, opts...); err != nil || key != a.key || a.writes > 0 {
		return err
	}
	cp := obj.DeepCopyObject().(*v1alpha1.RolloutTarget)
	cp.Status = v1alpha1.RolloutTargetStatus{Revision: cp.Spec.Revision, Path: cp.Spec.Path, Phase: v1alpha1.ClusterUpgrading}
	a.writes++
	return a.Client.Status().Update(ctx, cp)
}

// copyGenerations stands in for the API server's generations, which the fake client keeps
// none of: a RolloutTarget read shows generation read (live through liveReader), and the
// first refuse patches are refused with 422 Invalid, as a JSON patch whose test failed is.
type copyGenerations struct {
	client.Client
	read, live      int64
	refuse, refused int
}

func (g *copyGenerations) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := g.Client.Get(ctx, key, obj, opts...)
	if _, ok := obj.(*v1alpha1.RolloutTarget); ok && err == nil {
		obj.SetGeneration(g.read)
	}
	return err
}

func (g *copyGenerations) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*v1alpha1.RolloutTarget); ok && p.Type() == types.JSONPatchType && g.refused < g.refuse {
		g.refused++
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("RolloutTarget").GroupKind(), obj.GetName(), nil)
	}
	return g.Client.Patch(ctx, obj, p, opts...)
}

func (g *copyGenerations) liveReader() client.Reader { return liveGenerations{g} }

type liveGenerations struct{ g *copyGenerations }

func (l liveGenerations) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := l.g.Client.Get(ctx, key, obj, opts...)
	if err == nil {
		obj.SetGeneration(l.g.live)
	}
	return err
}

func (l liveGenerations) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return l.g.Client.List(ctx, list, opts...)
}

// TestARollbackCopiesNoInputAgain: a copy's next revision copies its inputs into the member's
// namespace only when it names one not copied for that copy before. A rollback returns to the
// releases and renderings its last revisions brought: nothing is read from the API server for
// them again (before, each cluster of a RollbackAll read both releases and both renderings
// again, and looked for each in its namespace); a revision with a new release copies it.
func TestARollbackCopiesNoInputAgain(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	uids := 0
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc).WithStatusSubresource(&v1alpha1.RolloutTarget{}, &v1alpha1.OperatorRelease{}).
		WithInterceptorFuncs(interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			uids++ // the fake client gives no UID; the API server does
			obj.SetUID(types.UID(fmt.Sprintf("uid-%d", uids)))
			return c.Create(ctx, obj, opts...)
		}}).Build()
	rendering := makeReleases(t, hub, "team-a", []string{"a", "b", "c"}, "for edge")
	reads := &countingReader{Reader: hub}
	r := &Reconciler{Client: hub, Hub: reads, APIReader: hub}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"}}
	if err := hub.Create(ctx, tgt); err != nil {
		t.Fatal(err)
	}
	memberNS := v1alpha1.MemberNamespace("edge")
	revision := func(rev int32, path, from, to string) {
		t.Helper()
		cur := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
			t.Fatal(err)
		}
		cur.Spec = v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: rev, Path: path, Start: true,
			FromRelease: from, ToRelease: to, FromManifests: rendering[from], Manifests: rendering[to]}
		if err := hub.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		reads.n = 0
		if res, err := r.relay(ctx, cur, mc); err != nil || res.RequeueAfter != 0 {
			t.Fatalf("revision %d: relay: result %+v, error %v", rev, res, err)
		}
		cp := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: memberNS, Name: CopyName(tgt)}, cp); err != nil || cp.Spec.Revision != rev {
			t.Fatalf("revision %d: the copy is at revision %d (%v)", rev, cp.Spec.Revision, err)
		}
	}
	inMember := func(rel string) bool {
		if err := hub.Get(ctx, client.ObjectKey{Namespace: memberNS, Name: rel}, &v1alpha1.OperatorRelease{}); err != nil {
			return false
		}
		_, err := artifact.Get(ctx, hub, memberNS, rendering[rel])
		return err == nil
	}

	revision(2, v1alpha1.PathUpgrade, "a", "b") // the copy is made, with its inputs
	if !inMember("a") || !inMember("b") || reads.n == 0 {
		t.Fatalf("revision 2: releases a and b and their renderings must be copied (%d reads)", reads.n)
	}
	revision(3, v1alpha1.PathRestore, "b", "a") // the rollback: the same inputs
	if reads.n != 0 {
		t.Errorf("the rollback read %d objects from the API server to copy inputs its copy has; want none", reads.n)
	}
	revision(4, v1alpha1.PathUpgrade, "a", "c") // a new release
	if !inMember("c") || reads.n == 0 {
		t.Errorf("revision 4: release c and its rendering must be copied (%d reads)", reads.n)
	}
}

// countingReader counts the reads made through it.
type countingReader struct {
	client.Reader
	n int
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n++
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestRelayPacesProgressWrites: the relay writes a target's status at once when it changes in
// a way that matters to the Rollout (the first write, a new phase), and progress within a
// phase (the next step) at most every relayInterval, the latest at the end of it: the agent's
// next step, journaled a moment after the last write, is not written yet, but the relay runs
// again when the interval ends and writes it then. (Before, every step an agent journaled
// was written to the hub at once: at 1,000 members, most of the hub's writes.)
func TestRelayPacesProgressWrites(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade, Start: true}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc, tgt).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	r := &Reconciler{Client: hub, Hub: hub, APIReader: hub, Now: func() time.Time { return now }}
	copyKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace("edge"), Name: CopyName(tgt)}
	relay := func() (ctrl.Result, *v1alpha1.RolloutTarget) {
		t.Helper()
		cur := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
			t.Fatal(err)
		}
		res, err := r.relay(ctx, cur, mc)
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
			t.Fatal(err)
		}
		return res, cur
	}
	agentWrites := func(phase, step string) {
		t.Helper()
		cp := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, copyKey, cp); err != nil {
			t.Fatal(err)
		}
		cp.Status = v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: phase, Step: step}
		if err := hub.Status().Update(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	relay() // the copy is made
	agentWrites(v1alpha1.ClusterUpgrading, StepPrecheck)
	if _, got := relay(); got.Status.Step != StepPrecheck {
		t.Fatalf("the first status is written at once; step %q", got.Status.Step)
	}
	now = now.Add(500 * time.Millisecond)
	agentWrites(v1alpha1.ClusterUpgrading, StepSnapshot)
	res, got := relay()
	if got.Status.Step != StepPrecheck || res.RequeueAfter <= 0 || res.RequeueAfter > relayInterval {
		t.Errorf("the next step %s after 0.5 s: written %q, requeue %v; want it held, the relay again within %v", StepSnapshot, got.Status.Step, res.RequeueAfter, relayInterval)
	}
	now = now.Add(res.RequeueAfter)
	if _, got := relay(); got.Status.Step != StepSnapshot {
		t.Errorf("at the end of the interval the step held is written: %q", got.Status.Step)
	}
	// The cluster starts changing: what a RollbackAll plans from (a cluster the hub shows at
	// Snapshot is not restored) is written at once, though 0.1 s after the last write.
	now = now.Add(100 * time.Millisecond)
	agentWrites(v1alpha1.ClusterUpgrading, StepApplyCRDs)
	if _, got := relay(); got.Status.Step != StepApplyCRDs {
		t.Errorf("the step at which the cluster starts changing, 0.1 s after the last write: written %q, want %s at once", got.Status.Step, StepApplyCRDs)
	}
	now = now.Add(100 * time.Millisecond)
	agentWrites(v1alpha1.ClusterUpgrading, StepApplyRBAC)
	if _, got := relay(); got.Status.Step != StepApplyCRDs {
		t.Errorf("the next step within the interval is held: written %q", got.Status.Step)
	}
	now = now.Add(100 * time.Millisecond)
	agentWrites(v1alpha1.ClusterSucceeded, StepDone)
	if _, got := relay(); got.Status.Phase != v1alpha1.ClusterSucceeded {
		t.Errorf("a new phase is written at once: %q", got.Status.Phase)
	}
}

// TestOpenedTargetsGoFirst: a revision writes every cluster's target, and opens a wave (or a
// rollback) a moment later. The opened target goes before those only made ready ahead of their
// wave, though it came later: at 1,000 pull members, the wave of one cluster waited behind the
// relay of every other cluster's copy.
func TestOpenedTargetsGoFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	h := &openedFirst{}
	ctx := context.Background()
	for i := range 3 {
		waiting := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: fmt.Sprintf("ro-m%d", i)}}
		h.Create(ctx, event.CreateEvent{Object: waiting}, q)
	}
	before := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "ro-wave1", ResourceVersion: "7"}}
	opened := before.DeepCopy()
	opened.ResourceVersion, opened.Spec.Start = "8", true
	h.Update(ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: opened}, q)
	first, _, _ := q.GetWithPriority()
	if first.Name != "ro-wave1" {
		t.Errorf("first out: %s; want the opened target ro-wave1", first.Name)
	}
}

// TestATellGoesBeforeTheStatusRelayed: a target opened with a new spec (a wave opening, a
// RollbackAll's restore) is relayed to its pull member before the statuses the agents reported
// earlier are relayed back: a RollbackAll of 1,000 pull members queued each copy to tell behind
// the failed upgrade's statuses (640 deep, 2.2 s on average in bench-hub). The reports keep
// their order among themselves, and a target only re-written (no new spec) goes in turn.
func TestATellGoesBeforeTheStatusRelayed(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	reports := newCopyReports()
	copyOf := func(name, rv string) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace(name), Name: "fleet.ro-" + name, ResourceVersion: rv,
			Labels: map[string]string{v1alpha1.LabelSourceNamespace: "fleet", v1alpha1.LabelSourceName: "ro-" + name}}}
	}
	for _, m := range []string{"m1", "m2"} {
		reports.Update(ctx, event.UpdateEvent{ObjectOld: copyOf(m, "1"), ObjectNew: copyOf(m, "2")}, q)
	}
	h := &openedFirst{}
	target := func(name string, gen int64, rv string) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "ro-" + name, Generation: gen, ResourceVersion: rv},
			Spec: v1alpha1.RolloutTargetSpec{Start: true, Path: v1alpha1.PathRestore}}
	}
	// m3's status written by its executor (no new spec), then m4 told to restore.
	h.Update(ctx, event.UpdateEvent{ObjectOld: target("m3", 4, "7"), ObjectNew: target("m3", 4, "8")}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: target("m4", 4, "7"), ObjectNew: target("m4", 5, "9")}, q)
	var got []string
	for range 4 {
		r, _, _ := q.GetWithPriority()
		got = append(got, r.Name)
		q.Done(r)
	}
	if want := []string{"ro-m4", "ro-m1", "ro-m2", "ro-m3"}; !slices.Equal(got, want) {
		t.Errorf("out of the queue: %v; want %v (the tell first, then in turn)", got, want)
	}
}

// TestAFailureIsRelayedFirst: a copy whose agent reports Failed is relayed to its target
// before every other report and tell queued: the Rollout acts on it (a RollbackAll tells the
// whole fleet to restore). At 1,000 pull members the failed gate waited behind the wave's
// reports, and the rollback's first write came 8 s after it (bench-hub). A report of a
// failure already relayed goes in turn.
func TestAFailureIsRelayedFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("test")
	defer q.ShutDown()
	ctx := context.Background()
	reports := newCopyReports()
	copyOf := func(name, rv, phase string) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace(name), Name: "fleet.ro-" + name, ResourceVersion: rv,
			Labels: map[string]string{v1alpha1.LabelSourceNamespace: "fleet", v1alpha1.LabelSourceName: "ro-" + name}},
			Status: v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathUpgrade, Phase: phase}}
	}
	for _, m := range []string{"m1", "m2"} {
		reports.Update(ctx, event.UpdateEvent{ObjectOld: copyOf(m, "1", v1alpha1.ClusterUpgrading), ObjectNew: copyOf(m, "2", v1alpha1.ClusterSucceeded)}, q)
	}
	tell := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "ro-m3", Generation: 5, ResourceVersion: "9"}, Spec: v1alpha1.RolloutTargetSpec{Start: true}}
	before := tell.DeepCopy()
	before.Generation, before.ResourceVersion = 4, "8"
	(&openedFirst{}).Update(ctx, event.UpdateEvent{ObjectOld: before, ObjectNew: tell}, q)
	// m4's failure was relayed before (its message changed since); m5 fails now.
	reports.Update(ctx, event.UpdateEvent{ObjectOld: copyOf("m4", "1", v1alpha1.ClusterFailed), ObjectNew: copyOf("m4", "2", v1alpha1.ClusterFailed)}, q)
	reports.Update(ctx, event.UpdateEvent{ObjectOld: copyOf("m5", "1", v1alpha1.ClusterUpgrading), ObjectNew: copyOf("m5", "2", v1alpha1.ClusterFailed)}, q)
	var got []string
	for range 5 {
		r, _, _ := q.GetWithPriority()
		got = append(got, r.Name)
		q.Done(r)
	}
	if want := []string{"ro-m5", "ro-m3", "ro-m1", "ro-m2", "ro-m4"}; !slices.Equal(got, want) {
		t.Errorf("out of the queue: %v; want %v (the new failure, the tell, then the reports in turn)", got, want)
	}
}

// TestAWaveReadsEachInputOnce: the relay reads a release's manifests and a rendering from the
// hub once for all the pull members a revision copies them to, not once per member (before,
// a 1,000-cluster wave read each 1,000 times: with a chart of 1.5 MiB, 1.5 GB through the hub's
// API server and etcd). Each member's namespace still gets its own copy.
func TestAWaveReadsEachInputOnce(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	members := []string{"edge1", "edge2", "edge3"}
	b := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.RolloutTarget{}, &v1alpha1.OperatorRelease{})
	for _, m := range members {
		b = b.WithObjects(&v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}})
	}
	hub := b.Build()
	digests := makeReleases(t, hub, "team-a", []string{"a", "b"}, "for the fleet")
	reads := &secretReads{Reader: hub, ns: "team-a"}
	r := &Reconciler{Client: hub, Hub: reads, APIReader: hub}
	for i, m := range members {
		tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-" + m},
			Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: m, Revision: 2, Path: v1alpha1.PathUpgrade,
				FromRelease: "a", ToRelease: "b", FromManifests: digests["a"], Manifests: digests["b"]}}
		if err := hub.Create(ctx, tgt); err != nil {
			t.Fatal(err)
		}
		mc := &v1alpha1.MemberCluster{}
		if err := hub.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			t.Fatal(err)
		}
		reads.n = 0
		if _, err := r.relay(ctx, tgt, mc); err != nil {
			t.Fatalf("%s: relay: %v", m, err)
		}
		// Two releases' manifests and two renderings, one chunk each: read for the first
		// member only.
		if want := map[bool]int{true: 4, false: 0}[i == 0]; reads.n != want {
			t.Errorf("%s: %d reads of the hub's artifacts, want %d", m, reads.n, want)
		}
		ns := v1alpha1.MemberNamespace(m)
		for _, name := range []string{"a", "b"} {
			if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.OperatorRelease{}); err != nil {
				t.Errorf("%s: release %s not copied: %v", m, name, err)
			}
			if _, err := artifact.Get(ctx, hub, ns, digests[name]); err != nil {
				t.Errorf("%s: rendering of %s not copied: %v", m, name, err)
			}
		}
	}
}

// secretReads counts the reads of Secrets in namespace ns made through it.
type secretReads struct {
	client.Reader
	ns string
	n  int
}

func (c *secretReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok && key.Namespace == c.ns {
		c.n++
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// makeReleases creates in namespace ns a release of each name (one ConfigMap) and a rendering
// of it ("rendering of NAME " + of), and returns each rendering's digest by name.
func makeReleases(t *testing.T, hub client.Client, ns string, names []string, of string) map[string]string {
	t.Helper()
	rendering := map[string]string{}
	for _, name := range names {
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "op-" + name, "namespace": "op"}}}
		canonical, err := release.Canonical([]*unstructured.Unstructured{cm})
		if err != nil {
			t.Fatal(err)
		}
		rel := &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.OperatorReleaseSpec{Operator: "op", Version: name, Digest: release.Digest(canonical)}}
		if _, err := release.Create(t.Context(), hub, rel, canonical); err != nil {
			t.Fatal(err)
		}
		ref, err := artifact.Put(t.Context(), hub, ns, release.ArtifactKind, []byte("rendering of "+name+" "+of))
		if err != nil {
			t.Fatal(err)
		}
		rendering[name] = ref.Digest
	}
	return rendering
}
