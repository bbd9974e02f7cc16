package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// The changes a person asks for on a Rollout: the commands (rollout approve, pause, resume,
// rollback, retry) and the dashboard's actions run these same functions.

// approveRollout approves wave (default "": the wave waiting now) for the current revision.
func approveRollout(ctx context.Context, c client.Client, ns, name, wave string) (*v1alpha1.Rollout, string, int32, error) {
	var chosen string
	var revision int32
	ro, err := updateRollout(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
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

// pauseRollout sets or clears spec.paused.
func pauseRollout(ctx context.Context, c client.Client, ns, name string, paused bool) (*v1alpha1.Rollout, error) {
	return updateRollout(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error { ro.Spec.Paused = paused; return nil })
}

// rollbackRollout sets spec.release back to `to` (default: the previous release) with the
// reason recorded for this rollback; it returns the releases it goes from and to.
func rollbackRollout(ctx context.Context, c client.Client, ns, name, to, reason string) (ro *v1alpha1.Rollout, from, target string, err error) {
	ro, err = updateRollout(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
		from, target = ro.Spec.Release, to
		if target == "" {
			target = previousRelease(ro)
		}
		if target == "" {
			return fmt.Errorf("rollout %s has no earlier release to roll back to; pass --to RELEASE", ro.Name)
		}
		if target == ro.Spec.Release {
			return fmt.Errorf("rollout %s already wants %s", ro.Name, target)
		}
		rel := &v1alpha1.OperatorRelease{}
		key := client.ObjectKey{Namespace: ro.Namespace, Name: target}
		if err := getHubObject(ctx, c, key, rel, "release", "kubectl get operatorreleases -n "+ro.Namespace); err != nil {
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
		ro.Annotations[v1alpha1.AnnotationRollbackReason] = fmt.Sprintf("%s (at %s)", why, time.Now().UTC().Format(time.RFC3339))
		return nil
	})
	return ro, from, target, err
}

// retryRollout asks once more for a failed release that was rolled back, or a failed
// rollback; it returns what is retried. prog is how the user runs rewind (for hints).
func retryRollout(ctx context.Context, c client.Client, ns, name, prog string) (*v1alpha1.Rollout, string, error) {
	var what string
	ro, err := updateRollout(ctx, c, ns, name, func(ro *v1alpha1.Rollout) error {
		stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionStalled)
		switch {
		case ro.Status.Phase == v1alpha1.RolloutFailed && stalled != nil && stalled.Reason == v1alpha1.ReasonRollbackFailed:
			what = fmt.Sprintf("the rollback to %s on the clusters whose restore failed", ro.Status.CurrentRelease)
		case ro.Status.FailedRelease != "":
			what = ro.Status.FailedRelease
		case ro.Status.Phase == v1alpha1.RolloutFailed:
			return fmt.Errorf("rollout %s failed while upgrading to %s: roll it back (%s rollback %s) or set a new spec.release; retry runs again only a failed release that was rolled back, or a rollback that failed", ro.Name, ro.Status.CurrentRelease, prog, ro.Name)
		default:
			return fmt.Errorf("rollout %s holds no failed release and has not failed: nothing to retry (phase %s)", ro.Name, dash(ro.Status.Phase))
		}
		if ro.Annotations == nil {
			ro.Annotations = map[string]string{}
		}
		ro.Annotations[v1alpha1.AnnotationRetry] = time.Now().UTC().Format(time.RFC3339Nano)
		return nil
	})
	return ro, what, err
}
