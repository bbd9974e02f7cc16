package payload

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// SecretChunkSize is the most payload bytes one Secret holds (the API server's limit on
	// an object is 1 MiB; the rest is left for metadata).
	SecretChunkSize = 768 << 10

	// LabelPayload is on every chunk Secret: the payload name, or "sha256-<hex>" of it when
	// the name is not a valid label value.
	LabelPayload = "rewind.dev/snapshot-payload"
	// AnnotationPayloadName is the full payload name, on every chunk.
	AnnotationPayloadName = "rewind.dev/snapshot-payload-name"
	// AnnotationChunk is the chunk's index, on every chunk.
	AnnotationChunk = "rewind.dev/snapshot-payload-chunk"
	// AnnotationPut identifies the Put that wrote the chunk, on every chunk.
	AnnotationPut = "rewind.dev/snapshot-payload-put"
	// AnnotationChunks is the number of chunks, on chunk 0 only, which is written last: a
	// payload whose chunk 0 is missing is incomplete.
	AnnotationChunks = "rewind.dev/snapshot-payload-chunks"
	// AnnotationSize is the payload size in bytes, on chunk 0.
	AnnotationSize = "rewind.dev/snapshot-payload-size"
	// AnnotationDigest is "sha256:<hex>" of the stored bytes, on chunk 0.
	AnnotationDigest = "rewind.dev/snapshot-payload-digest"

	secretType   corev1.SecretType = "rewind.dev/snapshot-payload"
	chunkDataKey                   = "chunk"
	fieldOwner                     = "rewind-snapshot-payload"
	maxChunks                      = 999999
)

// ErrIncomplete reports a payload whose Put did not finish (it wraps ErrNotFound too).
var ErrIncomplete = errors.New("payload incomplete")

// SecretStore keeps payloads in a hub namespace as Secrets named rewind-snap-<name>-<i>, each
// holding at most SecretChunkSize bytes. Chunk 0 carries the chunk count, size and digest and
// is written last, so a Put that did not finish leaves a payload that Get reports as
// incomplete (ErrNotFound and ErrIncomplete) rather than a short one. Putting a name again
// replaces its payload; two Puts of one name must not run at the same time.
//
// Give it a client that talks to the API server, not a manager's cached client (which would
// cache every Secret's data in memory).
type SecretStore struct {
	c         client.Client
	namespace string
}

var _ Store = (*SecretStore)(nil)

// NewSecretStore keeps payloads in namespace through c.
func NewSecretStore(c client.Client, namespace string) *SecretStore {
	return &SecretStore{c: c, namespace: namespace}
}

// chunkSecretBase is the Secret name prefix of name's chunks: "rewind-snap-<name>", or, when
// that is no DNS subdomain with room for the index, a cleaned prefix of name and a hash of it.
func chunkSecretBase(name string) string {
	b := "rewind-snap-" + name
	if len(validation.IsDNS1123Subdomain(b+"-"+strconv.Itoa(maxChunks))) == 0 {
		return b
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:8])
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, name)
	if len(clean) > 180 {
		clean = clean[:180]
	}
	if clean = strings.Trim(clean, "-"); clean == "" {
		return "rewind-snap-" + h
	}
	return "rewind-snap-" + clean + "-" + h
}

func chunkSecretName(base string, i int) string { return base + "-" + strconv.Itoa(i) }

func payloadLabel(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "sha256-" + hex.EncodeToString(sum[:20])
}

func (s *SecretStore) location(name string) string {
	return "secrets://" + s.namespace + "/" + name
}

