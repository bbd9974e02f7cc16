package notify

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func tm(s int) *metav1.Time { t := metav1.NewTime(time.Unix(int64(s), 0)); return &t }

func target(cluster string, wave, rev int32, path, phase, step string) v1alpha1.RolloutTarget {
	return v1alpha1.RolloutTarget{Spec: v1alpha1.RolloutTargetSpec{Cluster: cluster, Wave: wave, Revision: rev, Path: path, ToRelease: "b"},
		Status: v1alpha1.RolloutTargetStatus{Revision: rev, Phase: phase, Step: step}}
}

// Compute is pure: the events follow from the Rollout's and its targets' status alone.
func TestCompute(t *testing.T) {
	waves := []v1alpha1.Wave{{Name: "canary"}, {Name: "rest"}}
	stalled := metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonRolledBack, Message: "b failed"}
	for _, tc := range []struct {
		// name says what the state is.
		name string
		// status of the Rollout; targets its RolloutTargets; from the record's fromRevision.
		status  v1alpha1.RolloutStatus
		targets []v1alpha1.RolloutTarget
		from    int32
		// want are the keys (without the UID), in order.
		want []string
	}{
		{"a revision planned, no cluster started",
			v1alpha1.RolloutStatus{Revision: 1, Phase: v1alpha1.RolloutProgressing, History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: tm(1)}}},
			[]v1alpha1.RolloutTarget{target("m1", 0, 1, v1alpha1.PathUpgrade, v1alpha1.ClusterPending, ""), target("m2", 1, 1, v1alpha1.PathNone, v1alpha1.ClusterSucceeded, "")},
			0, []string{"1/RevisionStarted/-"}},
		{"the canary wave runs",
			v1alpha1.RolloutStatus{Revision: 1, History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: tm(1)}}},
			[]v1alpha1.RolloutTarget{target("m1", 0, 1, v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, "Snapshot")},
			0, []string{"1/RevisionStarted/-", "1/WaveStarted/wave=canary"}},
		{"a target still at the previous revision does not open its wave",
			v1alpha1.RolloutStatus{Revision: 2, History: []v1alpha1.Revision{{Revision: 2, Release: "b", StartedAt: tm(1)}}},
			[]v1alpha1.RolloutTarget{{Spec: v1alpha1.RolloutTargetSpec{Cluster: "m1", Revision: 2, Path: v1alpha1.PathUpgrade},
				Status: v1alpha1.RolloutTargetStatus{Revision: 1, Phase: v1alpha1.ClusterSucceeded}}},
			0, []string{"2/RevisionStarted/-"}},
		{"the canary is done, the next wave waits for approval",
			v1alpha1.RolloutStatus{Revision: 1, CurrentWave: 1, Phase: v1alpha1.RolloutWaitingForApproval, History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: tm(1)}}},
			nil, 0, []string{"1/RevisionStarted/-", "1/WaveStarted/wave=canary", "1/WaveFinished/wave=canary", "1/ApprovalNeeded/wave=rest"}},
		{"an inconclusive metric holds a cluster",
			v1alpha1.RolloutStatus{Revision: 1, History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: tm(1)}}},
			[]v1alpha1.RolloutTarget{func() v1alpha1.RolloutTarget {
				t := target("m1", 0, 1, v1alpha1.PathUpgrade, v1alpha1.ClusterUpgrading, "HealthGate")
				t.Status.WaitingFor = v1alpha1.ReasonAwaitingApproval
				return t
			}()},
			0, []string{"1/RevisionStarted/-", "1/WaveStarted/wave=canary", "1/ApprovalNeeded/cluster=m1"}},
		{"the canary failed its gate (seen on the target)",
			v1alpha1.RolloutStatus{Revision: 2, History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: tm(1), FinishedAt: tm(2), Outcome: "Succeeded"},
				{Revision: 2, Release: "b", StartedAt: tm(3)}}},
			[]v1alpha1.RolloutTarget{target("m1", 0, 2, v1alpha1.PathUpgrade, v1alpha1.ClusterFailed, "HealthGate")},
			2, []string{"2/RevisionStarted/-", "2/WaveStarted/wave=canary", "2/GateFailed/cluster=m1"}},
		{"rolled back: the failed gate is kept by the history once the targets moved on",
			v1alpha1.RolloutStatus{Revision: 3, Phase: v1alpha1.RolloutRolledBack, Conditions: []metav1.Condition{stalled}, History: []v1alpha1.Revision{
				{Revision: 2, Release: "b", StartedAt: tm(3), FinishedAt: tm(4), Outcome: "RolledBack", Reason: "cluster m1 failed",
					Failures: []v1alpha1.ClusterFailure{{Cluster: "m1", Step: "HealthGate", Message: "not Available"}, {Cluster: "m2", Step: "Apply"}}},
				{Revision: 3, Release: "a", StartedAt: tm(4), FinishedAt: tm(5), Outcome: "Succeeded", Automatic: true}}},
			[]v1alpha1.RolloutTarget{target("m1", 0, 3, v1alpha1.PathRestore, v1alpha1.ClusterRolledBack, "Done")},
			2, []string{"2/RevisionStarted/-", "2/GateFailed/cluster=m1", "2/RevisionFinished/-", "3/RollbackStarted/-", "3/RollbackFinished/-", "3/Stalled/reason=RolledBack"}},
		{"a person's rollback runs no waves",
			v1alpha1.RolloutStatus{Revision: 4, CurrentWave: 1, History: []v1alpha1.Revision{{Revision: 4, Release: "b", StartedAt: tm(1)}}},
			[]v1alpha1.RolloutTarget{target("m1", 0, 4, v1alpha1.PathRestore, v1alpha1.ClusterRollingBack, "Restore")},
			0, []string{"4/RevisionStarted/-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := &v1alpha1.Rollout{Spec: v1alpha1.RolloutSpec{Waves: waves}, Status: tc.status}
			ro.UID = "uid"
			var got []string
			for _, n := range Compute(ro, tc.targets, tc.from, metav1.Now()) {
				got = append(got, n.Key[len("uid/"):])
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
			again := Compute(ro, tc.targets, tc.from, metav1.Now())
			if len(again) != len(got) {
				t.Errorf("computing again gives %d notifications, first %d", len(again), len(got))
			}
		})
	}
}

