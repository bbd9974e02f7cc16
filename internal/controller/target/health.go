package target

import (
	"context"
	"time"

	"github.com/rewind-dev/rewind/internal/health"
	"github.com/rewind-dev/rewind/internal/release"
)

// healthGate waits until every object gate passes on the cluster, up to the gates' timeout,
// then runs the metric analyses (metrics.go), which have their own schedule (count,
// interval, initialDelay) and limits.
type healthGate struct{}

func (healthGate) run(ctx context.Context, x *execution) (time.Duration, error) {
	res, err := x.checkHealth(ctx)
	if err != nil {
		return 0, err
	}
	if res.Healthy() {
		return x.analyze(ctx)
	}
	timeout := 5 * time.Minute
	if t := x.t.Spec.HealthGates.Timeout; t != nil {
		timeout = t.Duration
	}
	st := &x.t.Status
	st.Message = "waiting for health: " + res.Summary()
	if st.StepStartedAt != nil && x.r.now().Sub(st.StepStartedAt.Time) > timeout {
		return 0, terminalf("health gate failed after %s: %s", timeout, res.Summary())
	}
	return x.r.gatePoll(), nil
}

// checkHealth evaluates the gates once.
func (x *execution) checkHealth(ctx context.Context) (health.Result, error) {
	rel, objs, err := x.to(ctx)
	if err != nil {
		return health.Result{}, err
	}
	g := x.t.Spec.HealthGates
	return health.Check(ctx, x.cl, health.Target{
		Applied: objs, Namespace: x.t.Spec.InstallNamespace, OperatorImage: release.OperatorImageIn(objs, rel.Spec.Image), CRDs: rel.Status.CRDs,
		SkipCustomResources: g.SkipCustomResources, CEL: g.CEL,
	})
}
