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
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// storeUnavailable makes the target wait for its snapshot store.
func storeUnavailable(err error) error {
	return &waitError{reason: v1alpha1.ReasonSnapshotStoreUnavailable, err: err}
}

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
			return 0, storeUnavailable(fmt.Errorf("%w: no cluster changes without its snapshot; the cluster goes on once the store is Ready", err))
		case apierrors.IsNotFound(err):
			return 0, storeUnavailable(fmt.Errorf("snapshot store %s (spec.snapshotStore) does not exist: create it, or name another; no cluster changes without its snapshot", name))
		case err != nil:
			return 0, err // the hub did not answer: a fault, tried again
		}
		if store, err = x.resolveStore(ctx, hub, st); err != nil {
			return 0, storeUnavailable(fmt.Errorf("snapshot store %s: %w", name, err)) // a Secret or the KMS may be back
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
		Name: t.Spec.Snapshot, Namespace: t.Namespace, Cluster: t.Spec.Cluster, Rollout: x.rolloutNamespace() + "/" + t.Spec.Rollout,
		Reason:    fmt.Sprintf("before rollout %s/%s installs %s", x.rolloutNamespace(), t.Spec.Rollout, t.Spec.ToRelease),
		Retention: int(t.Spec.SnapshotRetention), Capture: opts, Store: store,
		Labels: map[string]string{v1alpha1.LabelRollout: t.Spec.Rollout, v1alpha1.LabelRevision: strconv.Itoa(int(t.Spec.Revision))},
	})
	var se *snapshot.StoreError
	if errors.As(err, &se) {
		return 0, storeUnavailable(fmt.Errorf("%w: no cluster changes without its snapshot; the cluster goes on once the store takes it", err))
	}
	if err != nil {
		return 0, err
	}
	t.Status.Snapshot = snap.Name
	metrics.SnapshotBytes.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster).Set(float64(snap.Status.Bytes))
	return 0, nil
}

// resolveStore opens a SnapshotStore for the snapshot step. In a pull member's agent, a
// store without keyRef (the hub's default key, which no agent may read) wraps with the
// member's own key in its hub namespace, the key its snapshots in hub Secrets use; restores
// open it so too (snapshot.Hub.KeyNamespace).
func (x *execution) resolveStore(ctx context.Context, hub *snapshot.Hub, st *v1alpha1.SnapshotStore) (*snapstore.Store, error) {
	if x.r.Local == "" || st.Spec.KeyRef != nil {
		return snapstore.FromObject(ctx, hub.Client, st)
	}
	store, err := snapstore.StoreOnly(ctx, hub.Client, st)
	if err != nil {
		return nil, err
	}
	if store.KEK, err = hub.DefaultKey(ctx); err != nil {
		return nil, &snapstore.KeyError{Key: "pull member " + x.t.Spec.Cluster + "'s own key (Secret " + hub.KeyNamespace + "/" + payload.HubKeySecretName + ")", Err: err}
	}
	return store, nil
}
