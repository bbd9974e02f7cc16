package target

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// failingGets fails the reads of objects of one type (a ConfigMap, an OperatorRelease) with
// err; other reads go through.
type failingGets struct {
	client.Client
	fails func(client.Object) bool
	err   error
}

func (f failingGets) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if f.fails(obj) {
		return f.err
	}
	return f.Client.Get(ctx, key, obj, opts...)
}

// A restore quiesces the operator of the releases installed now (the one the member's record
// names, the one the rollback comes from): a failed read of the record or of a release is
// returned (a fault: the step is tried again), never taken for "no release", which left the
// newer release's Deployments and webhooks live during the restore. Only a release that is
// gone from the hub is left out, and a Warning Event says so.
func TestRestoreReadsTheReleasesInstalledNow(t *testing.T) {
	hubScheme := testHubScheme()
	snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"}, Status: v1alpha1.SnapshotStatus{Bytes: 1000}}
	record := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName("op")},
		Data:       map[string]string{"operator": "op", "release": "op-v3"},
	}
	busy := apierrors.NewServiceUnavailable("the API server is restarting")
	isRecord := func(o client.Object) bool { _, ok := o.(*corev1.ConfigMap); return ok }
	isRelease := func(o client.Object) bool { _, ok := o.(*v1alpha1.OperatorRelease); return ok }
	never := func(client.Object) bool { return false }
	gone := func(o client.Object) bool { return isRelease(o) }
	for _, tc := range []struct {
		name string
		// memberFails and hubFails say which reads fail, with err.
		memberFails, hubFails func(client.Object) bool
		err                   error
		// transient says the step must return err as a fault; otherwise it goes on (and
		// fails further on, as this test has no snapshot store) and event is said.
		transient bool
		event     string
	}{
		{"the record cannot be read", isRecord, never, busy, true, ""},
		{"a release cannot be read", never, isRelease, busy, true, ""},
		{"the releases are gone", never, gone, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "operatorreleases"}, "op-v3"), false,
			"RestoreWithoutRelease member1: release op-v3 (the member's installed-version record names it) is no longer on the hub; release op-v2 (the rollback comes from it) is no longer on the hub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt := &v1alpha1.RolloutTarget{
				ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
				Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1", Snapshot: "snap", SnapshotStore: "store", Operator: "op",
					ToRelease: "op-v1", FromRelease: "op-v2", Path: v1alpha1.PathRestore},
			}
			hub := failingGets{Client: fake.NewClientBuilder().WithScheme(hubScheme).WithObjects(snap.DeepCopy(), tgt).
				WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build(), fails: tc.hubFails, err: tc.err}
			mem := failingGets{Client: fake.NewClientBuilder().WithScheme(member.Scheme).WithObjects(record.DeepCopy()).Build(), fails: tc.memberFails, err: tc.err}
			rec := events.NewFakeRecorder(10)
			x := (&Reconciler{Client: hub, Hub: hub, Releases: &release.Cache{}, Recorder: rec}).newExecution(tgt)
			x.cl = &member.Cluster{Name: "member1", Client: mem}
			_, err := restoreSnapshot{}.run(t.Context(), x)
			// Events follow the status write that records the step (its notes).
			if perr := x.patch(t.Context()); perr != nil {
				t.Fatal(perr)
			}
			if err == nil {
				t.Fatal("want an error")
			}
			if tc.transient {
				if !fault.IsTransient(err) || isTerminal(err) {
					t.Errorf("the failed read must be returned as a fault, to be tried again: %v (terminal %t)", err, isTerminal(err))
				}
				return
			}
			// It went on to open the snapshot (which this test cannot), and said what it left out.
			if !strings.Contains(err.Error(), "snapshot snap") {
				t.Errorf("want the restore gone on to its snapshot, got %v", err)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if !slicesContainsSubstring(got, tc.event) {
				t.Errorf("events %q: want one containing %q", got, tc.event)
			}
			// The same in status.notes, where a pull member's hub finds it.
			if n := tgt.Status.Notes; len(n) != 1 || !strings.Contains(n[0].Reason+" "+n[0].Message, tc.event) {
				t.Errorf("status.notes %+v: want the note of %q", n, tc.event)
			}
		})
	}
}

