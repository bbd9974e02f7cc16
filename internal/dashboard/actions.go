package dashboard

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/rolloutaction"
)

// ClientActions are the dashboard's buttons run with client c through the code of the
// commands of the same names (internal/rolloutaction): approve is `rewind rollout approve`
// (the clusters that inconclusive metrics hold, else the wave waiting now), pause and resume
// `rewind rollout pause|resume`, rollback `rewind rollback`, retry `rewind retry`. prog is how
// the user runs rewind (for hints in messages).
func ClientActions(c client.Client, prog string) Actions {
	return &clientActions{c: c, prog: prog}
}

type clientActions struct {
	c    client.Client
	prog string
}

func (a *clientActions) Approve(ctx context.Context, ns, name string) (string, error) {
	ap, err := rolloutaction.Approve(ctx, a.c, ns, name, "")
	if err != nil {
		return "", err
	}
	return strings.Join(ap.Messages(), "\n"), nil
}

func (a *clientActions) Pause(ctx context.Context, ns, name string, paused bool) (string, error) {
	if _, err := rolloutaction.Pause(ctx, a.c, ns, name, paused); err != nil {
		return "", err
	}
	if paused {
		return "rollout/" + name + " paused", nil
	}
	return "rollout/" + name + " resumed", nil
}

func (a *clientActions) Rollback(ctx context.Context, ns, name, reason string) (string, error) {
	_, from, to, err := rolloutaction.Rollback(ctx, a.c, ns, name, "", reason)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rollout/%s: rolling back from %s to %s", name, from, to), nil
}

func (a *clientActions) Retry(ctx context.Context, ns, name string) (string, error) {
	_, what, err := rolloutaction.Retry(ctx, a.c, ns, name, a.prog)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("rollout/%s: retrying %s", name, what), nil
}
