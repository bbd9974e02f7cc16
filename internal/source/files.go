package source

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/helper/iofs"
	"github.com/go-git/go-billy/v5/memfs"
)

// memFiles collects fetched files in memory, within MaxFiles and MaxContentSize.
type memFiles struct {
	fs    billy.Filesystem
	files int
	size  int64
	// what names the content in limit errors.
	what string
}

func newMemFiles(what string) *memFiles { return &memFiles{fs: memfs.New(), what: what} }

// clean makes a slash path relative to the root; ok is false for a path outside it.
func clean(p string) (string, bool) {
	p = path.Clean("/" + strings.TrimPrefix(p, "./"))
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		p = "."
	}
	return p, fs.ValidPath(p)
}

// add writes the file p (slash path) with the content of r, at most size bytes.
func (m *memFiles) add(p string, mode fs.FileMode, r io.Reader, size int64) error {
	name, ok := clean(p)
	if !ok || name == "." {
		return nil
	}
	m.files++
	if m.files > MaxFiles {
		return fmt.Errorf("%s holds more than %d files", m.what, MaxFiles)
	}
	if m.size+size > MaxContentSize {
		return fmt.Errorf("%s holds more than %d MiB", m.what, MaxContentSize>>20)
	}
	f, err := m.fs.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode.Perm()|0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, MaxContentSize-m.size+1))
	m.size += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if m.size > MaxContentSize {
		return fmt.Errorf("%s holds more than %d MiB", m.what, MaxContentSize>>20)
	}
	return nil
}

func (m *memFiles) mkdir(p string) error {
	name, ok := clean(p)
	if !ok || name == "." {
		return nil
	}
	return m.fs.MkdirAll(name, 0o755)
}

// sub is the folder dir of the files as an fs.FS (dir "" or "." is the root).
func (m *memFiles) sub(dir string) (fs.FS, error) {
	root := iofs.New(m.fs)
	name, ok := clean(dir)
	if !ok {
		return nil, fmt.Errorf("path %q is not inside the content", dir)
	}
	if name == "." {
		return root, nil
	}
	fi, err := fs.Stat(root, name)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is a file, not a folder", name)
	}
	return fs.Sub(root, name)
}
