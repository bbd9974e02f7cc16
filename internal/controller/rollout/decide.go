package rollout

import (
	"slices"
	"sort"
	"time"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
)

// Cluster is what deciding needs of one target of the rollout, as the reconciler sees it.
type Cluster struct {
	Name  string
	Wave  int32
	Phase string
	// Started says the Rollout opened the target (it counts against the concurrency even
	// before its executor picked it up).
	Started bool
	// Stale says the view holds the target at another revision than the current one: its
	// spec for this revision was written but has not reached the cache yet. The cluster is
	// not seen: it is neither started nor counted done.
	Stale bool
	// Bakes says the cluster was changed in the revision and re-checks its health while its
	// wave bakes (a cluster with nothing to do does not).
	Bakes bool
	// HealthCheckedAt is when the cluster's health was last checked during its wave's bake
	// (zero: never).
	HealthCheckedAt time.Time
}

// active says whether the cluster is being changed, or was opened and is about to be.
func (c Cluster) active() bool {
	return target.Active(c.Phase) || (c.Started && (c.Phase == v1alpha1.ClusterPending || c.Phase == ""))
}

func (c Cluster) pending() bool {
	return !c.Started && (c.Phase == v1alpha1.ClusterPending || c.Phase == "")
}

// Decision is what the rollout does next, decided from its spec, status and targets alone.
type Decision struct {
	// Start lists the clusters to open now.
	Start []string
	// Failed lists the failed clusters of the revision, in name order.
	Failed []string
	// GroupDone says every cluster of the current group (a wave; in a rollback, the whole
	// fleet unless spec.rollbackByWave) reached a final phase.
	GroupDone bool
	// AllDone says every group is done.
	AllDone bool
	// NeedsApproval says the current wave waits for a person's approval.
	NeedsApproval bool
	// Unseen is how many of the targets the revision planned the view does not hold at the
	// current revision (missing, or still at an earlier one). Nothing is decided on such a
	// view: a group with an unseen cluster is not done, and no cluster starts.
	Unseen int
}

// Groups returns the clusters' groups in the order the revision runs them: the waves in spec
// order for an upgrade; for a rollback, every cluster at once, or with spec.rollbackByWave the
// waves last first.
func Groups(spec *v1alpha1.RolloutSpec, rollback bool) [][]int32 {
	n := len(spec.Waves)
	if rollback && !spec.RollbackByWave {
		all := make([]int32, n)
		for i := range all {
			all[i] = int32(i)
		}
		return [][]int32{all}
	}
	out := make([][]int32, n)
	for i := range out {
		w := i
		if rollback {
			w = n - 1 - i
		}
		out[i] = []int32{int32(w)}
	}
	return out
}

// Decide chooses the next actions for the current group of a revision. It is pure: the same
// input always gives the same decision. planned is how many targets the revision's plan wrote
// (one per cluster; status.targets.total); clusters is every target the view holds. Until the
// view holds all planned targets at the current revision, nothing is decided: a cluster that
// is missing, or still seen at an earlier revision, would make its group look done (an empty
// wave is "done") and open the next one. An upgrade stops at its first failed cluster (the
// failure policy decides what then); a rollback goes on restoring every other cluster, since
// leaving a cluster on the bad release is the worse outcome.
func Decide(spec *v1alpha1.RolloutSpec, currentGroup int32, approved func(wave string) bool, clusters []Cluster, planned int, rollback bool) Decision {
	var d Decision
	clusters = slices.DeleteFunc(slices.Clone(clusters), func(c Cluster) bool { return c.Stale })
	if len(clusters) < planned {
		d.Unseen = planned - len(clusters)
		return d
	}
	for _, c := range clusters {
		if c.Phase == v1alpha1.ClusterFailed {
			d.Failed = append(d.Failed, c.Name)
		}
	}
	sort.Strings(d.Failed)
	if len(d.Failed) > 0 && !rollback {
		return d
	}
	groups := Groups(spec, rollback)
	pos := int(currentGroup)
	if pos >= len(groups) {
		d.AllDone = true
		return d
	}
	group := groups[pos]
	if !rollback {
		w := spec.Waves[group[0]]
		if w.RequireApproval && (approved == nil || !approved(w.Name)) {
			d.NeedsApproval = true
			return d
		}
	}
	limit := len(clusters)
	if rollback {
		if spec.RollbackConcurrency != nil && *spec.RollbackConcurrency > 0 {
			limit = int(*spec.RollbackConcurrency)
		}
	} else {
		limit = max(int(spec.Waves[group[0]].MaxConcurrency), 1)
	}
	running := 0
	var pending []string
	done := true
	for _, c := range clusters {
		if !slices.Contains(group, c.Wave) {
			continue
		}
		switch {
		case c.active():
			running++
			done = false
		case c.pending():
			pending = append(pending, c.Name)
			done = false
		}
	}
	sort.Strings(pending)
	for _, name := range pending {
		if running >= limit {
			break
		}
		d.Start = append(d.Start, name)
		running++
	}
	d.GroupDone = done
	return d
}

// Unbaked returns the clusters of group that have not passed its bake yet: every cluster
// changed in the revision must have had its health checked at or after until (the end of the
// bake) before the next group opens. A check made before it (up to one poll interval before)
// says nothing of the last moments of the bake. It is pure.
func Unbaked(group []int32, until time.Time, clusters []Cluster) []string {
	var out []string
	for _, c := range clusters {
		if c.Stale || !c.Bakes || c.Phase != v1alpha1.ClusterSucceeded || !slices.Contains(group, c.Wave) {
			continue
		}
		if c.HealthCheckedAt.Before(until) {
			out = append(out, c.Name)
		}
	}
	sort.Strings(out)
	return out
}
