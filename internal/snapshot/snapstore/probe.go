package snapstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
)

// ProbePrefix starts the name of the small objects a probe writes (and deletes).
const ProbePrefix = "rewind-probe-"

// NewProbeName is a name for a probe's object: ProbePrefix and random hex.
func NewProbeName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail
	return ProbePrefix + hex.EncodeToString(b[:])
}

// ProbeStore writes a small object into the store, reads it back, compares it and deletes
// it. The error says which of these failed; Reason classifies it.
func ProbeStore(ctx context.Context, s *Store) error { return ProbeStoreNamed(ctx, s, NewProbeName()) }

// ProbeStoreNamed is ProbeStore with the object's name given (NewProbeName): a probe tried again
// after a fault writes the same object, and leaves at most that one behind.
func ProbeStoreNamed(ctx context.Context, s *Store, name string) error {
	ps, err := s.Open(ctx)
	if err != nil {
		return err
	}
	if c, ok := ps.(io.Closer); ok {
		defer c.Close()
	}
	data := make([]byte, 256)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	if _, _, err := ps.Put(ctx, name, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("writing the probe object %s: %w", name, err)
	}
	rc, err := ps.Get(ctx, name)
	if err != nil {
		return fmt.Errorf("reading back the probe object %s: %w", name, err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("reading back the probe object %s: %w", name, err)
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("the probe object %s read back differs from what was written (%d bytes, wrote %d)", name, len(got), len(data))
	}
	if err := ps.Delete(ctx, name); err != nil {
		return fmt.Errorf("deleting the probe object %s: %w", name, err)
	}
	return nil
}

// ProbeKey wraps a random data key with kek and unwraps it again.
func ProbeKey(ctx context.Context, kek payload.KeyWrapper) error {
	dek := make([]byte, 32)
	if _, err := rand.Read(dek); err != nil {
		return err
	}
	w, err := kek.Wrap(ctx, dek)
	if err != nil {
		return fmt.Errorf("wrapping a data key: %w", err)
	}
	got, err := kek.Unwrap(ctx, w)
	if err != nil {
		return fmt.Errorf("unwrapping a data key: %w", err)
	}
	if !bytes.Equal(got, dek) {
		return errors.New("a data key unwrapped differs from the one wrapped")
	}
	return nil
}

// Reason classifies a store error into a SnapshotStore condition reason, from the error's
// type and the service's error code (never its text).
func Reason(err error) string {
	var ce *CredentialsError
	if errors.As(err, &ce) {
		return v1alpha1.ReasonCredentialsNotFound
	}
	var ke *KeyError
	if errors.As(err, &ke) {
		return v1alpha1.ReasonKeyUnavailable
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchBucket":
			return v1alpha1.ReasonBucketNotFound
		case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled", "InvalidToken", "ExpiredToken":
			return v1alpha1.ReasonAccessDenied
		}
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusNotFound:
			return v1alpha1.ReasonBucketNotFound
		case http.StatusForbidden, http.StatusUnauthorized:
			return v1alpha1.ReasonAccessDenied
		}
	}
	var aze *azcore.ResponseError
	if errors.As(err, &aze) {
		switch {
		case aze.ErrorCode == "ContainerNotFound":
			return v1alpha1.ReasonBucketNotFound
		case aze.StatusCode == http.StatusForbidden || aze.StatusCode == http.StatusUnauthorized:
			return v1alpha1.ReasonAccessDenied
		}
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusForbidden, http.StatusUnauthorized:
			return v1alpha1.ReasonAccessDenied
		}
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || errors.Is(err, fs.ErrPermission) {
		return v1alpha1.ReasonAccessDenied
	}
	if errors.Is(err, fs.ErrNotExist) {
		return v1alpha1.ReasonBucketNotFound
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ne) || errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) {
		return v1alpha1.ReasonStoreUnreachable
	}
	return v1alpha1.ReasonProbeFailed
}
