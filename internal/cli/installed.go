package cli

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// installedByTargets says, per member and operator, what the rollout targets say the member
// runs now: a target's release once it succeeded (an upgrade) or was rolled back to it (a
// restore), "FROM->TO (PHASE)" while it moves, its FROM release until its executor sees the
// plan. A MemberCluster's installed list mirrors each member's record only at its check
// interval, so right after a rollout the targets are current and the mirror is not. When
// several targets name one member and operator, the one that moved last wins.
func installedByTargets(targets []v1alpha1.RolloutTarget) map[string]map[string]string {
	type pick struct {
		at    time.Time
		value string
	}
	best := map[[2]string]pick{}
	for _, t := range targets {
		at := t.CreationTimestamp.Time
		for _, ts := range []*time.Time{timeOf(t.Status.StartedAt), timeOf(t.Status.StepStartedAt), timeOf(t.Status.FinishedAt)} {
			if ts != nil && ts.After(at) {
				at = *ts
			}
		}
		var v string
		switch {
		case t.Status.Revision != t.Spec.Revision || t.Status.Path != t.Spec.Path:
			v = t.Spec.FromRelease
		case t.Status.Phase == v1alpha1.ClusterSucceeded || t.Status.Phase == v1alpha1.ClusterRolledBack:
			v = t.Spec.ToRelease
		default:
			v = fmt.Sprintf("%s->%s (%s)", dash(t.Spec.FromRelease), t.Spec.ToRelease, dash(t.Status.Phase))
		}
		if v == "" {
			continue
		}
		k := [2]string{t.Spec.Cluster, t.Spec.Operator}
		if p, ok := best[k]; !ok || at.After(p.at) {
			best[k] = pick{at: at, value: v}
		}
	}
	out := map[string]map[string]string{}
	for k, p := range best {
		if out[k[0]] == nil {
			out[k[0]] = map[string]string{}
		}
		out[k[0]][k[1]] = p.value
	}
	return out
}

func timeOf(t *metav1.Time) *time.Time {
	if t == nil {
		return nil
	}
	return &t.Time
}

// installedColumn is the INSTALLED column of `clusters list` for one member: each operator's
// release as the targets say (now) or, for operators no target names, as the mirror of the
// member's record says; where the two differ, the mirror's value and age follow.
func installedColumn(mc *v1alpha1.MemberCluster, byTargets map[string]string, now time.Time) []string {
	var out []string
	seen := map[string]bool{}
	age := ""
	if mc.Status.LastCheckTime != nil {
		age = " as of " + duration.HumanDuration(now.Sub(mc.Status.LastCheckTime.Time)) + " ago"
	}
	for _, r := range mc.Status.Installed {
		seen[r.Operator] = true
		mirror := fmt.Sprintf("%s=%s(%s)", r.Operator, r.Version, r.Release)
		if t, ok := byTargets[r.Operator]; ok && t != r.Release {
			out = append(out, fmt.Sprintf("%s=%s(targets; record: %s%s)", r.Operator, t, r.Release, age))
			continue
		}
		out = append(out, mirror)
	}
	for _, op := range sortedKeys(byTargets) {
		if !seen[op] {
			out = append(out, fmt.Sprintf("%s=%s(targets; no record mirrored yet)", op, byTargets[op]))
		}
	}
	return out
}