// Put implements Store. It holds at most two chunks in memory.
func (s *SecretStore) Put(ctx context.Context, name string, r io.Reader) (string, int64, error) {
	if err := validateName(name); err != nil {
		return "", 0, err
	}
	base := chunkSecretBase(name)
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", 0, err
	}
	putID := hex.EncodeToString(idb[:])

	// An earlier payload of this name becomes incomplete before any of its chunks change.
	if err := s.deleteSecret(ctx, chunkSecretName(base, 0)); err != nil {
		return "", 0, err
	}
	first := make([]byte, SecretChunkSize)
	n0, eof, err := readChunk(r, first)
	if err != nil {
		return "", 0, fmt.Errorf("payload %q: reading: %w", name, err)
	}
	first = first[:n0]
	h := sha256.New()
	h.Write(first)
	size, count := int64(n0), 1
	if !eof {
		buf := make([]byte, SecretChunkSize)
		for {
			n, eof, err := readChunk(r, buf)
			if err != nil {
				return "", 0, fmt.Errorf("payload %q: reading: %w", name, err)
			}
			if n > 0 {
				if count >= maxChunks {
					return "", 0, fmt.Errorf("payload %q: more than %d chunks", name, maxChunks)
				}
				if err := s.applyChunk(ctx, name, base, putID, count, buf[:n], nil); err != nil {
					return "", 0, err
				}
				h.Write(buf[:n])
				size += int64(n)
				count++
			}
			if eof {
				break
			}
		}
	}
	commit := map[string]string{
		AnnotationChunks: strconv.Itoa(count),
		AnnotationSize:   strconv.FormatInt(size, 10),
		AnnotationDigest: "sha256:" + hex.EncodeToString(h.Sum(nil)),
	}
	if err := s.applyChunk(ctx, name, base, putID, 0, first, commit); err != nil {
		return "", 0, err
	}
	// Chunks past the end, left by an earlier, longer payload of this name.
	stale, err := s.chunks(ctx, name)
	if err != nil {
		return "", 0, err
	}
	for _, m := range stale {
		if i, err := strconv.Atoi(m.Annotations[AnnotationChunk]); err != nil || i >= count {
			if err := s.deleteSecret(ctx, m.Name); err != nil {
				return "", 0, err
			}
		}
	}
	return s.location(name), size, nil
}

// readChunk fills buf from r as far as r goes; eof says r has ended.
func readChunk(r io.Reader, buf []byte) (int, bool, error) {
	n, err := io.ReadFull(r, buf)
	switch err {
	case nil:
		return n, false, nil
	case io.EOF, io.ErrUnexpectedEOF:
		return n, true, nil
	default:
		return n, false, err
	}
}

func (s *SecretStore) applyChunk(ctx context.Context, name, base, putID string, i int, data []byte, extra map[string]string) error {
	ann := map[string]string{
		AnnotationPayloadName: name,
		AnnotationChunk:       strconv.Itoa(i),
		AnnotationPut:         putID,
	}
	for k, v := range extra {
		ann[k] = v
	}
	sn := chunkSecretName(base, i)
	ac := corev1ac.Secret(sn, s.namespace).
		WithLabels(map[string]string{LabelPayload: payloadLabel(name), "app.kubernetes.io/managed-by": "rewind"}).
		WithAnnotations(ann).
		WithType(secretType).
		WithData(map[string][]byte{chunkDataKey: data})
	if err := s.c.Apply(ctx, ac, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("payload %q: writing chunk %d (Secret %s/%s): %w", name, i, s.namespace, sn, err)
	}
	return nil
}

// chunks lists the metadata of name's chunk Secrets.
func (s *SecretStore) chunks(ctx context.Context, name string) ([]metav1.PartialObjectMetadata, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := s.c.List(ctx, list, client.InNamespace(s.namespace), client.MatchingLabels{LabelPayload: payloadLabel(name)}); err != nil {
		return nil, fmt.Errorf("payload %q: listing chunks: %w", name, err)
	}
	out := list.Items[:0]
	for _, m := range list.Items {
		if m.Annotations[AnnotationPayloadName] == name {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *SecretStore) deleteSecret(ctx context.Context, secretName string) error {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: s.namespace}}
	if err := s.c.Delete(ctx, sec); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("payload store: deleting Secret %s/%s: %w", s.namespace, secretName, err)
	}
	return nil
}

