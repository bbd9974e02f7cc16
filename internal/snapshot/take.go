package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// Labels on Snapshot objects.
const (
	LabelCluster  = "rewind.dev/cluster"
	LabelOperator = "rewind.dev/operator"
	// KeyNamespace holds the hub Secret with the default key-encryption key.
	KeyNamespace = "rewind-system"
	// DefaultRetention is how many snapshots are kept per cluster and operator.
	DefaultRetention = 10
)

// Request says what to take.
type Request struct {
	// Name of the Snapshot; empty generates one. Taking an existing, complete snapshot again
	// returns it unchanged (so a resumed rollout never captures twice).
	Name string
	// Namespace of the Snapshot in the hub.
	Namespace string
	// Cluster is the MemberCluster name.
	Cluster string
	// Reason and Rollout are recorded on the Snapshot.
	Reason, Rollout string
	// StoreURL is where the payload goes (default secrets://<Namespace>), with the Hub's KEK.
	// Store, when set, overrides it.
	StoreURL string
	// Store is a resolved SnapshotStore (snapstore.FromObject): the payload goes to it, wrapped
	// with its key, and, unless it is hub Secrets, a copy of the Snapshot's metadata is
	// written next to the payload (see MetadataName) so that a new hub can import it.
	Store *snapstore.Store
	// Retention keeps this many snapshots per cluster and operator (default 10; <0 disables).
	Retention int
	// Capture says what to capture.
	Capture Options
	// Labels are added to the Snapshot's (a rollout's snapshots carry its name and revision).
	Labels map[string]string
	// Annotations are set on the Snapshot (a scheduled snapshot's expiry).
	Annotations map[string]string
}

// Hub is what taking and reading snapshots needs of the hub.
type Hub struct {
	Client client.Client
	// KEK wraps data keys; nil loads the default key from the hub Secret
	// rewind-system/rewind-snapshot-key (created on first use).
	KEK payload.KeyWrapper
	// OpenStore opens the payload store a URL names; nil means payload.OpenStore.
	OpenStore func(ctx context.Context, url string, hub client.Client) (payload.Store, error)
	// KeyNamespace holds the default key's Secret when KEK is nil ("": KeyNamespace). A pull
	// member's agent keeps its own key in its hub namespace: no agent reads another's.
	KeyNamespace string
}

func (h *Hub) openStore(ctx context.Context, url string) (payload.Store, error) {
	if h.OpenStore != nil {
		return h.OpenStore(ctx, url, h.Client)
	}
	return payload.OpenStore(ctx, url, h.Client)
}

func (h *Hub) kek(ctx context.Context) (payload.KeyWrapper, error) {
	if h.KEK != nil {
		return h.KEK, nil
	}
	ns := h.KeyNamespace
	if ns == "" {
		ns = KeyNamespace
	}
	k, err := payload.HubKEK(ctx, h.Client, ns)
	if err != nil {
		return nil, fmt.Errorf("loading the snapshot key: %w", err)
	}
	h.KEK = k
	return k, nil
}

// DefaultKey is the key payloads are wrapped with when no SnapshotStore names one: KEK, or
// the default key of KeyNamespace (created on first use).
func (h *Hub) DefaultKey(ctx context.Context) (payload.KeyWrapper, error) { return h.kek(ctx) }

// GenerateName returns a snapshot name for a cluster and operator at time t.
func GenerateName(cluster, operator string, t time.Time) string {
	n := fmt.Sprintf("%s-%s-%s", cluster, operator, t.UTC().Format("20060102-150405"))
	if len(n) > 253 {
		n = n[len(n)-253:]
	}
	return strings.Trim(n, "-.")
}

// StoreError says the snapshot store could not be opened or did not take the payload (the
// capture itself went well, or had not failed first).
type StoreError struct {
	// Store is the store's URL (no credentials).
	Store string
	Err   error
}

func (e *StoreError) Error() string { return fmt.Sprintf("snapshot store %s: %v", e.Store, e.Err) }
func (e *StoreError) Unwrap() error { return e.Err }

