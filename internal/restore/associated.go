package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// associatedStep fully replaces the associated resources (operator Deployments and
// webhooks wait for the Resume step).
type associatedStep struct{}

func (associatedStep) run(ctx context.Context, r *restorer) error {
	if err := r.ensureUIDs(ctx); err != nil {
		return err
	}
	return r.restoreSection(ctx, snapshot.SectionAssociated)
}

// ensureUIDs fills the snapshot-to-live UID map for CRs when the CR step ran in an earlier
// (interrupted) run; when it ran in this one, the map is complete already. Only names and
// UIDs are read: metadata-only lists, not held. A kind that is not served leaves the owners
// of its CRs to be looked up by name (desiredFrom); any other failed read is returned.
func (r *restorer) ensureUIDs(ctx context.Context) error {
	if r.crUIDsKnown {
		return nil
	}
	for gk, gvr := range r.crdGVR {
		snapUIDs := map[string][]types.UID{}
		for _, e := range r.entries {
			if e.section == snapshot.SectionCR && e.gvk.GroupKind() == gk {
				snapUIDs[e.nsName()] = append(snapUIDs[e.nsName()], e.uid)
			}
		}
		if len(snapUIDs) == 0 {
			continue
		}
		_, err := r.eachMeta(ctx, gvr, func(m *metav1.PartialObjectMetadata) error {
			for _, uid := range snapUIDs[m.Namespace+"/"+m.Name] {
				r.setUID(uid, m.UID)
			}
			return nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reading the UIDs of the live %s: %w", gk, err)
		}
	}
	return nil
}