// Get implements Store. It checks that every chunk is present before it returns, then streams
// the chunks one at a time (using ctx), verifying the size and digest chunk 0 records.
func (s *SecretStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	base := chunkSecretBase(name)
	first := &corev1.Secret{}
	err := s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: chunkSecretName(base, 0)}, first)
	if apierrors.IsNotFound(err) {
		rest, lerr := s.chunks(ctx, name)
		if lerr == nil && len(rest) > 0 {
			return nil, fmt.Errorf("payload %q in namespace %s: %w: %w: chunk 0 is missing, %d other chunks are stored (a Put did not finish)",
				name, s.namespace, ErrNotFound, ErrIncomplete, len(rest))
		}
		return nil, fmt.Errorf("payload %q in namespace %s: %w", name, s.namespace, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("payload %q: reading chunk 0: %w", name, err)
	}
	if got := first.Annotations[AnnotationPayloadName]; got != name {
		return nil, fmt.Errorf("payload %q: Secret %s/%s holds payload %q: %w", name, s.namespace, first.Name, got, ErrNotFound)
	}
	count, err1 := strconv.Atoi(first.Annotations[AnnotationChunks])
	size, err2 := strconv.ParseInt(first.Annotations[AnnotationSize], 10, 64)
	digest, putID := first.Annotations[AnnotationDigest], first.Annotations[AnnotationPut]
	if err1 != nil || err2 != nil || count < 1 || count > maxChunks || size < 0 || digest == "" || putID == "" {
		return nil, fmt.Errorf("payload %q: %w: chunk 0 (Secret %s/%s) lacks valid chunk count, size, digest or put annotations",
			name, ErrCorrupted, s.namespace, first.Name)
	}
	if count > 1 {
		metas, err := s.chunks(ctx, name)
		if err != nil {
			return nil, err
		}
		have := make(map[string]bool, len(metas))
		for _, m := range metas {
			if m.Annotations[AnnotationPut] == putID {
				have[m.Annotations[AnnotationChunk]] = true
			}
		}
		for i := 1; i < count; i++ {
			if !have[strconv.Itoa(i)] {
				return nil, fmt.Errorf("payload %q: %w: chunk %d of %d (Secret %s/%s) is missing",
					name, ErrCorrupted, i, count, s.namespace, chunkSecretName(base, i))
			}
		}
	}
	r := &secretChunkReader{
		ctx: ctx, s: s, name: name, base: base, putID: putID,
		count: count, size: size, digest: digest, next: 1, h: sha256.New(),
	}
	if err := r.use(first, 0); err != nil {
		return nil, err
	}
	return r, nil
}

type secretChunkReader struct {
	ctx           context.Context
	s             *SecretStore
	name, base    string
	putID, digest string
	count, next   int
	size, read    int64
	cur           []byte
	h             hash.Hash
	err           error
	closed        bool
}

func (r *secretChunkReader) use(sec *corev1.Secret, i int) error {
	a := sec.Annotations
	if a[AnnotationPayloadName] != r.name || a[AnnotationChunk] != strconv.Itoa(i) || a[AnnotationPut] != r.putID {
		return fmt.Errorf("payload %q: %w: chunk %d (Secret %s/%s) belongs to another payload or Put",
			r.name, ErrCorrupted, i, sec.Namespace, sec.Name)
	}
	data := sec.Data[chunkDataKey]
	if r.read+int64(len(data)) > r.size || (i < r.count-1 && len(data) == 0) {
		return fmt.Errorf("payload %q: %w: chunk %d has %d bytes, more or fewer than the recorded size %d allows",
			r.name, ErrCorrupted, i, len(data), r.size)
	}
	r.h.Write(data)
	r.read += int64(len(data))
	r.cur = data
	return nil
}

func (r *secretChunkReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.err = r.advance()
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// advance loads the next chunk, or at the end checks the size and digest and returns io.EOF.
func (r *secretChunkReader) advance() error {
	if r.closed {
		return errors.New("payload: read after Close")
	}
	if r.next == r.count {
		if r.read != r.size {
			return fmt.Errorf("payload %q: %w: %d bytes stored, %d recorded", r.name, ErrCorrupted, r.read, r.size)
		}
		if got := "sha256:" + hex.EncodeToString(r.h.Sum(nil)); got != r.digest {
			return fmt.Errorf("payload %q: %w: stored bytes do not match the recorded digest", r.name, ErrCorrupted)
		}
		return io.EOF
	}
	i := r.next
	sec := &corev1.Secret{}
	sn := chunkSecretName(r.base, i)
	if err := r.s.c.Get(r.ctx, client.ObjectKey{Namespace: r.s.namespace, Name: sn}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("payload %q: %w: chunk %d of %d (Secret %s/%s) is missing", r.name, ErrCorrupted, i, r.count, r.s.namespace, sn)
		}
		return fmt.Errorf("payload %q: reading chunk %d: %w", r.name, i, err)
	}
	r.next++
	return r.use(sec, i)
}

func (r *secretChunkReader) Close() error {
	r.closed = true
	r.cur = nil
	return nil
}

// Delete implements Store: chunk 0 first (the payload is then incomplete), then the others.
func (s *SecretStore) Delete(ctx context.Context, name string) error {
	if err := validateName(name); err != nil {
		return err
	}
	if err := s.deleteSecret(ctx, chunkSecretName(chunkSecretBase(name), 0)); err != nil {
		return err
	}
	metas, err := s.chunks(ctx, name)
	if err != nil {
		return err
	}
	for _, m := range metas {
		if err := s.deleteSecret(ctx, m.Name); err != nil {
			return err
		}
	}
	return nil
}
