package payload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DirStore keeps each payload as a file in a local folder. A Put writes a temporary file and
// renames it into place, so a payload is either absent or complete.
type DirStore struct {
	dir string
}

var _ Store = (*DirStore)(nil)

// NewDirStore opens (creating it with mode 0700 if needed) the folder dir.
func NewDirStore(dir string) (*DirStore, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	return &DirStore{dir: abs}, nil
}

func (s *DirStore) path(name string) string { return filepath.Join(s.dir, name) }

// Put implements Store. The location is dir:///<folder>/<name>.
func (s *DirStore) Put(ctx context.Context, name string, r io.Reader) (string, int64, error) {
	if err := validateName(name); err != nil {
		return "", 0, err
	}
	tmp, err := os.CreateTemp(s.dir, ".tmp-"+name+"-*")
	if err != nil {
		return "", 0, fmt.Errorf("payload store: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	size, err := io.Copy(tmp, ctxReader{ctx, r})
	if err != nil {
		return "", 0, fmt.Errorf("payload store: writing %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", 0, fmt.Errorf("payload store: writing %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return "", 0, fmt.Errorf("payload store: writing %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), s.path(name)); err != nil {
		return "", 0, fmt.Errorf("payload store: %w", err)
	}
	done = true
	if d, err := os.Open(s.dir); err == nil { // make the rename durable
		_ = d.Sync()
		d.Close()
	}
	return (&url.URL{Scheme: "dir", Path: s.path(name)}).String(), size, nil
}

// Get implements Store.
func (s *DirStore) Get(_ context.Context, name string) (io.ReadCloser, error) {
	if err := validateName(name); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("payload %q in %s: %w", name, s.dir, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	return f, nil
}

// Delete implements Store.
func (s *DirStore) Delete(_ context.Context, name string) error {
	if err := validateName(name); err != nil {
		return err
	}
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("payload store: %w", err)
	}
	return nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// List implements Lister.
func (s *DirStore) List(_ context.Context, prefix string) ([]string, error) {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("payload store: %w", err)
	}
	var names []string
	for _, de := range des {
		if n := de.Name(); de.Type().IsRegular() && n[0] != '.' && strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	return names, nil
}
