package controller

import (
	"slices"
	"sort"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Per-cluster steps of the upgrade path.
const (
	StepPrecheck       = "Precheck"
	StepSnapshot       = "Snapshot"
	StepApplyCRDs      = "ApplyCRDs"
	StepApplyRBAC      = "ApplyRBAC"
	StepApplyConfig    = "ApplyConfig"
	StepApplyWebhooks  = "ApplyWebhooks"
	StepApplyWorkloads = "ApplyWorkloads"
	StepApplyOthers    = "ApplyOthers"
	StepHealthGate     = "HealthGate"
	StepRecord         = "Record"
	StepDone           = "Done"
	// Restore path (back to the snapshot taken under the desired release).
	StepRestore      = "Restore"
	StepApplyRelease = "ApplyRelease"
)

// UpgradeSteps and RestoreSteps are the per-cluster state machines, in order.
var (
	UpgradeSteps = []string{StepPrecheck, StepSnapshot, StepApplyCRDs, StepApplyRBAC, StepApplyConfig, StepApplyWebhooks, StepApplyWorkloads, StepApplyOthers, StepHealthGate, StepRecord, StepDone}
	RestoreSteps = []string{StepRestore, StepApplyRelease, StepHealthGate, StepRecord, StepDone}
)

// nextStep returns the step after step on the cluster's path.
func nextStep(path, step string) string {
	steps := UpgradeSteps
	if path == v1alpha1.PathRestore {
		steps = RestoreSteps
	}
	i := slices.Index(steps, step)
	if i < 0 || i+1 >= len(steps) {
		return StepDone
	}
	return steps[i+1]
}

// firstStep is where a path starts.
func firstStep(path string) string {
	if path == v1alpha1.PathRestore {
		return StepRestore
	}
	return StepPrecheck
}

// terminal says whether a cluster phase is final for its revision.
func terminal(phase string) bool {
	switch phase {
	case v1alpha1.ClusterSucceeded, v1alpha1.ClusterFailed, v1alpha1.ClusterRolledBack:
		return true
	}
	return false
}

// active says whether a cluster is being changed.
func active(phase string) bool {
	return phase == v1alpha1.ClusterUpgrading || phase == v1alpha1.ClusterRollingBack
}

// changed says whether the cluster's state was (possibly) changed by its path in this
// revision: an upgrade that got past its snapshot, or any restore.
func changed(c v1alpha1.ClusterProgress) bool {
	if c.Path == v1alpha1.PathRestore {
		return c.Phase != v1alpha1.ClusterPending
	}
	if c.Path != v1alpha1.PathUpgrade {
		return false
	}
	i := slices.Index(UpgradeSteps, c.Step)
	return i > slices.Index(UpgradeSteps, StepSnapshot) || c.Phase == v1alpha1.ClusterSucceeded
}

// Decision is what the rollout does next, decided from its status alone.
type Decision struct {
	// Start lists the Pending clusters to start now.
	Start []string
	// Advance lists the active clusters to move one step.
	Advance []string
	// Failed is the first failed cluster of the current revision, if any.
	Failed string
	// WaveDone says every cluster of the current wave reached a final phase successfully.
	WaveDone bool
	// AllDone says every wave is done.
	AllDone bool
	// NeedsApproval says the current wave waits for a person's approval.
	NeedsApproval bool
}

// waveOrder returns the wave indexes in the order the revision runs them: in spec order for
// upgrades, in reverse for a rollback (clusters changed last are restored first).
func waveOrder(n int, rollback bool) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
		if rollback {
			out[i] = n - 1 - i
		}
	}
	return out
}

// Decide chooses the next actions for the current wave of a rollout. It is pure: the same
// spec and status always give the same decision.
func Decide(spec *v1alpha1.RolloutSpec, st *v1alpha1.RolloutStatus, rollback bool) Decision {
	var d Decision
	for _, c := range st.Clusters {
		if c.Phase == v1alpha1.ClusterFailed {
			d.Failed = c.Cluster
			return d
		}
	}
	order := waveOrder(len(spec.Waves), rollback)
	pos := int(st.CurrentWave)
	if pos >= len(order) {
		d.AllDone = true
		return d
	}
	wave := order[pos]
	w := spec.Waves[wave]
	if w.RequireApproval && !rollback && !slices.Contains(spec.ApprovedWaves, w.Name) {
		d.NeedsApproval = true
		return d
	}
	maxC := int(w.MaxConcurrency)
	if maxC < 1 {
		maxC = 1
	}
	if rollback {
		maxC = 1 // restore one cluster at a time, in reverse order
	}
	running := 0
	var pending []v1alpha1.ClusterProgress
	done := true
	for _, c := range st.Clusters {
		if int(c.Wave) != wave {
			continue
		}
		switch {
		case active(c.Phase):
			running++
			d.Advance = append(d.Advance, c.Cluster)
			done = false
		case c.Phase == v1alpha1.ClusterPending:
			pending = append(pending, c)
			done = false
		}
	}
	sort.SliceStable(pending, func(i, j int) bool {
		if rollback {
			return pending[i].Cluster > pending[j].Cluster
		}
		return pending[i].Cluster < pending[j].Cluster
	})
	for _, c := range pending {
		if running >= maxC {
			break
		}
		d.Start = append(d.Start, c.Cluster)
		running++
	}
	d.WaveDone = done
	return d
}

// recordSnapshot notes a cluster's snapshot on a revision.
func recordSnapshot(rev *v1alpha1.Revision, cluster, name string) {
	if rev.Snapshots == nil {
		rev.Snapshots = map[string]string{}
	}
	rev.Snapshots[cluster] = name
}
