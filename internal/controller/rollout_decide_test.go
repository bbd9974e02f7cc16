package controller

import (
	"reflect"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestDecide(t *testing.T) {
	twoWaves := v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{
		{Name: "canary", MaxConcurrency: 1},
		{Name: "rest", MaxConcurrency: 2, RequireApproval: true},
	}}
	cp := func(name string, wave int32, phase string) v1alpha1.ClusterProgress {
		return v1alpha1.ClusterProgress{Cluster: name, Wave: wave, Phase: phase}
	}
	cases := []struct {
		name string
		// spec and status are the input; rollback says the revision restores.
		spec     v1alpha1.RolloutSpec
		status   v1alpha1.RolloutStatus
		rollback bool
		// want is the decision.
		want Decision
	}{
		{
			name: "first wave starts one cluster at a time",
			spec: twoWaves,
			status: v1alpha1.RolloutStatus{Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterPending), cp("m2", 1, v1alpha1.ClusterPending), cp("m3", 1, v1alpha1.ClusterPending)}},
			want: Decision{Start: []string{"m1"}},
		},
		{
			name: "an active cluster is advanced and blocks the start of another beyond maxConcurrency",
			spec: v1alpha1.RolloutSpec{Waves: []v1alpha1.Wave{{Name: "all", MaxConcurrency: 2}}},
			status: v1alpha1.RolloutStatus{Clusters: []v1alpha1.ClusterProgress{
				cp("a", 0, v1alpha1.ClusterUpgrading), cp("b", 0, v1alpha1.ClusterPending), cp("c", 0, v1alpha1.ClusterPending)}},
			want: Decision{Advance: []string{"a"}, Start: []string{"b"}},
		},
		{
			name: "a finished wave is reported done",
			spec: twoWaves,
			status: v1alpha1.RolloutStatus{Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterSucceeded), cp("m2", 1, v1alpha1.ClusterPending)}},
			want: Decision{WaveDone: true},
		},
		{
			name: "the second wave waits for approval",
			spec: twoWaves,
			status: v1alpha1.RolloutStatus{CurrentWave: 1, Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterSucceeded), cp("m2", 1, v1alpha1.ClusterPending)}},
			want: Decision{NeedsApproval: true},
		},
		{
			name: "an approved wave starts up to its maxConcurrency",
			spec: func() v1alpha1.RolloutSpec { s := twoWaves; s.ApprovedWaves = []string{"rest"}; return s }(),
			status: v1alpha1.RolloutStatus{CurrentWave: 1, Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterSucceeded), cp("m2", 1, v1alpha1.ClusterPending), cp("m3", 1, v1alpha1.ClusterPending)}},
			want: Decision{Start: []string{"m2", "m3"}},
		},
		{
			name: "a failed cluster stops everything: no later wave starts",
			spec: twoWaves,
			status: v1alpha1.RolloutStatus{Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterFailed), cp("m2", 1, v1alpha1.ClusterPending)}},
			want: Decision{Failed: "m1"},
		},
		{
			name:     "a rollback runs the waves in reverse, one cluster at a time, without approval",
			spec:     twoWaves,
			rollback: true,
			status: v1alpha1.RolloutStatus{Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterPending), cp("m2", 1, v1alpha1.ClusterPending), cp("m3", 1, v1alpha1.ClusterPending)}},
			want: Decision{Start: []string{"m3"}},
		},
		{
			name: "past the last wave everything is done",
			spec: twoWaves,
			status: v1alpha1.RolloutStatus{CurrentWave: 2, Clusters: []v1alpha1.ClusterProgress{
				cp("m1", 0, v1alpha1.ClusterSucceeded)}},
			want: Decision{AllDone: true},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(&tc.spec, &tc.status, tc.rollback)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSteps(t *testing.T) {
	if got := nextStep(v1alpha1.PathUpgrade, StepSnapshot); got != StepApplyCRDs {
		t.Errorf("after Snapshot comes %s", got)
	}
	if got := nextStep(v1alpha1.PathRestore, StepRestore); got != StepApplyRelease {
		t.Errorf("after Restore comes %s", got)
	}
	if changed(v1alpha1.ClusterProgress{Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: StepSnapshot}) {
		t.Error("a cluster whose snapshot is not done yet has not been changed")
	}
	if !changed(v1alpha1.ClusterProgress{Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterFailed, Step: StepHealthGate}) {
		t.Error("a cluster that failed its gate has been changed")
	}
}