// A restore whose Snapshot the manager's cache holds without its status yet (the cache lags
// when its watch broke under faults of the way to the hub) reads it again from the API server,
// which has it: the snapshot step put the target on record only once that status was written.
// Before, the cache's copy was taken for a snapshot never completed ("has no payload
// location"), and the restore failed for good (TestControllerRidesOutFaultsOfItsHub met it).
// A snapshot the API server also holds without a location is still refused.
func TestRestoreReadsASnapshotTheCacheHasNotSeenCompleted(t *testing.T) {
	hubScheme := testHubScheme()
	stale := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap"}}
	live := stale.DeepCopy()
	live.Status = v1alpha1.SnapshotStatus{Bytes: 1000, Location: "secrets://ns#snap"}
	record := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName("op")},
		Data:       map[string]string{"operator": "op", "release": "op-v2"},
	}
	for _, tc := range []struct {
		name      string
		apiServer *v1alpha1.Snapshot
		refused   bool
	}{
		{"the API server has its status", live, false},
		{"the API server has none either", stale, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tgt := &v1alpha1.RolloutTarget{
				ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
				Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1", Snapshot: "snap", Operator: "op",
					ToRelease: "op-v1", FromRelease: "op-v2", Path: v1alpha1.PathRestore},
			}
			cache := fake.NewClientBuilder().WithScheme(hubScheme).WithObjects(stale.DeepCopy(), tgt).
				WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
			apiServer := fake.NewClientBuilder().WithScheme(hubScheme).WithObjects(tc.apiServer.DeepCopy()).Build()
			mem := fake.NewClientBuilder().WithScheme(member.Scheme).WithObjects(record.DeepCopy()).Build()
			x := (&Reconciler{Client: cache, Hub: cache, APIReader: apiServer, Releases: &release.Cache{}, Recorder: events.NewFakeRecorder(10)}).newExecution(tgt)
			x.cl = &member.Cluster{Name: "member1", Client: mem}
			_, err := restoreSnapshot{}.run(t.Context(), x)
			incomplete := err != nil && strings.Contains(err.Error(), "has no payload location")
			if incomplete != tc.refused || (tc.refused && !isTerminal(err)) {
				t.Errorf("restore: %v (terminal %t); want refused as incomplete: %t", err, isTerminal(err), tc.refused)
			}
		})
	}
}

// testHubScheme knows the hub's kinds: Kubernetes' and rewind's.
func testHubScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

