package rollout

import (
	"testing"

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
	approvedRest := func(w string) bool { return w == "rest" }
	cases := []struct {
		name string
		// spec, group, approved and clusters are the input; rollback says the revision restores.
		spec     v1alpha1.RolloutSpec
		group    int32
		approved func(string) bool
		clusters []Cluster
		rollback bool
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
			name:     "past the last wave everything is done",
			spec:     twoWaves,
			group:    2,
			clusters: []Cluster{c("m1", 0, v1alpha1.ClusterSucceeded)},
			want:     Decision{AllDone: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(&tc.spec, tc.group, tc.approved, tc.clusters, tc.rollback)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("decision (-want +got):\n%s", diff)
			}
		})
	}
}
