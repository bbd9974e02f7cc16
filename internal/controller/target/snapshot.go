package target

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/metrics"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// takeSnapshot captures the cluster's operator state under the release it runs, before
// anything changes. It is idempotent by name: a snapshot already complete is not taken again.
type takeSnapshot struct{}

func (takeSnapshot) run(ctx context.Context, x *execution) (time.Duration, error) {
	t := x.t
	// The store first: a cluster whose snapshot cannot be stored is not started.
	hub := x.hub()
	var store *snapstore.Store
	if name := t.Spec.SnapshotStore; name != "" {
		st, err := snapstore.GetReady(ctx, hub.Client, t.Namespace, name, false)
		var nre *snapstore.NotReadyError
		switch {
		case errors.As(err, &nre):
			return 0, terminalf("%v: the Rollout does not start a cluster whose snapshot cannot be stored", err)
		case apierrors.IsNotFound(err):
			return 0, terminalf("snapshot store %s (spec.snapshotStore): %v: the Rollout does not start a cluster whose snapshot cannot be stored", name, err)
		case err != nil:
			return 0, err // the hub did not answer: tried again with backoff
		}
		if store, err = snapstore.FromObject(ctx, hub.Client, st); err != nil {
			return 0, err // a Secret or the KMS may be back on the next attempt
		}
	}
	opts := snapshot.Options{Operator: t.Spec.Operator, Namespace: t.Spec.InstallNamespace}
	if t.Spec.FromRelease != "" {
		rel, objs, err := x.from(ctx)
		if err != nil {
			return 0, err
		}
		opts.Release, opts.Version, opts.Manifests = rel.Name, rel.Spec.Version, objs
	} else {
		// A first install: capture what the new release would touch (usually nothing yet).
		_, objs, err := x.to(ctx)
		if err != nil {
			return 0, err
		}
		opts.Manifests = objs
	}
	snap, err := hub.Take(ctx, x.cl, snapshot.Request{
		Name: t.Spec.Snapshot, Namespace: t.Namespace, Cluster: t.Spec.Cluster, Rollout: t.Namespace + "/" + t.Spec.Rollout,
		Reason:    fmt.Sprintf("before rollout %s/%s installs %s", t.Namespace, t.Spec.Rollout, t.Spec.ToRelease),
		Retention: int(t.Spec.SnapshotRetention), Capture: opts, Store: store,
		Labels: map[string]string{v1alpha1.LabelRollout: t.Spec.Rollout, v1alpha1.LabelRevision: strconv.Itoa(int(t.Spec.Revision))},
	})
	if err != nil {
		return 0, err
	}
	t.Status.Snapshot = snap.Name
	metrics.SnapshotBytes.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster).Set(float64(snap.Status.Bytes))
	return 0, nil
}
