package restore

import (
	"context"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// resumeStep restores the operator Deployments and webhooks the quiesce step took over, from the
// snapshot. Those the snapshot lacks stay quiesced (a rollout applies the old release's
// manifests next).
type resumeStep struct{}

func (resumeStep) run(ctx context.Context, r *restorer) error {
	var entries []*entry
	for _, e := range r.entries {
		if e.section == snapshot.SectionAssociated && r.held[e.key()] {
			entries = append(entries, e)
		}
	}
	return r.restoreEntries(ctx, entries)
}
