// Package artifact stores byte payloads content-addressed in the hub as chunked Secrets, each
// chunk under the 1 MiB object limit. A payload is named by the SHA-256 of its bytes and is
// never stored twice. Release manifests and (by default) snapshot payloads live here.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ChunkSize is the largest payload slice kept in one Secret (well under the 1 MiB limit on
	// an object, leaving room for metadata).
	ChunkSize = 768 << 10

	// LabelArtifact carries the (truncated) hex digest of the payload on every chunk.
	LabelArtifact = "rewind.dev/artifact"
	// LabelKind says what the payload is (e.g. "release-manifests").
	LabelKind = "rewind.dev/artifact-kind"
	// AnnotationDigest is the full digest of the whole payload.
	AnnotationDigest = "rewind.dev/digest"
	// AnnotationChunks is the number of chunks.
	AnnotationChunks = "rewind.dev/chunks"
	// AnnotationSize is the payload size in bytes.
	AnnotationSize = "rewind.dev/size"
	// AnnotationChunkDigest is the digest of this chunk's bytes.
	AnnotationChunkDigest = "rewind.dev/chunk-digest"

	dataKey = "chunk"
)

// Digest returns "sha256:<hex>" of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func hexOf(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("artifact digest %q is not sha256:<64 hex>", digest)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("artifact digest %q is not sha256:<64 hex>", digest)
	}
	return h, nil
}

// chunkName is the Secret name of chunk i of the payload with hex digest h.
func chunkName(h string, i int) string { return fmt.Sprintf("rewind-artifact-%s-%d", h[:40], i) }

// Ref says where a payload is.
type Ref struct {
	Namespace string
	Digest    string
	Chunks    int
	Size      int64
}

// String is a URL-like location for status fields.
func (r Ref) String() string {
	return fmt.Sprintf("secrets://%s/%s", r.Namespace, r.Digest)
}

// RefOf is where Put stores (or stored) payload in namespace.
func RefOf(namespace string, payload []byte) Ref {
	n := max((len(payload)+ChunkSize-1)/ChunkSize, 1)
	return Ref{Namespace: namespace, Digest: Digest(payload), Chunks: n, Size: int64(len(payload))}
}

// Put stores payload in namespace under its digest. If the payload is already stored (every
// chunk present with the right digest) nothing is written. kind labels the chunks. When
// writing fails midway, the chunks this call created are deleted again, so no partial payload
// is left behind (chunks that were there already are kept: they belong to a stored payload).
func Put(ctx context.Context, c client.Client, namespace, kind string, payload []byte) (ref Ref, err error) {
	var created []*corev1.Secret
	defer func() {
		if err != nil && len(created) > 0 {
			err = errors.Join(err, deleteChunks(ctx, c, created))
		}
	}()
	ref = RefOf(namespace, payload)
	digest, n := ref.Digest, ref.Chunks
	h, _ := hexOf(digest)
	for i := 0; i < n; i++ {
		lo, hi := i*ChunkSize, min((i+1)*ChunkSize, len(payload))
		part := payload[lo:hi]
		name := chunkName(h, i)
		existing := &corev1.Secret{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, existing)
		if err == nil {
			if existing.Annotations[AnnotationDigest] == digest && bytes.Equal(existing.Data[dataKey], part) {
				continue // stored already: never twice
			}
			return ref, fmt.Errorf("artifact chunk %s/%s exists with other content; delete it so it can be written again", namespace, name)
		}
		if !apierrors.IsNotFound(err) {
			return ref, fmt.Errorf("reading artifact chunk %s/%s: %w", namespace, name, err)
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: namespace,
				Labels: map[string]string{LabelArtifact: h[:63], LabelKind: kind, "app.kubernetes.io/managed-by": "rewind"},
				Annotations: map[string]string{
					AnnotationDigest: digest, AnnotationChunks: strconv.Itoa(n),
					AnnotationSize: strconv.Itoa(len(payload)), AnnotationChunkDigest: Digest(part),
				},
			},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptrTrue(),
			Data:      map[string][]byte{dataKey: part},
		}
		switch err := c.Create(ctx, s); {
		case err == nil:
			created = append(created, s)
		case !apierrors.IsAlreadyExists(err):
			return ref, fmt.Errorf("storing artifact chunk %s/%s: %w", namespace, name, err)
		}
	}
	return ref, nil
}

// deleteChunks deletes the chunks a failed Put created (also when ctx is done: the cleanup
// gets its own short deadline).
func deleteChunks(ctx context.Context, c client.Client, chunks []*corev1.Secret) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var errs []error
	for _, s := range chunks {
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("cleaning up artifact chunk %s/%s after the failed write: %w", s.Namespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Get reads the payload with digest from namespace and verifies it against the digest.
func Get(ctx context.Context, c client.Reader, namespace, digest string) ([]byte, error) {
	h, err := hexOf(digest)
	if err != nil {
		return nil, err
	}
	first := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: chunkName(h, 0)}, first); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("artifact %s is not stored in namespace %s", digest, namespace)
		}
		return nil, fmt.Errorf("reading artifact %s: %w", digest, err)
	}
	n, err := strconv.Atoi(first.Annotations[AnnotationChunks])
	if err != nil || n < 1 {
		return nil, fmt.Errorf("artifact %s: chunk 0 has no valid %s annotation", digest, AnnotationChunks)
	}
	size, _ := strconv.Atoi(first.Annotations[AnnotationSize])
	buf := make([]byte, 0, size)
	for i := 0; i < n; i++ {
		s := first
		if i > 0 {
			s = &corev1.Secret{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: chunkName(h, i)}, s); err != nil {
				return nil, fmt.Errorf("artifact %s: reading chunk %d of %d: %w", digest, i, n, err)
			}
		}
		part := s.Data[dataKey]
		if want := s.Annotations[AnnotationChunkDigest]; want != "" && Digest(part) != want {
			return nil, fmt.Errorf("artifact %s: chunk %d is corrupted (checksum mismatch)", digest, i)
		}
		buf = append(buf, part...)
	}
	if got := Digest(buf); got != digest {
		return nil, fmt.Errorf("artifact %s is corrupted or incomplete: its content hashes to %s", digest, got)
	}
	return buf, nil
}

func ptrTrue() *bool { b := true; return &b }
