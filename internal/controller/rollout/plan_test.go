package rollout

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
)

const (
	upgrade = v1alpha1.PathUpgrade
	restore = v1alpha1.PathRestore
	none    = v1alpha1.PathNone
)

func prevUpgrade(from, to, phase, step, snap string) Previous {
	return Previous{Path: upgrade, Phase: phase, Step: step, FromRelease: from, ToRelease: to, Snapshot: snap}
}

func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	one := []WaveCluster{{Name: "m1"}}
	cases := []struct {
		name string
		// in is the plan's input (Rollout "ro", revision 5 unless set).
		in PlanInput
		// want is each cluster's path, from, to and snapshot.
		want []TargetPlan
	}{
		{
			name: "a first install upgrades every cluster from nothing and names its snapshot",
			in:   PlanInput{Release: "a", Clusters: []WaveCluster{{Name: "m1"}, {Name: "m2", Wave: 1}}},
			want: []TargetPlan{
				{Cluster: "m1", Path: upgrade, ToRelease: "a", Snapshot: "ro-m1-r5"},
				{Cluster: "m2", Wave: 1, Path: upgrade, ToRelease: "a", Snapshot: "ro-m2-r5"},
			},
		},
		{
			name: "an upgrade goes from the release each cluster reached",
			in: PlanInput{Release: "b", PrevRelease: "a", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("", "a", v1alpha1.ClusterSucceeded, target.StepDone, "ro-m1-r4")}},
			want: []TargetPlan{{Cluster: "m1", Path: upgrade, FromRelease: "a", ToRelease: "b", Snapshot: "ro-m1-r5"}},
		},
		{
			name: "going back, a cluster the previous revision changed returns to the snapshot taken before the change",
			in: PlanInput{Release: "a", PrevRelease: "b", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterSucceeded, target.StepDone, "ro-m1-r4")}},
			want: []TargetPlan{{Cluster: "m1", Path: restore, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"}},
		},
		{
			name: "going back, a cluster that failed after changing returns to its snapshot too",
			in: PlanInput{Release: "a", PrevRelease: "b", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterFailed, target.StepHealthGate, "ro-m1-r4")}},
			want: []TargetPlan{{Cluster: "m1", Path: restore, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"}},
		},
		{
			// The defect: the "further back" lookup ran first, and gave a cluster still on the
			// desired release a restore to an old snapshot, reverting every CR change since.
			name: "going back, a cluster the previous revision never started needs nothing, even with an older snapshot under the release",
			in: PlanInput{Release: "a", PrevRelease: "b", Clusters: one,
				Previous:  map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterPending, "", "")},
				Snapshots: []SnapshotRef{{Name: "ro-m1-r2", Cluster: "m1", Release: "a", CapturedAt: t0}}},
			want: []TargetPlan{{Cluster: "m1", Path: none, FromRelease: "a", ToRelease: "a", Message: "not changed by b: nothing to roll back"}},
		},
		{
			name: "going back, a cluster that failed at its precheck needs nothing, even with an older snapshot under the release",
			in: PlanInput{Release: "a", PrevRelease: "b", Clusters: one,
				Previous:  map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterFailed, target.StepPrecheck, "")},
				Snapshots: []SnapshotRef{{Name: "ro-m1-r2", Cluster: "m1", Release: "a", CapturedAt: t0}}},
			want: []TargetPlan{{Cluster: "m1", Path: none, FromRelease: "a", ToRelease: "a", Message: "not changed by b: nothing to roll back"}},
		},
		{
			// The defect: a cluster that failed at its precheck was given the failed release as
			// the one it runs, so the next revision's precheck refused it.
			name: "forward, a cluster that failed at its precheck goes from the release it still runs",
			in: PlanInput{Release: "c", PrevRelease: "b", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterFailed, target.StepPrecheck, "")}},
			want: []TargetPlan{{Cluster: "m1", Path: upgrade, FromRelease: "a", ToRelease: "c", Snapshot: "ro-m1-r5"}},
		},
		{
			name: "forward, a cluster never started goes from the release it runs",
			in: PlanInput{Release: "c", PrevRelease: "b", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("a", "b", v1alpha1.ClusterPending, "", "")}},
			want: []TargetPlan{{Cluster: "m1", Path: upgrade, FromRelease: "a", ToRelease: "c", Snapshot: "ro-m1-r5"}},
		},
		{
			name: "forward, a cluster RollbackFailed restored goes from the release it was restored to",
			in: PlanInput{Release: "c", PrevRelease: "b", Clusters: one,
				Previous: map[string]Previous{"m1": {Path: restore, Phase: v1alpha1.ClusterRolledBack, Step: target.StepDone, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"}}},
			want: []TargetPlan{{Cluster: "m1", Path: upgrade, FromRelease: "a", ToRelease: "c", Snapshot: "ro-m1-r5"}},
		},
		{
			name: "further back (v3 -> v1): the newest snapshot taken while the release was installed",
			in: PlanInput{Release: "a", PrevRelease: "c", Clusters: one,
				Previous: map[string]Previous{"m1": prevUpgrade("b", "c", v1alpha1.ClusterSucceeded, target.StepDone, "ro-m1-r4")},
				Snapshots: []SnapshotRef{
					{Name: "ro-m1-r1", Cluster: "m1", Release: "", CapturedAt: t0},
					{Name: "ro-m1-r2", Cluster: "m1", Release: "a", CapturedAt: t0.Add(time.Hour)},
					{Name: "ro-m1-r3", Cluster: "m1", Release: "a", CapturedAt: t0.Add(2 * time.Hour)},
					{Name: "ro-m2-r3", Cluster: "m2", Release: "a", CapturedAt: t0.Add(3 * time.Hour)},
					{Name: "ro-m1-r4", Cluster: "m1", Release: "b", CapturedAt: t0.Add(4 * time.Hour)},
				}},
			want: []TargetPlan{{Cluster: "m1", Path: restore, FromRelease: "c", ToRelease: "a", Snapshot: "ro-m1-r3"}},
		},
		{
			name: "a restore that did not finish is resumed from the same snapshot",
			in: PlanInput{Release: "a", PrevRelease: "a", Clusters: one,
				Previous: map[string]Previous{"m1": {Path: restore, Phase: v1alpha1.ClusterFailed, Step: target.StepRestore, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"}}},
			want: []TargetPlan{{Cluster: "m1", Path: restore, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"}},
		},
		{
			// rewind retry of a rollback that ended Failed: the same release is planned again.
			name: "a retry of a rollback restores a cluster whose restore failed before changing anything, and leaves a restored one",
			in: PlanInput{Release: "a", PrevRelease: "a", Clusters: []WaveCluster{{Name: "m1"}, {Name: "m2"}},
				Previous: map[string]Previous{
					"m1": {Path: restore, Phase: v1alpha1.ClusterRolledBack, Step: target.StepDone, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m1-r4"},
					"m2": {Path: restore, Phase: v1alpha1.ClusterFailed, Step: target.FirstStep(restore), FromRelease: "b", ToRelease: "a", Snapshot: "ro-m2-r4"},
				},
				Snapshots: []SnapshotRef{{Name: "ro-m1-r4", Cluster: "m1", Release: "a", CapturedAt: t0}, {Name: "ro-m2-r4", Cluster: "m2", Release: "a", CapturedAt: t0}}},
			want: []TargetPlan{
				{Cluster: "m1", Path: none, FromRelease: "a", ToRelease: "a", Message: "already runs a"},
				{Cluster: "m2", Path: restore, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m2-r4"},
			},
		},
		{
			name: "a retry of a release keeps the clusters that run it and upgrades the others",
			in: PlanInput{Release: "b", PrevRelease: "a", Clusters: []WaveCluster{{Name: "m1"}, {Name: "m2"}},
				Previous: map[string]Previous{
					"m1": {Path: none, Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "b", ToRelease: "b"},
					"m2": {Path: restore, Phase: v1alpha1.ClusterRolledBack, Step: target.StepDone, FromRelease: "b", ToRelease: "a", Snapshot: "ro-m2-r3"},
				}},
			want: []TargetPlan{
				{Cluster: "m1", Path: none, FromRelease: "b", ToRelease: "b", Message: "already runs b"},
				{Cluster: "m2", Path: upgrade, FromRelease: "a", ToRelease: "b", Snapshot: "ro-m2-r5"},
			},
		},
		{
			name: "a cluster whose own rendering of the release it runs changed (spec.valuesFrom) upgrades to the new rendering",
			in: PlanInput{Release: "b", PrevRelease: "b", Clusters: one, Manifests: map[string]string{"m1": "sha256:new"},
				Previous: map[string]Previous{"m1": {Path: upgrade, Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "a", ToRelease: "b", Manifests: "sha256:old"}}},
			want: []TargetPlan{{Cluster: "m1", Path: upgrade, FromRelease: "b", ToRelease: "b", FromManifests: "sha256:old", Manifests: "sha256:new", Snapshot: "ro-m1-r5"}},
		},
		{
			name: "a cluster that runs the same rendering needs nothing",
			in: PlanInput{Release: "b", PrevRelease: "b", Clusters: one, Manifests: map[string]string{"m1": "sha256:same"},
				Previous: map[string]Previous{"m1": {Path: upgrade, Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "a", ToRelease: "b", Manifests: "sha256:same"}}},
			want: []TargetPlan{{Cluster: "m1", Path: none, FromRelease: "b", ToRelease: "b", Manifests: "sha256:same", Message: "already runs b"}},
		},
		{
			name: "going back restores the rendering the cluster ran before the change, whatever the values say now",
			in: PlanInput{Release: "a", PrevRelease: "b", Clusters: one, Manifests: map[string]string{"m1": "sha256:a-now"},
				Previous: map[string]Previous{"m1": {Path: upgrade, Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "a", ToRelease: "b",
					FromManifests: "sha256:a-then", Manifests: "sha256:b", Snapshot: "ro-m1-r4"}}},
			want: []TargetPlan{{Cluster: "m1", Path: restore, FromRelease: "b", ToRelease: "a", FromManifests: "sha256:b", Manifests: "sha256:a-then", Snapshot: "ro-m1-r4"}},
		},
		{
			name: "a cluster that joins the fleet later goes from the rollout's previous release",
			in:   PlanInput{Release: "c", PrevRelease: "b", Clusters: []WaveCluster{{Name: "new"}}},
			want: []TargetPlan{{Cluster: "new", Path: upgrade, FromRelease: "b", ToRelease: "c", Snapshot: "ro-new-r5"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Rollout, tc.in.Revision = "ro", 5
			got := Plan(tc.in)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("plan (-want +got):\n%s", diff)
			}
			// Pure: the same input, the same plan.
			if diff := cmp.Diff(got, Plan(tc.in)); diff != "" {
				t.Fatalf("a second plan differs:\n%s", diff)
			}
		})
	}
}

// A rollback's first group is opened in the write that plans it: every cluster it restores at
// once (all of them, unless spec.rollbackConcurrency or spec.rollbackByWave say otherwise),
// as Decide would open them a reconcile later; a cluster with nothing to do counts against
// the concurrency, as it does there. An upgrade, and a paused rollout, open nothing so.
func TestARollbackIsOpenedInTheWriteThatPlansIt(t *testing.T) {
	waves := []v1alpha1.Wave{{Name: "canary", MaxConcurrency: 1}, {Name: "rest", MaxConcurrency: 1}}
	back := []TargetPlan{
		{Cluster: "m1", Wave: 0, Path: restore}, {Cluster: "m2", Wave: 1, Path: restore},
		{Cluster: "m3", Wave: 1, Path: none}, {Cluster: "m4", Wave: 1, Path: restore},
	}
	cases := []struct {
		name  string
		spec  v1alpha1.RolloutSpec
		plans []TargetPlan
		want  []string
	}{
		{"every cluster at once", v1alpha1.RolloutSpec{Waves: waves}, back, []string{"m1", "m2", "m4"}},
		{"rollbackConcurrency 2, the cluster with nothing to do counting", v1alpha1.RolloutSpec{Waves: waves, RollbackConcurrency: ptr.To(int32(2))}, back, []string{"m1"}},
		{"rollbackConcurrency 3", v1alpha1.RolloutSpec{Waves: waves, RollbackConcurrency: ptr.To(int32(3))}, back, []string{"m1", "m2"}},
		{"rollbackByWave: the last wave first", v1alpha1.RolloutSpec{Waves: waves, RollbackByWave: true}, back, []string{"m2", "m4"}},
		{"paused", v1alpha1.RolloutSpec{Waves: waves, Paused: true}, back, nil},
		{"an upgrade", v1alpha1.RolloutSpec{Waves: waves}, []TargetPlan{{Cluster: "m1", Path: upgrade}, {Cluster: "m2", Wave: 1, Path: upgrade}}, nil},
	}
	for _, tc := range cases {
		var got []string
		for c, open := range openedAtOnce(&tc.spec, tc.plans) {
			if open {
				got = append(got, c)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: opened %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A target's journal says what its cluster ran last, even when the spec holds a newer
// revision its executor has not started or refused: a rollback planned from it restores a
// cluster the journal changed, and leaves one whose next revision never started.
func TestPreviousIsTheJournal(t *testing.T) {
	spec := func(rev int32, path, from, to, snap string) v1alpha1.RolloutTargetSpec {
		return v1alpha1.RolloutTargetSpec{Revision: rev, Path: path, FromRelease: from, ToRelease: to, Snapshot: snap}
	}
	for _, tc := range []struct {
		name string
		t    v1alpha1.RolloutTarget
		want Previous
		// plan is the path a rollback to v1 plans from it.
		plan string
	}{{
		name: "the journal changed the cluster, the spec's newer plan was refused",
		t: v1alpha1.RolloutTarget{Spec: spec(3, none, "v1", "v1", ""), Status: v1alpha1.RolloutTargetStatus{Revision: 2, Path: upgrade,
			Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "v1", ToRelease: "v2", Snapshot: "s2"}},
		want: prevUpgrade("v1", "v2", v1alpha1.ClusterSucceeded, target.StepDone, "s2"),
		plan: restore,
	}, {
		name: "the spec's revision not started: the journal before it",
		t: v1alpha1.RolloutTarget{Spec: spec(3, upgrade, "v1", "v2", "s3"), Status: v1alpha1.RolloutTargetStatus{Revision: 2, Path: upgrade,
			Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone, FromRelease: "v0", ToRelease: "v1", Snapshot: "s2"}},
		want: prevUpgrade("v0", "v1", v1alpha1.ClusterSucceeded, target.StepDone, "s2"),
		plan: none,
	}, {
		name: "a journal that does not say its plan (an older controller's): the spec's",
		t: v1alpha1.RolloutTarget{Spec: spec(2, upgrade, "v1", "v2", "s2"), Status: v1alpha1.RolloutTargetStatus{Revision: 2, Path: upgrade,
			Phase: v1alpha1.ClusterUpgrading, Step: target.StepHealthGate, Snapshot: "s2"}},
		want: prevUpgrade("v1", "v2", v1alpha1.ClusterUpgrading, target.StepHealthGate, "s2"),
		plan: restore,
	}, {
		name: "an older controller's journal of another revision: the spec's, not started",
		t: v1alpha1.RolloutTarget{Spec: spec(3, upgrade, "v1", "v2", "s3"), Status: v1alpha1.RolloutTargetStatus{Revision: 2, Path: upgrade,
			Phase: v1alpha1.ClusterSucceeded, Step: target.StepDone}},
		want: prevUpgrade("v1", "v2", v1alpha1.ClusterPending, "", ""),
		plan: none,
	}, {
		name: "no journal",
		t:    v1alpha1.RolloutTarget{Spec: spec(2, upgrade, "v1", "v2", "s2")},
		want: prevUpgrade("v1", "v2", v1alpha1.ClusterPending, "", ""),
		plan: none,
	}} {
		got := previousOf(&tc.t)
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s: previousOf (-want +got):\n%s", tc.name, diff)
		}
		plans := Plan(PlanInput{Rollout: "r", Revision: 4, Release: "v1", PrevRelease: "v2", Clusters: []WaveCluster{{Name: "c"}},
			Previous: map[string]Previous{"c": got}})
		if plans[0].Path != tc.plan {
			t.Errorf("%s: a rollback to v1 plans %s (%s), want %s", tc.name, plans[0].Path, plans[0].Message, tc.plan)
		}
	}
}
