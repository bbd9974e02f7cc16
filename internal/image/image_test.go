//go:build !unit

// Not in `make test-unit`: these tests build the controller binary (twice for
// reproducibility), minutes on 2 cores with a cold build cache, past go test's 10-minute
// default on a fresh clone; the unit lane is for pure logic. `make test` runs them.

package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/rewind-dev/rewind/internal/image"
)

// created is the SOURCE_DATE_EPOCH of these builds.
var created = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// buildController builds rewind-controller as `make image` does, into dir.
func buildController(t *testing.T, dir string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build rewind-controller: %v", err)
	}
	out := filepath.Join(dir, "rewind-controller")
	const pkg = "github.com/rewind-dev/rewind/internal/version"
	cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w -X "+pkg+".Version=v0.0.0-test -X "+pkg+".BuildDate=2026-11-30T12:00:00Z",
		"-o", out, "github.com/rewind-dev/rewind/cmd/rewind-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestImageIsReproducible builds the controller binary twice, in different folders and with
// different file times, and the image from each: the digests, the OCI layouts and the
// tarballs must be identical.
func TestImageIsReproducible(t *testing.T) {
	var digests []v1.Hash
	var layouts, tarballs []string
	for i := range 2 {
		dir := t.TempDir()
		bin := buildController(t, dir)
		// A different modification time each round: it must not reach the image.
		mtime := time.Now().Add(time.Duration(i) * time.Hour)
		if err := os.Chtimes(bin, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		img, err := image.Build(image.Options{Binary: bin, License: licensePath(t), Arch: "amd64", Created: created, Version: "v0.0.0-test"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
		l, tb := filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar")
		if err := image.WriteLayout(l, img, "example.com/rewind-controller:test"); err != nil {
			t.Fatal(err)
		}
		if err := image.WriteTarball(tb, img, "example.com/rewind-controller:test"); err != nil {
			t.Fatal(err)
		}
		layouts, tarballs = append(layouts, l), append(tarballs, tb)
		if i == 0 {
			checkStaticBinaryRuns(t, img, dir)
		}
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds gave two digests: %s and %s", digests[0], digests[1])
	}
	if a, b := treeSum(t, layouts[0]), treeSum(t, layouts[1]); a != b {
		t.Errorf("the OCI layouts differ:\n%s\n%s", a, b)
	}
	if a, b := fileSum(t, tarballs[0]), fileSum(t, tarballs[1]); a != b {
		t.Errorf("the tarballs differ")
	}
	// The layout and the tarball read back as the same image.
	p, err := layout.FromPath(layouts[0])
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != digests[0] || m.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "example.com/rewind-controller:test" {
		t.Errorf("OCI layout index: %+v, want one image %s", m.Manifests, digests[0])
	}
	fromTar, err := tarball.ImageFromPath(tarballs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	// A docker-save tarball holds the config and the layers (its manifest is docker's own).
	img0, err := p.Image(digests[0])
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, _ := img0.ConfigName()
	if got, err := fromTar.ConfigName(); err != nil || got != wantCfg {
		t.Errorf("the tarball's config is %s (%v), want %s", got, err, wantCfg)
	}
}

// checkStaticBinaryRuns takes the binary out of the image: it must be static (no ELF
// interpreter: the base has no libc) and run.
func checkStaticBinaryRuns(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	files := imageFiles(t, img)
	bin, ok := files["rewind-controller"]
	if !ok {
		t.Fatal("no /rewind-controller in the image")
	}
	f, err := elf.NewFile(bytes.NewReader(bin.data))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("rewind-controller is dynamically linked: the distroless-style base has no libc")
		}
	}
	out := filepath.Join(dir, "from-image")
	if err := os.WriteFile(out, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(out, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "v0.0.0-test") {
		t.Errorf("the image's rewind-controller --version: %v\n%s", err, v)
	}
}

func TestImageContents(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "rewind-controller")
	if err := os.WriteFile(bin, []byte("#!not really a binary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := image.Build(image.Options{Binary: bin, License: licensePath(t), Arch: "arm64", Created: created, Version: "v1.2.3", Revision: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/rewind-controller" {
		t.Errorf("config: user %q entrypoint %q, want 65532:65532 and /rewind-controller", cf.Config.User, cf.Config.Entrypoint)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Time.Equal(created) {
		t.Errorf("config: %s/%s created %s", cf.OS, cf.Architecture, cf.Created)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || cf.Config.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels: %v", cf.Config.Labels)
	}
	for _, h := range cf.History {
		if !h.Created.Time.Equal(created) {
			t.Errorf("history entry %q created %s, want %s", h.CreatedBy, h.Created, created)
		}
	}
	mt, err := img.MediaType()
	if err != nil || mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %s: %v", mt, err)
	}

	files := imageFiles(t, img)
	want := map[string]struct {
		mode     int64
		uid, gid int
	}{
		"rewind-controller":                 {0o755, 0, 0},
		"etc/passwd":                        {0o644, 0, 0},
		"etc/group":                         {0o644, 0, 0},
		"etc/ssl/certs/ca-certificates.crt": {0o644, 0, 0},
		"tmp/":                              {0o1777, 0, 0},
		"home/nonroot/":                     {0o700, 65532, 65532},
		"licenses/rewind/LICENSE":           {0o644, 0, 0},
	}
	for name, w := range want {
		f, ok := files[name]
		if !ok {
			t.Errorf("the image has no %s", name)
			continue
		}
		if f.hdr.Mode != w.mode || f.hdr.Uid != w.uid || f.hdr.Gid != w.gid {
			t.Errorf("%s: mode %o uid %d gid %d, want %o %d %d", name, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, w.mode, w.uid, w.gid)
		}
	}
	for name, f := range files {
		if !f.hdr.ModTime.Equal(created) || f.hdr.Uname != "" || f.hdr.Gname != "" {
			t.Errorf("%s: mtime %s owner names %q/%q: every entry must have the build's time and no names", name, f.hdr.ModTime, f.hdr.Uname, f.hdr.Gname)
		}
	}
	if p := string(files["etc/passwd"].data); !strings.Contains(p, "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", p)
	}
	if g := string(files["etc/group"].data); !strings.Contains(g, "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", g)
	}
	// The CA bundle is PEM that crypto/x509 loads, with the well-known roots.
	pool := x509.NewCertPool()
	ca := files["etc/ssl/certs/ca-certificates.crt"].data
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("the CA bundle does not parse")
	}
	n, isrg := 0, false
	for rest := ca; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		n++
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		isrg = isrg || c.Subject.CommonName == "ISRG Root X1"
	}
	if n < 100 || !isrg {
		t.Errorf("the CA bundle holds %d roots (ISRG Root X1: %v): want the NSS set", n, isrg)
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// imageFiles reads every layer of img into name -> entry.
func imageFiles(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = entry{hdr: h, data: b}
		}
		rc.Close()
	}
	return out
}

func licensePath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// treeSum hashes every file of a folder with its relative path and mode.
func treeSum(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h.Write([]byte(rel + "\x00"))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}
