package cli

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/rolloutaction"
)

// The changes a person asks for on a Rollout: the commands (rollout approve, pause, resume,
// rollback, retry) and the dashboard's actions run the same functions, in
// internal/rolloutaction. These wrappers only turn the hub's errors into advice.

// approveRollout is `rollout approve`: the clusters inconclusive metrics hold, else the wave.
func approveRollout(ctx context.Context, c client.Client, ns, name, wave string) (rolloutaction.Approval, error) {
	a, err := rolloutaction.Approve(ctx, c, ns, name, wave)
	return a, hubError(err)
}

// pauseRollout sets or clears spec.paused.
func pauseRollout(ctx context.Context, c client.Client, ns, name string, paused bool) (*v1alpha1.Rollout, error) {
	ro, err := rolloutaction.Pause(ctx, c, ns, name, paused)
	return ro, hubError(err)
}

// rollbackRollout sets spec.release back to `to` (default: the previous release).
func rollbackRollout(ctx context.Context, c client.Client, ns, name, to, reason string) (*v1alpha1.Rollout, string, string, error) {
	ro, from, target, err := rolloutaction.Rollback(ctx, c, ns, name, to, reason)
	return ro, from, target, hubError(err)
}

// retryRollout asks once more for a failed release or a failed rollback.
func retryRollout(ctx context.Context, c client.Client, ns, name, prog string) (*v1alpha1.Rollout, string, error) {
	ro, what, err := rolloutaction.Retry(ctx, c, ns, name, prog)
	return ro, what, hubError(err)
}

// updateRollout reads, changes and writes a Rollout's spec, retrying on conflicts.
func updateRollout(ctx context.Context, c client.Client, ns, name string, mut func(*v1alpha1.Rollout) error) (*v1alpha1.Rollout, error) {
	ro, err := rolloutaction.Update(ctx, c, ns, name, mut)
	return ro, hubError(err)
}

// previousRelease is the newest earlier release that succeeded.
func previousRelease(ro *v1alpha1.Rollout) string { return rolloutaction.PreviousRelease(ro) }
