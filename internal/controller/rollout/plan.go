package rollout

import (
	"fmt"
	"slices"
	"time"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
)

// WaveCluster is a cluster a revision targets, with the index of its wave.
type WaveCluster struct {
	Name string
	Wave int32
}

// Previous is what a cluster's RolloutTarget says of the revision before: what it was asked
// to do and how far it got.
type Previous struct {
	Path, Phase, Step      string
	FromRelease, ToRelease string
	// FromManifests and Manifests are the digests of the cluster's own renderings of the
	// releases ("" for the release's own manifests).
	FromManifests, Manifests string
	// Snapshot is the snapshot taken before the change (Upgrade) or restored (Restore).
	Snapshot string
}

// SnapshotRef is a complete snapshot this rollout took of a cluster.
type SnapshotRef struct {
	Name, Cluster, Release string
	CapturedAt             time.Time
}

// PlanInput is everything a revision's plan depends on.
type PlanInput struct {
	// Rollout names the rollout (snapshot names derive from it).
	Rollout string
	// Revision is the number of the revision being planned.
	Revision int32
	// Release is the release the revision rolls out.
	Release string
	// PrevRelease is the release the rollout rolled out before ("" before the first).
	PrevRelease string
	// Clusters are the clusters the waves select, in wave order.
	Clusters []WaveCluster
	// Previous holds, by cluster, the previous revision's targets (absent: never targeted).
	Previous map[string]Previous
	// Snapshots are the complete snapshots this rollout took (any cluster, any release).
	Snapshots []SnapshotRef
	// Manifests holds, by cluster, the digest of the cluster's own rendering of Release
	// (spec.valuesFrom); absent: the release's own manifests.
	Manifests map[string]string
}

// TargetPlan is what one cluster does in the revision.
type TargetPlan struct {
	Cluster     string
	Wave        int32
	Path        string
	FromRelease string
	ToRelease   string
	// Manifests and FromManifests are the digests of the cluster's own renderings of
	// ToRelease and FromRelease ("" for the releases' own manifests).
	Manifests, FromManifests string
	// Snapshot is the snapshot to restore (Restore) or the name of the one to take (Upgrade).
	Snapshot string
	// Message explains a None path.
	Message string
}

// Runs says which release a cluster runs after its previous revision, as far as rewind
// changed it: the release it reached, or the one it started from when it never changed
// anything. A cluster its previous revision left half-changed (failed or interrupted after its
// snapshot) counts as running the release it was moving to: that is what its workloads may run.
func (p Previous) Runs() string {
	if p.reached() {
		return p.ToRelease
	}
	return p.FromRelease
}

// RunsManifests is Runs for the cluster's own rendering (a digest, "" for the release's own).
func (p Previous) RunsManifests() string {
	if p.reached() {
		return p.Manifests
	}
	return p.FromManifests
}

// reached says whether the cluster runs (or partly runs) what the previous revision moved it to.
func (p Previous) reached() bool {
	switch {
	case p.Phase == v1alpha1.ClusterSucceeded, p.Phase == v1alpha1.ClusterRolledBack:
		return true
	case target.Changed(p.Path, p.Phase, p.Step):
		// A restore that did not finish is still (partly) the release it left.
		return p.Path != v1alpha1.PathRestore
	}
	return false
}

// Plan decides each cluster's path to in.Release. It is pure: the same input always gives the
// same plan. In order, a cluster:
//  1. that runs in.Release already and was not left half-changed needs nothing (None): this
//     is also every cluster a rolled-back revision never got to change;
//  2. that the previous revision changed, going back to the release it came from, returns to
//     the snapshot taken before that change (Restore), or resumes the restore it was doing;
//  3. that runs another release, when in.Release was installed on it before, returns to the
//     newest snapshot taken while in.Release was installed (Restore: v3 -> v1 directly);
//  4. otherwise upgrades (snapshot, staged apply, gates, record) from what it runs.
func Plan(in PlanInput) []TargetPlan {
	out := make([]TargetPlan, 0, len(in.Clusters))
	for _, c := range in.Clusters {
		tp := TargetPlan{Cluster: c.Name, Wave: c.Wave, ToRelease: in.Release, Path: v1alpha1.PathUpgrade, FromRelease: in.PrevRelease,
			Manifests: in.Manifests[c.Name]}
		p, had := in.Previous[c.Name]
		if had {
			tp.FromRelease, tp.FromManifests = p.Runs(), p.RunsManifests()
		}
		changed := had && target.Changed(p.Path, p.Phase, p.Step)
		unfinished := changed && p.Phase != v1alpha1.ClusterSucceeded && p.Phase != v1alpha1.ClusterRolledBack
		switch {
		case tp.FromRelease == in.Release && tp.FromManifests == tp.Manifests && !unfinished && (had || in.PrevRelease == in.Release):
			tp.Path = v1alpha1.PathNone
			tp.FromManifests = ""
			tp.Message = fmt.Sprintf("already runs %s", in.Release)
			if had && !changed && p.ToRelease != in.Release {
				tp.Message = fmt.Sprintf("not changed by %s: nothing to roll back", p.ToRelease)
			}
		case changed && p.Path == v1alpha1.PathUpgrade && p.FromRelease == in.Release && p.Snapshot != "":
			// Back exactly to what ran before the change, its own rendering included.
			tp.Path, tp.Snapshot, tp.FromRelease, tp.FromManifests, tp.Manifests = v1alpha1.PathRestore, p.Snapshot, p.ToRelease, p.Manifests, p.FromManifests
		case unfinished && p.Path == v1alpha1.PathRestore && p.ToRelease == in.Release && p.Snapshot != "":
			tp.Path, tp.Snapshot, tp.FromRelease, tp.FromManifests, tp.Manifests = v1alpha1.PathRestore, p.Snapshot, p.FromRelease, p.FromManifests, p.Manifests
		default:
			if snap := newestUnder(in.Snapshots, c.Name, in.Release); snap != "" && in.PrevRelease != "" && tp.FromRelease != in.Release {
				tp.Path, tp.Snapshot = v1alpha1.PathRestore, snap
			}
		}
		if tp.Path == v1alpha1.PathUpgrade {
			tp.Snapshot = SnapshotName(in.Rollout, c.Name, in.Revision)
		}
		out = append(out, tp)
	}
	return out
}

// SnapshotName names the snapshot an upgrade takes of a cluster in a revision.
func SnapshotName(rollout, cluster string, revision int32) string {
	return fmt.Sprintf("%s-%s-r%d", rollout, cluster, revision)
}

// newestUnder returns the newest snapshot of cluster taken while release was installed.
func newestUnder(snaps []SnapshotRef, cluster, release string) string {
	best := -1
	for i, s := range snaps {
		if s.Cluster != cluster || s.Release != release {
			continue
		}
		if best < 0 || s.CapturedAt.After(snaps[best].CapturedAt) || (s.CapturedAt.Equal(snaps[best].CapturedAt) && s.Name > snaps[best].Name) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return snaps[best].Name
}

// IsRollback says whether a plan goes back: some cluster returns to a snapshot taken under the
// release the revision rolls out.
func IsRollback(plans []TargetPlan) bool {
	return slices.ContainsFunc(plans, func(p TargetPlan) bool { return p.Path == v1alpha1.PathRestore })
}
