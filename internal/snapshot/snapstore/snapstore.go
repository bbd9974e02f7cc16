// Package snapstore turns a SnapshotStore object into something snapshots can be written to
// and read from: the payload store it names (hub Secrets, an S3-compatible bucket, a folder),
// opened with the credentials of its Secret, and the key-encryption key its keyRef names.
package snapstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob/s3blob"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
)

// Keys of a credentials Secret.
const (
	// S3 (and awskms://).
	CredAccessKeyID     = "accessKeyID"
	CredSecretAccessKey = "secretAccessKey"
	CredSessionToken    = "sessionToken"
)

// DefaultKeyNamespace holds the hub's default key-encryption key Secret.
const DefaultKeyNamespace = "rewind-system"

// Store is a resolved SnapshotStore: where payloads go and the key new payloads are wrapped
// with.
type Store struct {
	// Name and Namespace of the SnapshotStore.
	Name, Namespace string
	// URL is the store's location (no credentials), recorded on Snapshots.
	URL string
	// KeyRef is the store's keyRef (nil: the hub's default key); KEK is that key, opened.
	KeyRef *v1alpha1.SnapshotKeyRef
	KEK    payload.KeyWrapper
	// Metadata says whether a copy of each Snapshot's metadata is written next to its payload
	// (every store but hub Secrets, whose Snapshots live in the same hub), so that a new hub
	// can import them.
	Metadata bool

	open func(ctx context.Context) (payload.Store, error)
}

// Open opens the payload store. Close it (io.Closer) when it is one.
func (s *Store) Open(ctx context.Context) (payload.Store, error) {
	st, err := s.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("snapshot store %s: %w", s.Name, err)
	}
	return st, nil
}

// CredentialsError reports a credentials Secret, or a key in it, that is missing.
type CredentialsError struct {
	Secret string
	Err    error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("credentials Secret %s: %v", e.Secret, e.Err)
}
func (e *CredentialsError) Unwrap() error { return e.Err }

// KeyError reports a key-encryption key that cannot be opened or used. Key names it (a KMS
// URL without parameters, a Secret, or the hub's default key).
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("key-encryption key %s cannot be reached: %v", e.Key, e.Err)
}
func (e *KeyError) Unwrap() error { return e.Err }

// NotReadyError says a SnapshotStore is not Ready (from its Ready condition).
type NotReadyError struct {
	Name, Namespace, Reason, Message string
}

func (e *NotReadyError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("snapshot store %s/%s has not been checked yet (no Ready condition)", e.Namespace, e.Name)
	}
	return fmt.Sprintf("snapshot store %s/%s is not Ready (%s): %s", e.Namespace, e.Name, e.Reason, e.Message)
}

// Get reads the SnapshotStore namespace/name.
func Get(ctx context.Context, c client.Reader, namespace, name string) (*v1alpha1.SnapshotStore, error) {
	st := &v1alpha1.SnapshotStore{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, st); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("snapshot store %q not found in namespace %s (list them with: kubectl get snapshotstores -n %s): %w", name, namespace, namespace, err)
		}
		return nil, fmt.Errorf("reading snapshot store %s/%s: %w", namespace, name, err)
	}
	return st, nil
}

// GetReady reads the SnapshotStore namespace/name and returns it when its Ready condition is
// True; otherwise the error is a *NotReadyError naming the condition's reason and message. A
// store with no Ready condition yet (the controller has not probed it) is refused too, unless
// acceptUnprobed (a CLI run against a hub without the controller, which will fail at the store
// itself if it is broken). Every user of a store checks it through here.
func GetReady(ctx context.Context, c client.Reader, namespace, name string, acceptUnprobed bool) (*v1alpha1.SnapshotStore, error) {
	st, err := Get(ctx, c, namespace, name)
	if err != nil {
		return nil, err
	}
	if err := CheckReady(st); err != nil {
		var nre *NotReadyError
		if !acceptUnprobed || !errors.As(err, &nre) || nre.Reason != "" {
			return nil, err
		}
	}
	return st, nil
}

// CheckReady returns a NotReadyError unless the store's Ready condition is True.
func CheckReady(st *v1alpha1.SnapshotStore) error {
	for _, c := range st.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			if c.Status == "True" {
				return nil
			}
			return &NotReadyError{Name: st.Name, Namespace: st.Namespace, Reason: c.Reason, Message: c.Message}
		}
	}
	return &NotReadyError{Name: st.Name, Namespace: st.Namespace}
}

// FromObject resolves a SnapshotStore: it reads its credentials Secret and opens its key. It
// writes nothing but, for the default key, the hub Secret that holds it on first use. The
// client must read Secrets from the API server.
func FromObject(ctx context.Context, c client.Client, st *v1alpha1.SnapshotStore) (*Store, error) {
	s, err := StoreOnly(ctx, c, st)
	if err != nil {
		return nil, err
	}
	kek, err := OpenKey(ctx, c, st.Namespace, st.Spec.KeyRef, st.Spec.CredentialsSecretRef)
	if err != nil {
		return nil, err
	}
	s.KEK = kek
	return s, nil
}

// StoreOnly resolves the payload store of a SnapshotStore without opening its key (to read
// or delete payloads that record their own key).
func StoreOnly(ctx context.Context, c client.Client, st *v1alpha1.SnapshotStore) (*Store, error) {
	s := &Store{Name: st.Name, Namespace: st.Namespace, KeyRef: st.Spec.KeyRef.DeepCopy()}
	u, open, err := opener(ctx, c, st)
	if err != nil {
		return nil, err
	}
	s.URL, s.open = u, open
	s.Metadata = provider(st) != v1alpha1.StoreProviderHubSecrets
	return s, nil
}

