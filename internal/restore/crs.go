package restore

import (
	"context"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// crsStep fully replaces every custom resource from the snapshot.
type crsStep struct{}

func (crsStep) run(ctx context.Context, r *restorer) error {
	if err := r.restoreSection(ctx, snapshot.SectionCR); err != nil {
		return err
	}
	r.crUIDsKnown = true
	return nil
}