// Take captures the member of cfg, stores the encrypted payload and records a Snapshot in the
// hub with its metadata. It is idempotent by name.
func (h *Hub) Take(ctx context.Context, cl *member.Cluster, r Request) (*v1alpha1.Snapshot, error) {
	if r.Name == "" {
		r.Name = GenerateName(r.Cluster, r.Capture.Operator, time.Now())
	}
	if r.StoreURL == "" {
		r.StoreURL = "secrets://" + r.Namespace
	}
	snap := &v1alpha1.Snapshot{}
	err := h.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, snap)
	switch {
	case err == nil:
		if meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
			return snap, nil
		}
	case apierrors.IsNotFound(err):
		labels := map[string]string{LabelCluster: r.Cluster, LabelOperator: r.Capture.Operator}
		maps.Copy(labels, r.Labels)
		snap = &v1alpha1.Snapshot{
			ObjectMeta: metav1.ObjectMeta{
				Name: r.Name, Namespace: r.Namespace,
				Labels: labels, Annotations: r.Annotations,
			},
			Spec: v1alpha1.SnapshotSpec{
				Cluster: r.Cluster, Operator: r.Capture.Operator, Release: r.Capture.Release, Version: r.Capture.Version,
				Reason: r.Reason, Rollout: r.Rollout,
			},
		}
		// Sent again on a fault (a pull member's agent creates it across the WAN): a try whose
		// answer was lost left it there.
		err := fault.Retry(ctx, fault.CreateTries, func() error { return h.Client.Create(ctx, snap) })
		switch {
		case apierrors.IsAlreadyExists(err):
			// Made by a try whose answer was lost: read, for the status write's lock (its
			// resourceVersion), which the create that failed did not give.
			if err := fault.Retry(ctx, fault.CreateTries, func() error { return h.Client.Get(ctx, client.ObjectKeyFromObject(snap), snap) }); err != nil {
				return nil, fmt.Errorf("reading Snapshot %s/%s: %w", r.Namespace, r.Name, err)
			}
			if meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
				return snap, nil
			}
		case err != nil:
			return nil, fmt.Errorf("creating Snapshot %s/%s: %w", r.Namespace, r.Name, err)
		}
	default:
		return nil, err
	}
	// The Snapshot's status is written once the payload is stored, with the resourceVersion
	// read here: a label or a Verified condition written meanwhile is kept, a status another
	// writer recorded meanwhile is not overwritten (a conflict).
	// The take is the only writer of the Snapshot's status until it is Ready: a status found
	// as it writes it after a conflict is its own write, whose answer was lost.
	ph := patch.NewHelper(snap, h.Client, patch.RecognizeOwnWrites())

	var (
		kek   payload.KeyWrapper
		store payload.Store
	)
	if r.Store != nil {
		kek, r.StoreURL = r.Store.KEK, r.Store.URL
		store, err = r.Store.Open(ctx)
	} else {
		if kek, err = h.kek(ctx); err != nil {
			return nil, err
		}
		store, err = h.openStore(ctx, r.StoreURL)
	}
	if err != nil {
		return nil, &StoreError{Store: r.StoreURL, Err: err}
	}
	defer closeStore(store)
	pr, pw := io.Pipe()
	type outcome struct {
		res *Result
		w   *payload.Writer
		err error
	}
	// The capture writes into the pipe while the store reads from it; when one side fails,
	// the other fails after it, with an error that only says the pipe closed. What is
	// reported is the side that failed first: captureFailed is closed before the capture's
	// error reaches the store, and the capture is stopped only after the store returned.
	captureCtx, stopCapture := context.WithCancel(ctx)
	defer stopCapture()
	captureFailed := make(chan struct{})
	done := make(chan outcome, 1)
	started := time.Now()
	go func() {
		var out outcome
		out.w, out.err = payload.NewWriter(captureCtx, pw, kek)
		if out.err == nil {
			out.res, out.err = Capture(captureCtx, cl, r.Capture, out.w)
			if out.err == nil {
				out.err = out.w.Close()
			}
		}
		if out.err != nil {
			close(captureFailed)
		}
		pw.CloseWithError(out.err)
		done <- out
	}()
	_, stored, putErr := store.Put(ctx, r.Name, pr)
	captureFirst := false
	select {
	case <-captureFailed:
		captureFirst = true
	default:
	}
	if putErr != nil {
		stopCapture()
	}
	pr.CloseWithError(errors.New("the store stopped reading before the end of the payload"))
	out := <-done
	switch {
	case out.err != nil && (captureFirst || putErr == nil):
		return nil, fmt.Errorf("capturing %s: %w", r.Cluster, out.err)
	case putErr != nil:
		return nil, &StoreError{Store: r.StoreURL, Err: fmt.Errorf("storing snapshot %s: %w", r.Name, putErr)}
	}
	now := metav1.NewTime(out.res.CapturedAt)
	took := &metav1.Duration{Duration: time.Since(started)}
	snap.Status = v1alpha1.SnapshotStatus{
		Conditions:      snap.Status.Conditions,
		Location:        r.StoreURL + "#" + r.Name,
		Checksum:        out.w.Checksum(),
		Counts:          v1alpha1.ObjectCounts{CRDs: int32(out.res.Counts.CRDs), CustomResources: int32(out.res.Counts.CustomResources), Associated: int32(out.res.Counts.Associated)},
		Bytes:           out.w.PlaintextBytes(),
		StoredBytes:     stored,
		ClusterID:       out.res.Header.ClusterID,
		ServerVersion:   out.res.ServerVersion,
		CapturedAt:      &now,
		CaptureDuration: took,
		KeyID:           kek.ID(),
	}
	if r.Store != nil {
		snap.Status.Store = r.Store.Name
		snap.Status.KeyRef = r.Store.KeyRef.DeepCopy()
	}
	meta.SetStatusCondition(&snap.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored,
		Message: fmt.Sprintf("%d CRs and %d associated objects stored", out.res.Counts.CustomResources, out.res.Counts.Associated),
	})
	// The payload is complete in the store; its metadata goes next to it before the Snapshot
	// says Ready, so an imported hub finds every snapshot this hub has.
	if r.Store != nil && r.Store.Metadata {
		if err := putMetadata(ctx, store, snap); err != nil {
			return nil, &StoreError{Store: r.StoreURL, Err: fmt.Errorf("storing the metadata of snapshot %s: %w", r.Name, err)}
		}
	}
	if err := ph.Patch(ctx, snap); err != nil {
		return nil, fmt.Errorf("recording Snapshot %s/%s: %w", r.Namespace, r.Name, err)
	}
	if r.Retention >= 0 {
		keep := r.Retention
		if keep == 0 {
			keep = DefaultRetention
		}
		if _, err := h.Prune(ctx, r.Namespace, r.Cluster, r.Capture.Operator, keep); err != nil {
			return snap, fmt.Errorf("snapshot %s taken, but retention failed: %w", r.Name, err)
		}
	}
	return snap, nil
}

