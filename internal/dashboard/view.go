package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/history"
)

// rowView is a Rollout in the list.
type rowView struct {
	ID, Name, Operator, Phase, Release, Current, ClustersDone, Failed string
	Revision                                                          int32
}

func rowID(name string) string { return "row-" + name }

func rolloutRow(ro *v1alpha1.Rollout) rowView {
	return rowView{ID: rowID(ro.Name), Name: ro.Name, Operator: ro.Spec.Operator, Phase: phaseOrPending(ro.Status.Phase), Release: ro.Spec.Release,
		Current: ro.Status.CurrentRelease, ClustersDone: ro.Status.ClustersDone, Failed: ro.Status.FailedRelease, Revision: ro.Status.Revision}
}

func phaseOrPending(p string) string {
	if p == "" {
		return v1alpha1.ClusterPending
	}
	return p
}

// cellView is one cluster of a Rollout's grid.
type cellView struct {
	ID, Cluster, Path, Phase, Step, Message, Snapshot, From, To, Waiting string
	Attempt, Faults                                                      int32
	// Notes are what the cluster's executor noted in this plan (status.notes): a pull
	// member's agent reports them there, a push member's executor too.
	Notes []v1alpha1.TargetNote
}

func cellID(cluster string) string { return "cell-" + cluster }

func cellIDOfTarget(rollout, target string) string {
	return cellID(strings.TrimPrefix(target, rollout+"-"))
}

// targetCell reads a target as `rewind rollout status` does: its status counts only once
// its executor has seen the current plan (revision and path); until then it is Pending.
func targetCell(ro *v1alpha1.Rollout, t *v1alpha1.RolloutTarget) cellView {
	c := cellView{ID: cellID(t.Spec.Cluster), Cluster: t.Spec.Cluster, Path: t.Spec.Path, Phase: v1alpha1.ClusterPending,
		Snapshot: t.Spec.Snapshot, Message: t.Spec.Reason, From: t.Spec.FromRelease, To: t.Spec.ToRelease}
	if t.Status.Revision == t.Spec.Revision && t.Status.Path == t.Spec.Path {
		c.Phase, c.Step, c.Message, c.Attempt, c.Faults, c.Waiting = phaseOrPending(t.Status.Phase), t.Status.Step, t.Status.Message, t.Status.Attempt, t.Status.Faults, t.Status.WaitingFor
		c.Notes = t.Status.Notes
		if t.Status.Snapshot != "" {
			c.Snapshot = t.Status.Snapshot
		}
	}
	if t.Spec.Path == v1alpha1.PathUpgrade && (c.Phase == v1alpha1.ClusterPending || c.Step == "Precheck") {
		c.Snapshot = "" // named, not taken yet
	}
	return c
}

// waveView is one wave of the grid with its cells.
type waveView struct {
	Index                     int32
	Name, Detail, Approval    string
	Cells                     []cellView
	Current, RequiresApproval bool
}

func waveOf(ro *v1alpha1.Rollout, i int32, cells []cellView) waveView {
	w := waveView{Index: i, Name: fmt.Sprintf("wave %d", i), Cells: cells}
	if int(i) < len(ro.Spec.Waves) {
		sw := ro.Spec.Waves[i]
		w.Name = sw.Name
		var parts []string
		if sw.MaxConcurrency > 0 {
			parts = append(parts, fmt.Sprintf("max %d at once", sw.MaxConcurrency))
		}
		if sw.BakeTime != nil {
			parts = append(parts, "bakes "+sw.BakeTime.Duration.String())
		}
		if sw.RequireApproval {
			w.RequiresApproval = true
			parts = append(parts, "requires approval")
			if ro.Annotations[v1alpha1.AnnotationApprovedPrefix+sw.Name] == fmt.Sprint(ro.Status.Revision) {
				w.Approval = "approved"
			}
		}
		w.Detail = strings.Join(parts, ", ")
	}
	w.Current = i == ro.Status.CurrentWave
	return w
}

// grid groups a Rollout's targets by wave, clusters sorted by name.
func grid(ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget) []waveView {
	by := map[int32][]cellView{}
	for i := range targets {
		by[targets[i].Spec.Wave] = append(by[targets[i].Spec.Wave], targetCell(ro, &targets[i]))
	}
	n := int32(len(ro.Spec.Waves))
	for w := range by {
		n = max(n, w+1)
	}
	out := make([]waveView, 0, n)
	for i := int32(0); i < n; i++ {
		cells := by[i]
		slices.SortFunc(cells, func(a, b cellView) int { return strings.Compare(a.Cluster, b.Cluster) })
		out = append(out, waveOf(ro, i, cells))
	}
	return out
}

