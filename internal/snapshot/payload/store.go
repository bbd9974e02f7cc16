package payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Store keeps payloads by name.
type Store interface {
	// Put stores the payload read from r under name (streaming) and returns its location URL
	// and size.
	Put(ctx context.Context, name string, r io.Reader) (location string, size int64, err error)
	// Get streams the payload stored under name; a missing one is an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// Delete removes it; deleting a missing payload succeeds.
	Delete(ctx context.Context, name string) error
}

// ErrNotFound reports a payload that is not in the store.
var ErrNotFound = errors.New("payload not found")

// Supported store URL schemes, see OpenStore.
var storeSchemes = []string{"secrets", "dir", "file", "mem", "s3"}

// OpenStore opens the store a URL names:
//
//	secrets://<namespace>    chunked Secrets in the hub namespace (SecretStore; needs hub)
//	dir:///abs/path          a local folder (DirStore)
//	file:///abs/path         a local folder through gocloud.dev/blob (BlobStore)
//	mem://                   an in-memory bucket (BlobStore; for tests)
//	s3://bucket?region=...   S3 or an S3-compatible service (BlobStore)
//
// Blob URLs take gocloud.dev's parameters (e.g. prefix=, and for s3 endpoint= and
// use_path_style=true for S3-compatible services). A store that holds resources (BlobStore)
// implements io.Closer.
func OpenStore(ctx context.Context, urlstr string, hub client.Client) (Store, error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return nil, fmt.Errorf("payload store URL %q: %w", urlstr, err)
	}
	switch u.Scheme {
	case "secrets":
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			return nil, fmt.Errorf("payload store %s: want secrets://<namespace>", urlstr)
		}
		if errs := validation.IsDNS1123Label(u.Host); len(errs) > 0 {
			return nil, fmt.Errorf("payload store %s: namespace %q: %s", urlstr, u.Host, strings.Join(errs, "; "))
		}
		if hub == nil {
			return nil, fmt.Errorf("payload store %s: a secrets:// store needs a hub client", urlstr)
		}
		return NewSecretStore(hub, u.Host), nil
	case "dir":
		if u.Host != "" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
			return nil, fmt.Errorf("payload store %s: want dir:///absolute/path", urlstr)
		}
		return NewDirStore(u.Path)
	case "file", "mem", "s3":
		return OpenBlobStore(ctx, urlstr)
	default:
		return nil, fmt.Errorf("payload store %s: unsupported scheme %q (supported: %s)", urlstr, u.Scheme, strings.Join(storeSchemes, ", "))
	}
}

// validateName accepts the names every store can hold as one file or object name: 1 to 200
// of A-Z a-z 0-9 . _ -, not starting with a dot.
func validateName(name string) error {
	if name == "" || len(name) > 200 || name[0] == '.' {
		return fmt.Errorf("payload name %q: want 1 to 200 of A-Z a-z 0-9 . _ -, not starting with a dot", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("payload name %q: want 1 to 200 of A-Z a-z 0-9 . _ -, not starting with a dot", name)
		}
	}
	return nil
}

// Lister is a Store that can list the names it holds (BlobStore, DirStore).
type Lister interface {
	// List returns the names of the stored payloads (and other objects) that start with
	// prefix, in no particular order.
	List(ctx context.Context, prefix string) ([]string, error)
}
