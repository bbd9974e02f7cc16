package target

import (
	"context"
	"time"

	"github.com/rewind-dev/rewind/internal/apply"
)

// applyStages server-side-applies the objects of the target release's stages.
type applyStages []apply.Stage

func (s applyStages) run(ctx context.Context, x *execution) (time.Duration, error) {
	_, objs, err := x.to(ctx)
	if err != nil {
		return 0, err
	}
	_, err = apply.Objects(ctx, x.cl, objs, apply.Options{Namespace: x.t.Spec.InstallNamespace, Stages: s})
	return 0, err
}
