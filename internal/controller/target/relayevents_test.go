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
	agentWrites := func(rev int32, path, phase, step string) {
		t.Helper()
		cp := &v1alpha1.RolloutTarget{}
		if err := hub.Get(ctx, copyKey, cp); err != nil {
			t.Fatal(err)
		}
		cp.Status = v1alpha1.RolloutTargetStatus{Revision: rev, Path: path, Phase: phase, Step: step, Message: phase + " at " + step}
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
}