// A gate failed by a metric carries the failed measurement.
func TestGateFailedCarriesTheMeasurement(t *testing.T) {
	tg := target("m1", 0, 2, v1alpha1.PathUpgrade, v1alpha1.ClusterFailed, "HealthGate")
	tg.Status.Message = "metric error-ratio is Failed"
	tg.Status.Metrics = []v1alpha1.MetricResult{
		{Name: "error-ratio", Revision: 2, Phase: v1alpha1.MetricFailed, Measurements: []v1alpha1.Measurement{{Phase: "Failed", Value: "[0.3]"}}},
		{Name: "latency", Revision: 2, Phase: v1alpha1.MetricSuccessful},
		{Name: "old", Revision: 1, Phase: v1alpha1.MetricFailed},
	}
	ro := &v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{Revision: 2, History: []v1alpha1.Revision{{Revision: 2, Release: "b"}}}}
	ns := Compute(ro, []v1alpha1.RolloutTarget{tg}, 0, metav1.Now())
	i := slices.IndexFunc(ns, func(n v1alpha1.Notification) bool { return n.Event == v1alpha1.EventGateFailed })
	if i < 0 {
		t.Fatalf("no GateFailed in %+v", ns)
	}
	if n := ns[i]; n.Cluster != "m1" || n.Message != tg.Status.Message || !slices.Equal(n.Measurements, []string{"error-ratio: Failed [0.3]"}) {
		t.Errorf("GateFailed %+v", n)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 20: 5 * time.Minute} {
		if got := Backoff(n); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}
