// Package rolloutaction holds the changes a person asks for on a Rollout: approve, pause,
// resume, roll back and retry. The CLI's commands (rewind rollout approve|pause|resume, rewind
// rollback, rewind retry) and the dashboard's buttons run these same functions, so a button
// does exactly what its command does.
package rolloutaction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Get reads the Rollout name of namespace ns. When it does not exist the error names it and
// the command that lists them.
func Get(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		if objectNotFound(err) {
			return nil, fmt.Errorf("rollout %q not found in namespace %s (list them with: kubectl get rollouts.rewind.dev -n %s)", name, ns, ns)
		}
		return nil, err
	}
	return ro, nil
}

// objectNotFound says the API server answered that the object does not exist (not that it
// does not serve its kind at all: that 404 names no object).
func objectNotFound(err error) bool {
	var se apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return d != nil && d.Name != ""
}

// ErrDone is what a change returns when the Rollout read again already holds the change it
// wrote: a write whose answer was lost (the hub acted, the connection broke) and that was
// sent again met a conflict, and Update read the Rollout again. Update then returns the
// Rollout as read, without writing.
var ErrDone = errors.New("the change is already written")

// Update reads, changes and writes a Rollout, retrying on conflicts. A change that mut finds
// done (ErrDone) is not written again.
func Update(ctx context.Context, c client.Client, ns, name string, mut func(*v1alpha1.Rollout) error) (*v1alpha1.Rollout, error) {
	var ro *v1alpha1.Rollout
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		if ro, err = Get(ctx, c, ns, name); err != nil {
			return err
		}
		if err := mut(ro); errors.Is(err, ErrDone) {
			return nil
		} else if err != nil {
			return err
		}
		return c.Update(ctx, ro)
	})
	if err != nil {
		return nil, err
	}
	return ro, nil
}

// Approval is what Approve did: either it released the clusters that inconclusive metrics
// held (Held), or it approved Wave for Revision.
type Approval struct {
	Rollout  *v1alpha1.Rollout
	Held     []string
	Wave     string
	Revision int32
}

// Messages are what the approval did, one sentence per line, as `rewind rollout approve`
// prints them.
func (a Approval) Messages() []string {
	if len(a.Held) > 0 {
		out := make([]string, 0, len(a.Held))
		for _, cl := range a.Held {
			out = append(out, fmt.Sprintf("rollout/%s: inconclusive metrics of cluster %s approved for revision %d", a.Rollout.Name, cl, a.Revision))
		}
		return out
	}
	return []string{fmt.Sprintf("rollout/%s: wave %s approved for revision %d", a.Rollout.Name, a.Wave, a.Revision)}
}

// Approve is `rewind rollout approve NAME [WAVE]`: when clusters of the current revision (of
// wave, if given) are held because a metric of their health gate is inconclusive, it
// approves those; otherwise it approves wave (default "": the wave waiting now) for the
// current revision.
func Approve(ctx context.Context, c client.Client, ns, name, wave string) (Approval, error) {
	held, ro, err := ApproveHeld(ctx, c, ns, name, wave)
	if err != nil {
		return Approval{}, err
	}
	if len(held) > 0 {
		return Approval{Rollout: ro, Held: held, Revision: ro.Status.Revision}, nil
	}
	ro, chosen, rev, err := ApproveWave(ctx, c, ns, name, wave)
	if err != nil {
		return Approval{}, err
	}
	return Approval{Rollout: ro, Wave: chosen, Revision: rev}, nil
}

// ApproveHeld approves the targets of the rollout's current revision (of wave, if not "")
// that inconclusive metrics hold, and returns their clusters.
func ApproveHeld(ctx context.Context, c client.Client, ns, name, wave string) ([]string, *v1alpha1.Rollout, error) {
	ro, err := Get(ctx, c, ns, name)
	if err != nil || ro.Status.Revision == 0 {
		return nil, ro, err
	}
	targets, err := Targets(ctx, c, ro)
	if err != nil {
		return nil, ro, err
	}
	var held []string
	for i := range targets {
		t := &targets[i]
		if t.Spec.Revision != ro.Status.Revision || t.Status.Revision != t.Spec.Revision || t.Status.WaitingFor != v1alpha1.ReasonAwaitingApproval {
			continue
		}
		if wave != "" && (int(t.Spec.Wave) >= len(ro.Spec.Waves) || ro.Spec.Waves[t.Spec.Wave].Name != wave) {
			continue
		}
		before := t.DeepCopy()
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[v1alpha1.AnnotationApprovedMetrics] = strconv.Itoa(int(ro.Status.Revision))
		if err := c.Patch(ctx, t, client.MergeFrom(before)); err != nil {
			return nil, ro, fmt.Errorf("approving the metrics of cluster %s: %w", t.Spec.Cluster, err)
		}
		held = append(held, t.Spec.Cluster)
	}
	return held, ro, nil
}