// storeOf splits a Snapshot location into the store URL and the payload name.
func storeOf(snap *v1alpha1.Snapshot) (string, string, error) {
	loc := snap.Status.Location
	i := strings.LastIndexByte(loc, '#')
	if i < 0 {
		return "", "", fmt.Errorf("snapshot %s has no payload location (was the capture completed?)", snap.Name)
	}
	return loc[:i], loc[i+1:], nil
}

// Open streams the plaintext payload of snap. The payload is decrypted and its checksum
// verified against both the payload's own trailer and the Snapshot's recorded checksum; a
// mismatch is returned as an error by Read at the end of the stream.
//
// A snapshot taken into a SnapshotStore is read from that store (resolved by name in the
// snapshot's namespace) with the key the snapshot records (status.keyRef), not the store's
// current key: a rotated key leaves older snapshots readable as long as their key is. A key
// that cannot be reached is an error naming it.
func (h *Hub) Open(ctx context.Context, snap *v1alpha1.Snapshot) (io.ReadCloser, error) {
	_, name, err := storeOf(snap)
	if err != nil {
		return nil, err
	}
	store, err := h.payloadStore(ctx, snap)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", snap.Name, err)
	}
	rc, err := store.Get(ctx, name)
	if err != nil {
		closeStore(store)
		return nil, fmt.Errorf("snapshot %s: %w", snap.Name, err)
	}
	closer := multiCloser{rc, storeCloser{store}}
	kek, err := h.snapshotKEK(ctx, snap)
	if err != nil {
		closer.Close()
		return nil, fmt.Errorf("snapshot %s: %w", snap.Name, err)
	}
	r, err := payload.NewReader(ctx, rc, kek)
	if err != nil {
		closer.Close()
		var se *payload.SourceError
		if !errors.Is(err, payload.ErrCorrupted) && !errors.Is(err, payload.ErrTruncated) && !errors.Is(err, payload.ErrWrongKey) && !errors.As(err, &se) && snap.Status.Store != "" {
			// The KMS refused or could not be reached.
			err = &snapstore.KeyError{Key: snapstore.KeyName(snap.Namespace, snap.Status.KeyRef), Err: err}
		}
		return nil, fmt.Errorf("snapshot %s: %w", snap.Name, err)
	}
	return &verifyingReader{r: r, closer: closer, want: snap.Status.Checksum, name: snap.Name}, nil
}

