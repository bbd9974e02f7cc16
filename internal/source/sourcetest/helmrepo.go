package sourcetest

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/repo"
)

// HelmRepo is a Helm chart repository served over HTTPS from a folder: index.yaml and the
// charts' .tgz files, as `helm repo index` makes them.
type HelmRepo struct {
	server
	dir string
	// damaged are index entries of archives that are not charts (AddCorrupt).
	damaged []damaged
}

type damaged struct {
	name, version, file, digest string
}

// NewHelmRepo starts an empty repository that requires auth, stopped when the test ends.
func NewHelmRepo(t testing.TB, auth Auth) *HelmRepo {
	t.Helper()
	dir := t.TempDir()
	return &HelmRepo{server: startTLS(t, auth.wrap(http.FileServer(http.Dir(dir)))), dir: dir}
}

// Add publishes the packaged chart tgz (see PackageChart) as filename and re-indexes the
// repository with the Helm SDK (repo.IndexDirectory, as helm repo index does); it returns the
// sha256 digest of the .tgz (sha256:<hex>), as spec.source.helmRepository.digest takes it.
func (h *HelmRepo) Add(t testing.TB, filename string, tgz []byte) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, filename), tgz, 0o644); err != nil {
		t.Fatal(err)
	}
	h.index(t)
	return Digest(tgz)
}

// AddCorrupt publishes data (not a chart archive) as version of chart name, listed in the
// index with data's digest as a chart whose archive was damaged before it was indexed; it
// returns that digest.
func (h *HelmRepo) AddCorrupt(t testing.TB, name, version string, data []byte) string {
	t.Helper()
	// Two folders down, out of sight of IndexDirectory (which loads every *.tgz it sees).
	file := filepath.ToSlash(filepath.Join("damaged", name, name+"-"+version+".tgz"))
	if err := os.MkdirAll(filepath.Join(h.dir, "damaged", name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, filepath.FromSlash(file)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	h.damaged = append(h.damaged, damaged{name: name, version: version, file: file, digest: hex.EncodeToString(sha(data))})
	h.index(t)
	return Digest(data)
}

// Replace overwrites the published file filename with data, leaving the index as it is (as
// when a chart is re-published under the same version).
func (h *HelmRepo) Replace(t testing.TB, filename string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, filename), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (h *HelmRepo) index(t testing.TB) {
	t.Helper()
	idx, err := repo.IndexDirectory(h.dir, h.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range h.damaged {
		md := &chart.Metadata{APIVersion: chart.APIVersionV2, Name: d.name, Version: d.version, AppVersion: d.version}
		// MustAdd keeps only the file name of d.file: the folder goes into the base URL.
		if err := idx.MustAdd(md, d.file, h.URL()+"/"+path.Dir(d.file), d.digest); err != nil {
			t.Fatal(err)
		}
	}
	idx.SortEntries()
	if err := idx.WriteFile(filepath.Join(h.dir, "index.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Digest is sha256:<hex> of data.
func Digest(data []byte) string { return "sha256:" + hex.EncodeToString(sha(data)) }

func sha(data []byte) []byte {
	sum := sha256.Sum256(data)
	return sum[:]
}