// ApproveWave approves wave (default "": the wave waiting now) for the current revision.
func ApproveWave(ctx context.Context, c client.Client, ns, name, wave string) (*v1alpha1.Rollout, string, int32, error) {
	var chosen string
	var revision int32
	ro, err := Update(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
		chosen = wave
		if chosen == "" && int(ro.Status.CurrentWave) < len(ro.Spec.Waves) {
			chosen = ro.Spec.Waves[ro.Status.CurrentWave].Name
		}
		var waves []string
		for _, w := range ro.Spec.Waves {
			waves = append(waves, w.Name)
		}
		if !slices.Contains(waves, chosen) {
			return fmt.Errorf("rollout %s has no wave %q; its waves: %s", ro.Name, chosen, strings.Join(waves, ", "))
		}
		if ro.Status.Revision == 0 {
			return fmt.Errorf("rollout %s has not started a revision yet: there is nothing to approve", ro.Name)
		}
		revision = ro.Status.Revision
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		ro.Annotations[v1alpha1.AnnotationApprovedPrefix+chosen] = strconv.Itoa(int(revision))
		return nil
	})
	return ro, chosen, revision, err
}

// Pause sets (paused) or clears spec.paused.
func Pause(ctx context.Context, c client.Client, ns, name string, paused bool) (*v1alpha1.Rollout, error) {
	return Update(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error { ro.Spec.Paused = paused; return nil })
}

// Rollback sets spec.release back to `to` (default: the previous release) with the reason
// recorded for this rollback; it returns the releases it goes from and to.
func Rollback(ctx context.Context, c client.Client, ns, name, to, reason string) (ro *v1alpha1.Rollout, from, target string, err error) {
	var wrote string // the reason written, once a write was sent
	ro, err = Update(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
		if wrote != "" && ro.Spec.Release == target && ro.Annotations[v1alpha1.AnnotationRollbackReason] == wrote {
			return ErrDone // this rollback's own write, whose answer was lost
		}
		from, target = ro.Spec.Release, to
		if target == "" {
			target = PreviousRelease(ro)
		}
		if target == "" {
			return fmt.Errorf("rollout %s has no earlier release to roll back to; pass --to RELEASE", ro.Name)
		}
		if target == ro.Spec.Release {
			return fmt.Errorf("rollout %s already wants %s", ro.Name, target)
		}
		rel := &v1alpha1.OperatorRelease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: target}, rel); err != nil {
			if objectNotFound(err) {
				return fmt.Errorf("--to %s: release %q not found in namespace %s (list them with: kubectl get operatorreleases -n %s)", target, target, ro.Namespace, ro.Namespace)
			}
			return fmt.Errorf("--to %s: %w", target, err)
		}
		ro.Spec.Release = target
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		// Reported for this rollback only: the controller uses a value once.
		why := reason
		if why == "" {
			why = "requested with rewind rollback"
		}
		wrote = fmt.Sprintf("%s (at %s)", why, time.Now().UTC().Format(time.RFC3339))
		ro.Annotations[v1alpha1.AnnotationRollbackReason] = wrote
		return nil
	})
	return ro, from, target, err
}

// Retry asks once more for a failed release that was rolled back, or a failed rollback; it
// returns what is retried. prog is how the user runs rewind (for hints).
func Retry(ctx context.Context, c client.Client, ns, name, prog string) (*v1alpha1.Rollout, string, error) {
	var what, wrote string // wrote: the retry's time, once a write was sent
	ro, err := Update(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
		if wrote != "" && ro.Annotations[v1alpha1.AnnotationRetry] == wrote {
			return ErrDone // this retry's own write, whose answer was lost
		}
		stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
		switch {
		case ro.Status.Phase == v1alpha1.RolloutFailed && stalled != nil && stalled.Reason == v1alpha1.ReasonRollbackFailed:
			what = fmt.Sprintf("the rollback to %s on the clusters whose restore failed", ro.Status.CurrentRelease)
		case ro.Status.FailedRelease != "":
			what = ro.Status.FailedRelease
		case ro.Status.Phase == v1alpha1.RolloutFailed:
			return fmt.Errorf("rollout %s failed while upgrading to %s: roll it back (%s rollback %s) or set a new spec.release; retry runs again only a failed release that was rolled back, or a rollback that failed", ro.Name, ro.Status.CurrentRelease, prog, ro.Name)
		default:
			phase := ro.Status.Phase
			if phase == "" {
				phase = "-"
			}
			return fmt.Errorf("rollout %s holds no failed release and has not failed: nothing to retry (phase %s)", ro.Name, phase)
		}
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		wrote = time.Now().UTC().Format(time.RFC3339Nano)
		ro.Annotations[v1alpha1.AnnotationRetry] = wrote
		return nil
	})
	return ro, what, err
}

// PreviousRelease is the newest release in the history before the current one that
// differs and succeeded.
func PreviousRelease(ro *v1alpha1.Rollout) string {
	h := ro.Status.History
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Release != ro.Spec.Release && h[i].Outcome == "Succeeded" {
			return h[i].Release
		}
	}
	if ro.Status.PreviousRelease != ro.Spec.Release {
		return ro.Status.PreviousRelease
	}
	return ""
}

// Targets returns a rollout's targets, by wave and cluster.
func Targets(ctx context.Context, c client.Client, ro *v1alpha1.Rollout) ([]v1alpha1.RolloutTarget, error) {
	var list v1alpha1.RolloutTargetList
	if err := c.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabels{v1alpha1.LabelRollout: ro.Name}); err != nil {
		return nil, fmt.Errorf("listing the targets of rollout %s: %w", ro.Name, err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.RolloutTarget) int {
		if a.Spec.Wave != b.Spec.Wave {
			return int(a.Spec.Wave - b.Spec.Wave)
		}
		return strings.Compare(a.Spec.Cluster, b.Spec.Cluster)
	})
	return list.Items, nil
}
