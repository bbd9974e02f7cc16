package rollout

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	twoWaves := v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{
		{Name: "canary", MaxConcurrency: 1},
		{Name: "rest", MaxConcurrency: 2, RequireApproval: true},
	}}
	c := func(name string, wave int32, phase string) Cluster {
		return Cluster{Name: name, Wave: wave, Phase: phase}
	}
	started := func(name string, wave int32) Cluster {
		return Cluster{Name: name, Wave: wave, Phase: v1alpha1.ClusterPending, Started: true}
	}
	// stale is a cluster the view holds at the revision before: Succeeded there.
	stale := func(name string, wave int32) Cluster {
		return Cluster{Name: name, Wave: wave, Phase: v1alpha1.ClusterSucceeded, Started: true, Stale: true}
	}
	approvedRest := func(w string) bool { return w == "rest" }
	cases := []struct {
		name string
		// spec, group, approved and clusters are the input; rollback says the revision restores.
		spec     v1alpha1.RolloutSpec
		group    int32
		approved func(string) bool
		clusters []Cluster
		rollback bool
		// planned is how many targets the revision planned (0: as many as clusters are seen).
		planned int
		// want is the decision.
		want Decision
	}{
		{
			name:     "the first wave starts one cluster at a time",
			spec:     twoWaves,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterPending), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"m1"}},
		},
		{
			name:     "an active cluster, and one opened but not picked up yet, count against maxConcurrency",
			spec:     v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "all", MaxConcurrency: 3}}},
			clusters: []Cluster{c("a", 0, v1alpha1.ClusterUpgrading), started("b", 0), c("c", 0, v1alpha1.ClusterPending), c("d", 0, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"c"}},
		},
		{
			name:     "a wave opens every cluster at once up to maxConcurrency",
			spec:     v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "all", MaxConcurrency: 19}}},
			clusters: []Cluster{c("m1", 0, ""), c("m2", 0, ""), c("m3", 0, "")},
			want:     Decision{Start: []string{"m1", "m2", "m3"}},
		},
		{
			name:     "a finished wave is reported done",
			spec:     twoWaves,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded), c("m2", 1, v1alpha1.ClusterPending)},
			want:     Decision{GroupDone: true},
		},
		{
			name:     "the second wave waits for approval",
			spec:     twoWaves,
			group:    1,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded), c("m2", 1, v1alpha1.ClusterPending)},
			want:     Decision{NeedsApproval: true},
		},
		{
			name:     "an approved wave starts up to its maxConcurrency",
			spec:     twoWaves,
			group:    1,
			approved: approvedRest,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"m2", "m3"}},
		},
		{
			name:     "a failed cluster stops an upgrade: no later wave starts",
			spec:     twoWaves,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterFailed), c("m2", 1, v1alpha1.ClusterPending)},
			want:     Decision{Failed: []string{"m1"}},
		},
		{
			name:     "a rollback restores every changed cluster at once, whatever the waves, without approval",
			spec:     twoWaves,
			rollback: true,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterPending), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"m1", "m2", "m3"}},
		},
		{
			name:     "rollbackConcurrency bounds a rollback",
			spec:     func() v1alpha1.RolloutSpec { s := twoWaves; s.RollbackConcurrency = ptr.To[int32](2); return s }(),
			rollback: true,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterRollingBack), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"m2"}},
		},
		{
			name:     "rollbackByWave restores the last wave first",
			spec:     func() v1alpha1.RolloutSpec { s := twoWaves; s.RollbackByWave = true; return s }(),
			rollback: true,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterPending), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Start: []string{"m2", "m3"}},
		},
		{
			name:     "a rollback does not stop at a cluster whose restore failed: the others go on",
			spec:     func() v1alpha1.RolloutSpec { s := twoWaves; s.RollbackConcurrency = ptr.To[int32](1); return s }(),
			rollback: true,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterFailed), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Failed: []string{"m1"}, Start: []string{"m2"}},
		},
		{
			name:     "a rollback with failed clusters is done once every cluster is final",
			spec:     twoWaves,
			rollback: true,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterFailed), c("m2", 1, v1alpha1.ClusterRolledBack)},
			want:     Decision{Failed: []string{"m1"}, GroupDone: true},
		},
		{
			name:     "a wave whose only cluster is not in the view yet is not done, and the next wave does not start",
			spec:     twoWaves,
			approved: approvedRest,
			planned:  3,
			clusters: []Cluster{c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "a wave whose only cluster is still seen at the revision before is not done, and the next wave does not start",
			spec:     twoWaves,
			approved: approvedRest,
			planned:  3,
			clusters: []Cluster{stale("m1", 0), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "a wave with one cluster done and one not seen at the revision is not done",
			spec:     v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "canary", MaxConcurrency: 2}, {Name: "rest", MaxConcurrency: 1}}},
			planned:  3,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded), stale("m2", 0), c("m3", 1, v1alpha1.ClusterPending)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "nothing starts in a wave while one of its clusters is unseen: it may be running already",
			spec:     v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "all", MaxConcurrency: 1}}},
			planned:  2,
			clusters: []Cluster{c("m2", 0, v1alpha1.ClusterPending)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "a failure is not acted on while a cluster is unseen: the failure policy needs the whole revision",
			spec:     twoWaves,
			planned:  3,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterFailed), c("m2", 1, v1alpha1.ClusterPending)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "a rollback is not done while a cluster to restore is unseen",
			spec:     twoWaves,
			rollback: true,
			planned:  2,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterRolledBack), stale("m2", 1)},
			want:     Decision{Unseen: 1},
		},
		{
			name:     "once every planned cluster is seen at the revision, the wave is decided as usual",
			spec:     twoWaves,
			planned:  3,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded), c("m2", 1, v1alpha1.ClusterPending), c("m3", 1, v1alpha1.ClusterPending), stale("old", 1)},
			want:     Decision{GroupDone: true},
		},
		{
			name:     "past the last wave everything is done",
			spec:     twoWaves,
			group:    2,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded)},
			want:     Decision{AllDone: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(&tc.spec, tc.group, tc.approved, tc.clusters, tc.planned, tc.rollback)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("decision (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUnbaked(t *testing.T) {
	end := time.Date(2026, 12, 1, 16, 0, 0, 0, time.UTC)
	checked := func(name string, wave int32, at time.Time) Cluster {
		return Cluster{Name: name, Wave: wave, Phase: v1alpha1.ClusterSucceeded, Started: true, Bakes: true, HealthCheckedAt: at}
	}
	cases := []struct {
		name string
		// group is the baked group, clusters the view.
		group    []int32
		clusters []Cluster
		// want lists the clusters whose check at the bake's end is still to come.
		want []string
	}{
		{
			name:     "a check one poll before the end does not pass the bake",
			group:    []int32{0},
			clusters: []Cluster{checked("m1", 0, end.Add(-300*time.Millisecond)), checked("m2", 1, time.Time{})},
			want:     []string{"m1"},
		},
		{
			name:     "a cluster never checked has not passed the bake",
			group:    []int32{0},
			clusters: []Cluster{checked("m1", 0, end), checked("m3", 0, time.Time{})},
			want:     []string{"m3"},
		},
		{
			name:     "checks at and after the end pass it",
			group:    []int32{0},
			clusters: []Cluster{checked("m1", 0, end), checked("m3", 0, end.Add(time.Second))},
		},
		{
			name:  "a cluster with nothing to do does not bake",
			group: []int32{0},
			clusters: []Cluster{checked("m1", 0, end),
				{Name: "m2", Wave: 0, Phase: v1alpha1.ClusterSucceeded, Started: true}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Unbaked(tc.group, end, tc.clusters)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("unbaked (-want +got):\n%s", diff)
			}
		})
	}
}