func provider(st *v1alpha1.SnapshotStore) string {
	if st.Spec.Provider == "" {
		return v1alpha1.StoreProviderHubSecrets
	}
	return st.Spec.Provider
}

// URLOf is the location of a store (no credentials), for status and Snapshots.
func URLOf(st *v1alpha1.SnapshotStore) string {
	sp := st.Spec
	withPrefix := func(scheme, host string) string {
		u := url.URL{Scheme: scheme, Host: host}
		if p := strings.Trim(sp.Prefix, "/"); p != "" {
			u.Path = "/" + p
		}
		q := url.Values{}
		if sp.Endpoint != "" {
			q.Set("endpoint", sp.Endpoint)
		}
		if sp.Region != "" {
			q.Set("region", sp.Region)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	switch provider(st) {
	case v1alpha1.StoreProviderS3:
		return withPrefix("s3", sp.Bucket)
	case v1alpha1.StoreProviderGCS:
		return withPrefix("gs", sp.Bucket)
	case v1alpha1.StoreProviderAzureBlob:
		return withPrefix("azblob", sp.Bucket)
	case v1alpha1.StoreProviderFolder:
		return (&url.URL{Scheme: "dir", Path: path.Join(sp.Path, sp.Prefix)}).String()
	default:
		return "secrets://" + st.Namespace
	}
}

func opener(ctx context.Context, c client.Client, st *v1alpha1.SnapshotStore) (string, func(context.Context) (payload.Store, error), error) {
	loc := URLOf(st)
	sp := st.Spec
	switch provider(st) {
	case v1alpha1.StoreProviderHubSecrets:
		return loc, func(context.Context) (payload.Store, error) { return payload.NewSecretStore(c, st.Namespace), nil }, nil
	case v1alpha1.StoreProviderFolder:
		if sp.Path == "" || !path.IsAbs(sp.Path) {
			return "", nil, fmt.Errorf("snapshot store %s/%s: spec.path must be an absolute folder for provider Folder", st.Namespace, st.Name)
		}
		dir := path.Join(sp.Path, sp.Prefix)
		return loc, func(context.Context) (payload.Store, error) { return payload.NewDirStore(dir) }, nil
	case v1alpha1.StoreProviderS3:
		if sp.Bucket == "" {
			return "", nil, fmt.Errorf("snapshot store %s/%s: spec.bucket is required for provider S3", st.Namespace, st.Name)
		}
		cfg, err := awsConfig(ctx, c, st.Namespace, sp.Region, sp.CredentialsSecretRef)
		if err != nil {
			return "", nil, err
		}
		return loc, func(ctx context.Context) (payload.Store, error) {
			cl := s3.NewFromConfig(cfg, func(o *s3.Options) {
				if sp.Endpoint != "" {
					o.BaseEndpoint = aws.String(sp.Endpoint)
					o.UsePathStyle = true
					// Third-party S3 services may not take the SDK's default checksums.
					o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
					o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
				}
			})
			b, err := s3blob.OpenBucket(ctx, cl, sp.Bucket, &s3blob.Options{})
			if err != nil {
				return nil, err
			}
			return prefixed(b, "s3", sp.Bucket, sp.Prefix)
		}, nil
	case v1alpha1.StoreProviderGCS, v1alpha1.StoreProviderAzureBlob:
		if sp.Bucket == "" {
			return "", nil, fmt.Errorf("snapshot store %s/%s: spec.bucket is required for provider %s", st.Namespace, st.Name, sp.Provider)
		}
		open := openGCS
		if sp.Provider == v1alpha1.StoreProviderAzureBlob {
			open = openAzure
		}
		o, err := open(ctx, c, st)
		return loc, o, err
	default:
		return "", nil, fmt.Errorf("snapshot store %s/%s: unknown provider %q (supported: HubSecrets, S3, GCS, AzureBlob, Folder)", st.Namespace, st.Name, sp.Provider)
	}
}

// awsConfig is the AWS SDK configuration for a region and a credentials Secret (nil: the
// controller's environment).
func awsConfig(ctx context.Context, c client.Reader, namespace, region string, ref *v1alpha1.LocalSecretReference) (aws.Config, error) {
	if region == "" {
		region = "us-east-1"
	}
	if ref == nil {
		cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region))
		if err != nil {
			return aws.Config{}, fmt.Errorf("loading AWS credentials from the environment: %w", err)
		}
		return cfg, nil
	}
	data, err := secretData(ctx, c, namespace, ref.Name, CredAccessKeyID, CredSecretAccessKey)
	if err != nil {
		return aws.Config{}, err
	}
	return aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(string(data[CredAccessKeyID]), string(data[CredSecretAccessKey]), string(data[CredSessionToken])),
	}, nil
}

// secretData reads a Secret and checks it has the required keys (never printing values).
func secretData(ctx context.Context, c client.Reader, namespace, name string, required ...string) (map[string][]byte, error) {
	sec := &corev1.Secret{}
	id := namespace + "/" + name
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &CredentialsError{Secret: id, Err: errors.New("not found")}
		}
		return nil, &CredentialsError{Secret: id, Err: err}
	}
	for _, k := range required {
		if len(sec.Data[k]) == 0 {
			return nil, &CredentialsError{Secret: id, Err: fmt.Errorf("has no data key %q (want %s)", k, strings.Join(required, ", "))}
		}
	}
	return sec.Data, nil
}
