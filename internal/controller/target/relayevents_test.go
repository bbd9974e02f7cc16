package target

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestRelayRecordsThePushEvents: the Events the relay records on the Rollout for a pull member
// are those the step code records for a push member, with the same reasons: nothing for a new
// plan (Pending), ClusterStarted, ClusterWaiting and ClusterResumed while the agent is lost and
// back, and the end. Before, the relay named each new phase (ClusterPending, ClusterUpgrading,
// ClusterRollingBack): a pull member never had a ClusterStarted, and each plan recorded an Event
// per cluster.
func TestRelayRecordsThePushEvents(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "edge", Revision: 2, Path: v1alpha1.PathUpgrade, Start: true, FromRelease: "a", ToRelease: "b"}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc, tgt).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	rec := events.NewFakeRecorder(20)
	r := &Reconciler{Client: hub, Hub: hub, APIReader: hub, Recorder: rec, Now: func() time.Time { return now }}
	copyKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace("edge"), Name: CopyName(tgt)}
	recorded := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				typ, rest, _ := strings.Cut(e, " ")
				reason, _, _ := strings.Cut(rest, " ")
				out = append(out, typ+" "+reason)
			default:
				return out
			}
		}
	}
	relay := func(reachable bool) []string {
		t.Helper()
		cur := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
			t.Fatal(err)
		}
		m := mc.DeepCopy()
		st := metav1.ConditionTrue
		if !reachable {
			st = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReachable, Status: st, Reason: "Heartbeat",
			LastTransitionTime: metav1.NewTime(now)})
		if _, err := r.relay(ctx, cur, m); err != nil {
			t.Fatalf("relay: %v", err)
		}
		return recorded()
	}
	agentWrites := func(rev int32, path, phase, step string, notes ...v1alpha1.TargetNote) {
		t.Helper()
		cp := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, copyKey, cp); err != nil {
			t.Fatal(err)
		}
		cp.Status = v1alpha1.RolloutTargetStatus{Revision: rev, Path: path, Phase: phase, Step: step, Message: phase + " at " + step, Notes: notes}
		if err := hub.Status().Update(ctx, cp); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second) // past the relay's pacing of progress
	}
	check := func(what string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: Events %q, want %q", what, got, want)
		}
	}

	check("the copy made", relay(true))
	agentWrites(2, v1alpha1.PathUpgrade, v1alpha1.ClusterPending, "")
	check("the plan (Pending)", relay(true))
	agentWrites(2, v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, StepPrecheck)
	check("the start", relay(true), "Normal ClusterStarted")
	agentWrites(2, v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, StepSnapshot)
	check("the next step", relay(true))
	check("the agent lost", relay(false), "Warning ClusterWaiting")
	check("still lost", relay(false))
	check("the agent back", relay(true), "Normal ClusterResumed")
	agentWrites(2, v1alpha1.PathUpgrade, v1alpha1.ClusterSucceeded, StepDone)
	check("the end", relay(true), "Normal ClusterSucceeded")

	// The next revision, a restore: its start written with its end in one go still records both.
	cur := &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Revision, cur.Spec.Path, cur.Spec.FromRelease, cur.Spec.ToRelease = 3, v1alpha1.PathRestore, "b", "a"
	if err := hub.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	check("the restore planned", relay(true))
	agentWrites(3, v1alpha1.PathRestore, v1alpha1.ClusterFailed, StepRestore)
	check("the restore started and failed", relay(true), "Normal ClusterStarted", "Warning ClusterFailed")

	// The steps' notes the agent wrote in its copy's status (an agent records no Event) are
	// recorded as the push steps record them, each once, with the next relayed write.
	cur = &v1alpha1.RolloutTarget{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Revision = 4
	if err := hub.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	check("the second restore planned", relay(true))
	without := v1alpha1.TargetNote{Type: "Warning", Reason: "RestoreWithoutRelease", Message: "edge: release b is no longer on the hub"}
	kept := v1alpha1.TargetNote{Type: "Normal", Reason: "KeptSinceSnapshot", Message: "edge: kept 1 objects created since snapshot s"}
	agentWrites(4, v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, StepRestore, without)
	check("a note with the start", relay(true), "Normal ClusterStarted", "Warning RestoreWithoutRelease")
	agentWrites(4, v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, StepApplyRelease, without, kept)
	check("a second note", relay(true), "Normal KeptSinceSnapshot")
	agentWrites(4, v1alpha1.PathRestore, v1alpha1.ClusterRolledBack, StepDone, without, kept)
	check("the end, notes recorded before", relay(true), "Normal ClusterRolledBack")
	if got := relayedTarget(t, hub, tgt).Status.Notes; !slices.Equal(got, []v1alpha1.TargetNote{without, kept}) {
		t.Errorf("the target's notes %+v, want the copy's", got)
	}
}

func relayedTarget(t *testing.T, c client.Client, tgt *v1alpha1.RolloutTarget) *v1alpha1.RolloutTarget {
	t.Helper()
	cur := &v1alpha1.RolloutTarget{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(tgt), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// TestNoteIsRecordedOnce: a step's note goes into status.notes and an Event once, however often
// the step runs again (a retry, a resumed restore), and a revision keeps its first
// MaxTargetNotes (with their Events; the rest neither); a note longer than an Event takes is
// cut as the Event is.
func TestNoteIsRecordedOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	tgt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-m1"},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "m1", Revision: 2, Path: v1alpha1.PathRestore}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tgt).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	rec := events.NewFakeRecorder(40)
	r := &Reconciler{Client: c, Hub: c, APIReader: c, Recorder: rec}
	tgt = relayedTarget(t, c, tgt)
	x := r.newExecution(tgt)
	x.note("Warning", "RestoreWithoutRelease", "%s: release %s is gone", "m1", "b")
	x.note("Warning", "RestoreWithoutRelease", "%s: release %s is gone", "m1", "b")
	for i := range v1alpha1.MaxTargetNotes + 2 {
		x.note("Normal", "KeptSinceSnapshot", "m1: kept %d %s", i, strings.Repeat("x", 2000))
	}
	notes := tgt.Status.Notes
	if len(notes) != v1alpha1.MaxTargetNotes || notes[0].Message != "m1: release b is gone" || notes[1].Reason != "KeptSinceSnapshot" {
		t.Fatalf("notes %+v", notes)
	}
	if n := len(notes[1].Message); n != 1024 || !strings.HasSuffix(notes[1].Message, "...") {
		t.Errorf("a long note is %d bytes, want 1024 ending in ...", n)
	}
	if n := len(rec.Events); n != 0 {
		t.Errorf("%d Events before the status write", n)
	}
	if err := x.patch(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := relayedTarget(t, c, tgt).Status.Notes; !slices.Equal(got, notes) {
		t.Errorf("written notes %+v", got)
	}
	// Its Events follow the write: one per note kept (past the bound, none).
	if n := len(rec.Events); n != v1alpha1.MaxTargetNotes {
		t.Errorf("%d Events, want one per note kept (%d)", n, v1alpha1.MaxTargetNotes)
	}
}
