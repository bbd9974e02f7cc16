package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// metadataSuffix ends the name of the object that holds a Snapshot's metadata next to its
// payload.
const metadataSuffix = ".snapshot.json"

// maxMetadataBytes bounds a metadata object read back (a Snapshot object is a few KiB).
const maxMetadataBytes = 1 << 20

// MetadataName is the name of the object next to payload name that holds its Snapshot's
// metadata (a Snapshot object as JSON: labels, annotations, spec and status).
func MetadataName(name string) string { return name + metadataSuffix }

// putMetadata writes snap's metadata next to its payload.
func putMetadata(ctx context.Context, store payload.Store, snap *v1alpha1.Snapshot) error {
	m := &v1alpha1.Snapshot{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Snapshot"},
		ObjectMeta: metav1.ObjectMeta{
			Name: snap.Name, Namespace: snap.Namespace, Labels: snap.Labels, Annotations: snap.Annotations,
			CreationTimestamp: snap.CreationTimestamp,
		},
		Spec:   snap.Spec,
		Status: snap.Status,
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, _, err = store.Put(ctx, MetadataName(snap.Name), bytes.NewReader(b))
	return err
}

// ImportResult is what Import did with each snapshot found in a store.
type ImportResult struct {
	// Imported are the Snapshots created; Existing those already in the hub (left as they
	// are).
	Imported, Existing []string
	// Failed maps a payload name to why it could not be imported.
	Failed map[string]string
}

// Import rebuilds, in namespace, the Snapshot objects of every snapshot stored in store (a
// SnapshotStore other than hub Secrets) from the metadata written next to each payload:
// disaster recovery into a new hub. A Snapshot already in the hub is left as it is; a
// metadata object whose payload is missing is reported, not imported. The imported
// Snapshots record store.Name as their store, and keep the key they were written with (which
// the new hub must reach: a KMS key, or the same key Secret).
func (h *Hub) Import(ctx context.Context, store *snapstore.Store, namespace string) (*ImportResult, error) {
	ps, err := store.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer closeStore(ps)
	lister, ok := ps.(payload.Lister)
	if !ok {
		return nil, fmt.Errorf("snapshot store %s (%s) cannot list its objects: import works from object storage or a folder, not from hub Secrets", store.Name, store.URL)
	}
	names, err := lister.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", store.Name, err)
	}
	sort.Strings(names)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	res := &ImportResult{Failed: map[string]string{}}
	for _, n := range names {
		if !strings.HasSuffix(n, metadataSuffix) {
			continue
		}
		name := strings.TrimSuffix(n, metadataSuffix)
		if !have[name] {
			res.Failed[name] = "its metadata is in the store but its payload is not"
			continue
		}
		created, err := h.importOne(ctx, ps, store, namespace, n)
		switch {
		case err != nil:
			res.Failed[name] = err.Error()
		case created:
			res.Imported = append(res.Imported, name)
		default:
			res.Existing = append(res.Existing, name)
		}
	}
	return res, nil
}

func (h *Hub) importOne(ctx context.Context, ps payload.Store, store *snapstore.Store, namespace, metaName string) (bool, error) {
	rc, err := ps.Get(ctx, metaName)
	if err != nil {
		return false, err
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxMetadataBytes))
	rc.Close()
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", metaName, err)
	}
	var m v1alpha1.Snapshot
	if err := json.Unmarshal(b, &m); err != nil {
		return false, fmt.Errorf("%s is not a Snapshot's metadata: %w", metaName, err)
	}
	name := strings.TrimSuffix(metaName, metadataSuffix)
	if m.Name != name || m.Status.Checksum == "" {
		return false, fmt.Errorf("%s describes snapshot %q with checksum %q, want snapshot %q with a checksum", metaName, m.Name, m.Status.Checksum, name)
	}
	snap := &v1alpha1.Snapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: m.Labels, Annotations: m.Annotations},
		Spec:       m.Spec,
	}
	if err := h.Client.Create(ctx, snap); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("creating Snapshot %s/%s: %w", namespace, name, err)
	}
	ph := patch.NewHelper(snap, h.Client)
	snap.Status = m.Status
	snap.Status.Store = store.Name
	snap.Status.Location = store.URL + "#" + name
	if err := ph.Patch(ctx, snap); err != nil {
		// Not Ready without its status: removed so a second import tries again.
		return false, errors.Join(fmt.Errorf("recording the status of Snapshot %s/%s: %w", namespace, name, err), h.Client.Delete(ctx, snap))
	}
	return true, nil
}