func slicesContainsSubstring(list []string, s string) bool {
	for _, l := range list {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// A pull member's agent journals its restore's inner points in its member (a ConfigMap of
// rewind-system keyed by the copy, its revision and its path), not on the hub: each point is
// carried in the copy's status in memory to its next write, a restarted agent resumes from
// the member's journal (with what the status already says), and the journal is deleted once
// the restore's end is written. On the hub the journal is the target's status, written at
// each point, as before.
func TestAgentJournalsTheRestoreInTheMember(t *testing.T) {
	ctx := t.Context()
	hubScheme := testHubScheme()
	cp := &v1alpha1.RolloutTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace("member1"), Name: "ns.ro-member1", UID: "copy-uid",
			Labels: map[string]string{v1alpha1.LabelSourceNamespace: "ns", v1alpha1.LabelSourceName: "ro-member1"}},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "member1", Revision: 3, Path: v1alpha1.PathRestore, Start: true,
			Snapshot: "ns.snap", Operator: "op", ToRelease: "op-v1"},
		Status: v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathRestore, Phase: v1alpha1.ClusterRollingBack, Step: StepRestore},
	}
	hub := fake.NewClientBuilder().WithScheme(hubScheme).WithObjects(cp.DeepCopy()).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	mem := fake.NewClientBuilder().WithScheme(member.Scheme).Build()
	local := &member.Cluster{Name: "member1", Client: mem}
	agent := &Reconciler{Client: hub, Hub: hub, Local: "member1", Members: &member.Cache{Local: local}, Releases: &release.Cache{}}
	read := func() *v1alpha1.RolloutTarget {
		t.Helper()
		got := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(cp), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	journalKey := client.ObjectKey{Namespace: member.RecordNamespace, Name: "restore-journal." + cp.Name}

	x := agent.newExecution(read())
	x.cl = local
	j := x.restoreJournal()
	for _, s := range []string{"Quiesce", "CRDs"} {
		if err := j.Complete(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if got := read().Status.RestoreSteps; len(got) != 0 {
		t.Errorf("the agent wrote its restore's points to the hub: %v", got)
	}
	if got := x.t.Status.RestoreSteps; !slices.Equal(got, []string{"Quiesce", "CRDs"}) {
		t.Errorf("the points to carry with the copy's next write: %v", got)
	}
	if err := mem.Get(ctx, journalKey, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("the member's journal: %v", err)
	}

	// A restarted agent (a fresh read of the copy, whose status has no point: they were in
	// memory only) resumes from the member's journal.
	again := read()
	y := agent.newExecution(again)
	y.cl = local
	yj := y.restoreJournal()
	if got, err := yj.Completed(ctx); err != nil || !slices.Equal(got, []string{"Quiesce", "CRDs"}) {
		t.Errorf("resumed from %v (%v), want [Quiesce CRDs]", got, err)
	}
	// Its next write reports the points of the run before it too.
	if err := yj.Complete(ctx, "CustomResources"); err != nil {
		t.Fatal(err)
	}
	if got := y.t.Status.RestoreSteps; !slices.Equal(got, []string{"Quiesce", "CRDs", "CustomResources"}) {
		t.Errorf("the resumed agent's points to carry: %v, want [Quiesce CRDs CustomResources]", got)
	}
	// The copy's next revision does not take this restore's points for its own.
	next := read()
	next.Spec.Revision, next.Status.Revision = 4, 4
	z := agent.newExecution(next)
	z.cl = local
	if got, err := z.restoreJournal().Completed(ctx); err != nil || len(got) != 0 {
		t.Errorf("another revision's restore resumed from %v (%v)", got, err)
	}

	// The end: Reconcile finishes the restore (its last step done), writes it with the points,
	// and then deletes the member's journal.
	end := read()
	end.Status.Step, end.Status.RestoreSteps = StepDone, []string{"Quiesce", "CRDs"}
	if err := hub.Status().Update(ctx, end); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cp)}); err != nil {
		t.Fatal(err)
	}
	if got := read().Status; got.Phase != v1alpha1.ClusterRolledBack || !slices.Equal(got.RestoreSteps, []string{"Quiesce", "CRDs"}) {
		t.Errorf("the copy after the end: %s %v", got.Phase, got.RestoreSteps)
	}
	if err := mem.Get(ctx, journalKey, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the member's journal stays after the restore's end was written (%v)", err)
	}

	// On the hub (a push member) the journal is the target's status, written at each point.
	push := cp.DeepCopy()
	push.Namespace, push.Name, push.Labels, push.ResourceVersion = "ns", "ro-member1", nil, ""
	if err := hub.Create(ctx, push); err != nil {
		t.Fatal(err)
	}
	if err := hub.Status().Update(ctx, push); err != nil {
		t.Fatal(err)
	}
	h := (&Reconciler{Client: hub, Hub: hub}).newExecution(push)
	if err := h.restoreJournal().Complete(ctx, "Quiesce"); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(push), got); err != nil || !slices.Equal(got.Status.RestoreSteps, []string{"Quiesce"}) {
		t.Errorf("the hub's journal after a point: %v (%v)", got.Status.RestoreSteps, err)
	}
}