// payloadStore opens the store that holds snap's payload.
func (h *Hub) payloadStore(ctx context.Context, snap *v1alpha1.Snapshot) (payload.Store, error) {
	if snap.Status.Store != "" {
		st, err := snapstore.Get(ctx, h.Client, snap.Namespace, snap.Status.Store)
		if err != nil {
			return nil, err
		}
		rs, err := snapstore.StoreOnly(ctx, h.Client, st)
		if err != nil {
			return nil, err
		}
		return rs.Open(ctx)
	}
	url, _, err := storeOf(snap)
	if err != nil {
		return nil, err
	}
	return h.openStore(ctx, url)
}

// snapshotKEK opens the key snap's payload was wrapped with.
func (h *Hub) snapshotKEK(ctx context.Context, snap *v1alpha1.Snapshot) (payload.KeyWrapper, error) {
	if snap.Status.Store == "" || (snap.Status.KeyRef == nil && h.KEK != nil) {
		return h.kek(ctx)
	}
	if snap.Status.KeyRef == nil && h.KeyNamespace != "" {
		// A pull member's snapshot in a store without keyRef: wrapped with the member's own
		// key (Hub.KeyNamespace), not the hub's default one.
		k, err := h.kek(ctx)
		if err != nil {
			return nil, &snapstore.KeyError{Key: "Secret " + h.KeyNamespace + "/" + payload.HubKeySecretName, Err: err}
		}
		return k, nil
	}
	var creds *v1alpha1.LocalSecretReference
	if snap.Status.KeyRef != nil && snap.Status.KeyRef.KMS != "" {
		// A KMS key without credentials of its own uses the store's.
		if st, err := snapstore.Get(ctx, h.Client, snap.Namespace, snap.Status.Store); err == nil {
			creds = st.Spec.CredentialsSecretRef
		}
	}
	return snapstore.OpenKey(ctx, h.Client, snap.Namespace, snap.Status.KeyRef, creds)
}

func closeStore(s payload.Store) {
	if c, ok := s.(io.Closer); ok {
		_ = c.Close()
	}
}

type storeCloser struct{ s payload.Store }

func (c storeCloser) Close() error {
	closeStore(c.s)
	return nil
}