// headView is a Rollout page's header.
type headView struct {
	rowView
	Previous, FailureReason, Waves string
	Conditions                     []metav1.Condition
	Counts                         v1alpha1.TargetCounts
	Paused                         bool
	Actions                        []actionView
}

// actionView is an action button.
type actionView struct {
	Name, Label, Confirm string
	Reason               bool
}

func (s *Server) rolloutHead(ro *v1alpha1.Rollout) headView {
	h := headView{rowView: rolloutRow(ro), Previous: ro.Status.PreviousRelease, FailureReason: ro.Status.FailureReason,
		Counts: ro.Status.Targets, Paused: ro.Spec.Paused,
		Waves: fmt.Sprintf("wave %d of %d", min(int(ro.Status.CurrentWave)+1, len(ro.Spec.Waves)), len(ro.Spec.Waves))}
	for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionProgressing, v1alpha1.ConditionStalled, v1alpha1.ConditionRolledBack} {
		if c := meta.FindStatusCondition(ro.Status.Conditions, t); c != nil {
			h.Conditions = append(h.Conditions, *c)
		}
	}
	if s.actionsEnabled() {
		n := ro.Name
		h.Actions = []actionView{
			{Name: "approve", Label: "Approve", Confirm: "Approve rollout " + n + "? Clusters held by inconclusive metrics are released; if none are, the wave waiting now is approved."},
			{Name: "pause", Label: "Pause", Confirm: "Pause rollout " + n + "? No new step starts until it is resumed."},
			{Name: "resume", Label: "Resume", Confirm: "Resume rollout " + n + "?"},
			{Name: "rollback", Label: "Roll back", Confirm: "Roll rollout " + n + " back to its previous release? Every changed cluster is restored from its snapshot.", Reason: true},
			{Name: "retry", Label: "Retry", Confirm: "Attempt the failed release (or the failed rollback) of rollout " + n + " again?"},
		}
	}
	return h
}

// entryView is one revision on the timeline.
type entryView struct {
	history.Entry
	Started, Finished, Class string
}

// historyView is the timeline, newest first.
func historyView(ro *v1alpha1.Rollout) []entryView {
	es := history.Describe(ro.Status.History)
	out := make([]entryView, 0, len(es))
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		class := "upgrade"
		if e.Kind == history.KindRollback {
			class = "rollback by-" + e.By
		}
		out = append(out, entryView{Entry: e, Started: ts(e.StartedAt), Finished: ts(e.FinishedAt), Class: class})
	}
	return out
}

func ts(t *metav1.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.DateTime)
}

// memberView is a member cluster on the members page.
type memberView struct {
	Name, Labels, Reachable, ReachMessage, LastProbe, ServerVersion, Mirror, MirrorAt string
	// ByRollout is, per Rollout of the namespace, what its target on this member says now.
	ByRollout []memberRollout
	// Checks are the live checks of the member's own record (only when asked for).
	Checks []MemberCheck
}

type memberRollout struct {
	Rollout, Installed, Phase string
}

func memberOf(mc *v1alpha1.MemberCluster) memberView {
	m := memberView{Name: mc.Name, Reachable: "Unknown", ReachMessage: "not probed yet (is the controller running?)", ServerVersion: mc.Status.ServerVersion}
	var labels []string
	for k, v := range mc.Labels {
		labels = append(labels, k+"="+v)
	}
	slices.Sort(labels)
	m.Labels = strings.Join(labels, ", ")
	if c := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable); c != nil {
		m.Reachable, m.ReachMessage = string(c.Status), c.Message
	}
	m.LastProbe = ts(mc.Status.LastProbeSuccessTime)
	var inst []string
	for _, r := range mc.Status.Installed {
		inst = append(inst, fmt.Sprintf("%s %s (%s)", r.Operator, r.Version, r.Release))
	}
	m.Mirror = strings.Join(inst, ", ")
	m.MirrorAt = ts(mc.Status.LastCheckTime)
	return m
}

// installedByTarget says what a target says its cluster runs now: its release once it has
// succeeded (an upgrade) or been rolled back (a restore), else where it is going from and to.
func installedByTarget(t *v1alpha1.RolloutTarget) (installed, phase string) {
	if t.Status.Revision != t.Spec.Revision || t.Status.Path != t.Spec.Path {
		return t.Spec.FromRelease, v1alpha1.ClusterPending
	}
	switch t.Status.Phase {
	case v1alpha1.ClusterSucceeded, v1alpha1.ClusterRolledBack:
		return t.Spec.ToRelease, t.Status.Phase
	default:
		return t.Spec.FromRelease + " → " + t.Spec.ToRelease, phaseOrPending(t.Status.Phase)
	}
}
