package payload

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file://
	_ "gocloud.dev/blob/memblob"  // mem://
	_ "gocloud.dev/blob/s3blob"   // s3://
	"gocloud.dev/gcerrors"
)

// BlobStore keeps each payload as an object in a gocloud.dev/blob bucket (S3 or an
// S3-compatible service, a local folder through file://, or memory). Objects are written
// atomically: an interrupted Put leaves no object.
type BlobStore struct {
	bucket *blob.Bucket
	base   url.URL // for locations: scheme, bucket and prefix
	prefix string
}

var _ Store = (*BlobStore)(nil)

// OpenBlobStore opens the bucket at urlstr with blob.OpenBucket (file://, mem:// and s3://
// drivers are linked in).
func OpenBlobStore(ctx context.Context, urlstr string) (*BlobStore, error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return nil, fmt.Errorf("payload store URL %q: %w", urlstr, err)
	}
	b, err := blob.OpenBucket(ctx, urlstr)
	if err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	prefix := u.Query().Get("prefix")
	base := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return &BlobStore{bucket: b, base: base, prefix: prefix}, nil
}

// NewBlobStore uses an open bucket; location is the URL prefix of the locations Put returns
// (e.g. "s3://bucket/snapshots").
func NewBlobStore(b *blob.Bucket, location string) (*BlobStore, error) {
	u, err := url.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("payload store location %q: %w", location, err)
	}
	return &BlobStore{bucket: b, base: url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}}, nil
}

// Put implements Store. The location is the bucket URL with the object key as path. The
// payload is handed to the driver's uploader as one stream (Bucket.Upload): an error of the
// source or of the service fails the upload, and nothing is stored.
func (s *BlobStore) Put(ctx context.Context, name string, r io.Reader) (string, int64, error) {
	if err := validateName(name); err != nil {
		return "", 0, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A source that fails cancels the write before the driver could commit what it got.
	cr := &countingReader{r: r, onError: cancel}
	if err := s.bucket.Upload(wctx, name, cr, &blob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		return "", 0, fmt.Errorf("payload store: writing %s: %w", name, err)
	}
	loc := s.base
	loc.Path = path.Join("/", loc.Path, s.prefix+name)
	return loc.String(), cr.n, nil
}

// countingReader counts the bytes read through it and calls onError when its source fails.
type countingReader struct {
	r       io.Reader
	n       int64
	onError func()
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF {
		c.onError()
	}
	return n, err
}

// Get implements Store.
func (s *BlobStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	rd, err := s.bucket.NewReader(ctx, name, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("payload %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("payload store: reading %s: %w", name, err)
	}
	return rd, nil
}

// Delete implements Store.
func (s *BlobStore) Delete(ctx context.Context, name string) error {
	if err := validateName(name); err != nil {
		return err
	}
	if err := s.bucket.Delete(ctx, name); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("payload store: deleting %s: %w", name, err)
	}
	return nil
}

// Close closes the bucket.
func (s *BlobStore) Close() error { return s.bucket.Close() }

// List implements Lister.
func (s *BlobStore) List(ctx context.Context, prefix string) ([]string, error) {
	var names []string
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("payload store: listing: %w", err)
		}
		if !obj.IsDir {
			names = append(names, obj.Key)
		}
	}
}