type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var errs []error
	for _, c := range m {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

type verifyingReader struct {
	r      *payload.Reader
	closer io.Closer
	want   string
	name   string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	if err == io.EOF && v.want != "" && v.r.Checksum() != v.want {
		return n, fmt.Errorf("snapshot %s: %w: checksum %s, the Snapshot records %s", v.name, payload.ErrCorrupted, v.r.Checksum(), v.want)
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.closer.Close() }

// onceCloser closes c on its first Close only.
type onceCloser struct {
	once sync.Once
	c    io.Closer
	err  error
}

func (o *onceCloser) Close() error {
	o.once.Do(func() { o.err = o.c.Close() })
	return o.err
}

// Load reads and verifies every entry of a snapshot (for diff and show).
func (h *Hub) Load(ctx context.Context, snap *v1alpha1.Snapshot) (Header, []Entry, error) {
	hdr, all, closer, err := h.Stream(ctx, snap)
	if err != nil {
		return Header{}, nil, err
	}
	defer closer.Close()
	var entries []Entry
	for e, err := range all {
		if err != nil {
			return Header{}, nil, err
		}
		entries = append(entries, e)
	}
	return hdr, entries, nil
}

// Stream opens a snapshot for reading entry by entry, so that a reader that keeps less than
// the decoded entries never holds them all: its header, and its entries decoded one at a time
// as they are read. Once the last entry is read, the payload's checksum is verified (a
// mismatch is the iterator's last error) and the payload is closed. The entries can be read
// once. Close the closer when done (again after a full read is harmless).
func (h *Hub) Stream(ctx context.Context, snap *v1alpha1.Snapshot) (Header, iter.Seq2[Entry, error], io.Closer, error) {
	return stream(ctx, h, snap, (*Decoder).Next)
}

// StreamRaw is Stream with the entries' objects left as their JSON (a restore keeps them so
// and decodes an object when it compares or writes it).
func (h *Hub) StreamRaw(ctx context.Context, snap *v1alpha1.Snapshot) (Header, iter.Seq2[RawEntry, error], io.Closer, error) {
	return stream(ctx, h, snap, (*Decoder).NextRaw)
}

func stream[E any](ctx context.Context, h *Hub, snap *v1alpha1.Snapshot, next func(*Decoder) (E, error)) (Header, iter.Seq2[E, error], io.Closer, error) {
	rc, err := h.Open(ctx, snap)
	if err != nil {
		return Header{}, nil, nil, err
	}
	d, err := NewDecoder(rc)
	if err != nil {
		rc.Close()
		return Header{}, nil, nil, err
	}
	closer := &onceCloser{c: rc}
	all := func(yield func(E, error) bool) {
		for e, err := range entries(d, next) {
			if !yield(e, err) || err != nil {
				return
			}
		}
		// The decoder stops at the last line; drain so the checksum is verified. The payload
		// (a store's connection) is not held for as long as its reader runs.
		_, err := io.Copy(io.Discard, rc)
		closer.Close()
		if err != nil {
			var zero E
			yield(zero, err)
		}
	}
	return d.Header(), all, closer, nil
}

// Verify decrypts the whole payload of snap, checks it against the recorded checksum and
// records the outcome on the Snapshot as its Verified condition: True (ChecksumMatched), or
// False with the problem (ChecksumMismatch: the payload is corrupted or truncated;
// PayloadUnavailable: it could not be read). A check that ctx cut short records nothing.
func (h *Hub) Verify(ctx context.Context, snap *v1alpha1.Snapshot) error {
	err := h.verify(ctx, snap)
	if ctx.Err() != nil {
		return err
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionVerified, Status: metav1.ConditionFalse, ObservedGeneration: snap.Generation}
	switch {
	case err == nil:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonChecksumMatched
		cond.Message = fmt.Sprintf("the payload decrypts to %d bytes with checksum %s", snap.Status.Bytes, snap.Status.Checksum)
	case errors.Is(err, payload.ErrCorrupted) || errors.Is(err, payload.ErrTruncated):
		cond.Reason, cond.Message = v1alpha1.ReasonChecksumMismatch, err.Error()
	default:
		cond.Reason, cond.Message = v1alpha1.ReasonPayloadUnavailable, err.Error()
	}
	if rerr := h.setCondition(ctx, snap, cond); rerr != nil {
		return errors.Join(err, fmt.Errorf("recording the verification on Snapshot %s/%s: %w", snap.Namespace, snap.Name, rerr))
	}
	return err
}

func (h *Hub) verify(ctx context.Context, snap *v1alpha1.Snapshot) error {
	rc, err := h.Open(ctx, snap)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}

// setCondition sets cond in the status of snap (updated in place), with the resourceVersion
// as a precondition so no other condition is lost: after a conflict, cond is set again over a
// fresh copy's conditions (see package patch).
func (h *Hub) setCondition(ctx context.Context, snap *v1alpha1.Snapshot, cond metav1.Condition) error {
	ph := patch.NewHelper(snap, h.Client)
	meta.SetStatusCondition(&snap.Status.Conditions, cond)
	return ph.Patch(ctx, snap)
}

// Prune deletes the oldest snapshots of a cluster and operator beyond keep, except those a
// Rollout references. It returns the names deleted.
func (h *Hub) Prune(ctx context.Context, namespace, cluster, operator string, keep int) ([]string, error) {
	return h.PruneMatching(ctx, namespace, client.MatchingLabels{LabelCluster: cluster, LabelOperator: operator}, keep)
}

// PruneMatching deletes the oldest snapshots of namespace with the labels beyond keep,
// except those a Rollout references. It returns the names deleted.
func (h *Hub) PruneMatching(ctx context.Context, namespace string, labels client.MatchingLabels, keep int) ([]string, error) {
	var list v1alpha1.SnapshotList
	if err := h.Client.List(ctx, &list, client.InNamespace(namespace), labels); err != nil {
		return nil, err
	}
	if len(list.Items) <= keep {
		return nil, nil
	}
	referenced, err := h.Referenced(ctx, namespace)
	if err != nil {
		return nil, err
	}
	items := list.Items
	// Newest first; names (which embed the capture time when generated) break ties within a second.
	sort.Slice(items, func(i, j int) bool {
		ti, tj := capturedAt(&items[i]), capturedAt(&items[j])
		if !ti.Equal(tj) {
			return ti.After(tj)
		}
		return items[i].Name > items[j].Name
	})
	var deleted []string
	for i := keep; i < len(items); i++ {
		s := &items[i]
		if referenced(s) {
			continue
		}
		if err := h.Delete(ctx, s); err != nil {
			return deleted, err
		}
		deleted = append(deleted, s.Name)
	}
	return deleted, nil
}

func capturedAt(s *v1alpha1.Snapshot) time.Time {
	if s.Status.CapturedAt != nil {
		return s.Status.CapturedAt.Time
	}
	return s.CreationTimestamp.Time
}

// Referenced says which snapshots of namespace Rollouts still point to: those a RolloutTarget
// took or restores, and those of the revisions in a Rollout's history (labelled with the
// rollout and the revision). Such a snapshot is never deleted by retention or expiry.
func (h *Hub) Referenced(ctx context.Context, namespace string) (func(*v1alpha1.Snapshot) bool, error) {
	var rollouts v1alpha1.RolloutList
	if err := h.Client.List(ctx, &rollouts, client.InNamespace(namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return func(*v1alpha1.Snapshot) bool { return false }, nil
		}
		return nil, err
	}
	revisions := map[string]bool{} // rollout/revision
	for _, ro := range rollouts.Items {
		for _, rev := range ro.Status.History {
			revisions[ro.Name+"/"+strconv.Itoa(int(rev.Revision))] = true
		}
	}
	var targets v1alpha1.RolloutTargetList
	if err := h.Client.List(ctx, &targets, client.InNamespace(namespace)); err != nil && !meta.IsNoMatchError(err) {
		return nil, err
	}
	names := map[string]bool{}
	for _, t := range targets.Items {
		names[t.Spec.Snapshot] = true
		names[t.Status.Snapshot] = true
	}
	return func(s *v1alpha1.Snapshot) bool {
		ro, rev := s.Labels[v1alpha1.LabelRollout], s.Labels[v1alpha1.LabelRevision]
		return names[s.Name] || (ro != "" && rev != "" && revisions[ro+"/"+rev])
	}, nil
}

// Expire deletes the snapshots of namespace with the labels whose expiry (the annotation
// rewind.dev/expires-at) is at or before now, except those a Rollout references. It returns
// the names deleted and the earliest expiry still to come (zero if none).
func (h *Hub) Expire(ctx context.Context, namespace string, labels client.MatchingLabels, now time.Time) ([]string, time.Time, error) {
	var list v1alpha1.SnapshotList
	if err := h.Client.List(ctx, &list, client.InNamespace(namespace), labels); err != nil {
		return nil, time.Time{}, err
	}
	var referenced func(*v1alpha1.Snapshot) bool
	var deleted []string
	var next time.Time
	for i := range list.Items {
		s := &list.Items[i]
		v, ok := s.Annotations[v1alpha1.AnnotationExpiresAt]
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339, v)
		if err != nil {
			continue // not ours to guess: kept
		}
		if at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		if referenced == nil {
			if referenced, err = h.Referenced(ctx, namespace); err != nil {
				return deleted, next, err
			}
		}
		if referenced(s) {
			continue
		}
		if err := h.Delete(ctx, s); err != nil {
			return deleted, next, err
		}
		deleted = append(deleted, s.Name)
	}
	return deleted, next, nil
}

// Delete removes a snapshot's payload and then its Snapshot object.
func (h *Hub) Delete(ctx context.Context, snap *v1alpha1.Snapshot) error {
	if _, name, err := storeOf(snap); err == nil {
		store, err := h.payloadStore(ctx, snap)
		if err != nil {
			return fmt.Errorf("deleting the payload of snapshot %s: %w", snap.Name, err)
		}
		defer closeStore(store)
		if err := store.Delete(ctx, name); err != nil {
			return fmt.Errorf("deleting the payload of snapshot %s: %w", snap.Name, err)
		}
		if snap.Status.Store != "" {
			if err := store.Delete(ctx, MetadataName(name)); err != nil {
				return fmt.Errorf("deleting the metadata of snapshot %s: %w", snap.Name, err)
			}
		}
	}
	if err := h.Client.Delete(ctx, snap); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
