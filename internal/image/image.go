// Package image builds the rewind-controller container image without a container engine, with
// go-containerregistry: a distroless-style base assembled here (no base image is pulled) and
// the controller binary on top, written as an OCI image layout and a tarball.
//
// The base holds what gcr.io/distroless/static:nonroot holds and a static Go binary needs:
// /etc/passwd and /etc/group with root (0), nonroot (65532) and nobody (65534); the Mozilla
// root certificates (NSS) as /etc/ssl/certs/ca-certificates.crt, written from the bundle of
// golang.org/x/crypto/x509roots/fallback, so the set is pinned by go.sum rather than by the
// build machine; a world-writable /tmp and nonroot's home. No time-zone data: rewind works
// in UTC only. The image runs as 65532:65532.
//
// Builds are reproducible: every file has a fixed mode, owner and modification time (the
// build's Created time, from SOURCE_DATE_EPOCH, or the Unix epoch), entries are sorted, the
// config and history carry the same time, and the binary is expected to be built with
// -trimpath and fixed -ldflags. Two builds of one commit give one digest.
package image

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Users of the image, as distroless names them.
const (
	// NonRootUID is the user (and group) the controller runs as.
	NonRootUID = 65532
	// BinaryPath is where the controller binary lives in the image.
	BinaryPath = "/rewind-controller"
	// CACertsPath is the CA bundle Go's crypto/x509 reads on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// Options say what to build.
type Options struct {
	// Binary is the path of the rewind-controller binary (static, linux, built with -trimpath).
	Binary string
	// License is the path of the LICENSE file shipped in the image (optional).
	License string
	// OS and Arch are the platform of the binary (default linux/amd64).
	OS, Arch string
	// Created is the image's creation time and every file's modification time (default: the
	// Unix epoch). Set it from SOURCE_DATE_EPOCH for a meaningful, reproducible date.
	Created time.Time
	// Version and Revision go into the OCI annotations/labels of the image.
	Version, Revision string
	// Source is the repository URL label.
	Source string
}

// file is one entry of a layer.
type file struct {
	name     string
	mode     int64
	uid, gid int
	dir      bool
	data     []byte
}

// Build returns the image.
func Build(o Options) (v1.Image, error) {
	if o.OS == "" {
		o.OS = "linux"
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	o.Created = o.Created.UTC()
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("image: reading the controller binary: %w", err)
	}
	base, err := layer(baseFiles(), o.Created)
	if err != nil {
		return nil, err
	}
	app := []file{{name: BinaryPath, mode: 0o755, data: bin}}
	if o.License != "" {
		lic, err := os.ReadFile(o.License)
		if err != nil {
			return nil, fmt.Errorf("image: reading the license: %w", err)
		}
		app = append(app,
			file{name: "/licenses", mode: 0o755, dir: true},
			file{name: "/licenses/rewind", mode: 0o755, dir: true},
			file{name: "/licenses/rewind/LICENSE", mode: 0o644, data: lic})
	}
	appLayer, err := layer(app, o.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Created}
	img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1),
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "rewind: distroless-style base (passwd, group, NSS root certificates, /tmp)", Comment: "built by internal/image"}},
		mutate.Addendum{Layer: appLayer, MediaType: types.OCILayer, History: v1.History{Created: created,
			CreatedBy: "rewind: COPY rewind-controller " + BinaryPath, Comment: "built by internal/image"}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = o.OS, o.Arch
	cf.Created = created
	cf.Author = "The rewind Authors"
	labels := map[string]string{
		"org.opencontainers.image.title":       "rewind-controller",
		"org.opencontainers.image.description": "rewind: release Kubernetes operators to many clusters in waves, and always bring them back",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     o.Created.Format(time.RFC3339),
	}
	if o.Version != "" {
		labels["org.opencontainers.image.version"] = o.Version
	}
	if o.Revision != "" {
		labels["org.opencontainers.image.revision"] = o.Revision
	}
	if o.Source != "" {
		labels["org.opencontainers.image.source"] = o.Source
	}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + CACertsPath,
			"HOME=/home/nonroot",
		},
		Labels: labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.created": o.Created.Format(time.RFC3339),
		"org.opencontainers.image.title":   "rewind-controller",
	}).(v1.Image), nil
}

// baseFiles is the distroless-style base.
func baseFiles() []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRootUID, NonRootUID)
	group := fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", NonRootUID)
	return []file{
		{name: "/etc", mode: 0o755, dir: true},
		{name: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(group)},
		{name: "/etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "/etc/ssl", mode: 0o755, dir: true},
		{name: "/etc/ssl/certs", mode: 0o755, dir: true},
		{name: CACertsPath, mode: 0o644, data: CACertificates()},
		{name: "/home", mode: 0o755, dir: true},
		{name: "/home/nonroot", mode: 0o700, dir: true, uid: NonRootUID, gid: NonRootUID},
		{name: "/root", mode: 0o700, dir: true},
		{name: "/tmp", mode: 0o1777, dir: true},
	}
}

// CACertificates returns the NSS root certificates of golang.org/x/crypto/x509roots/fallback
// as PEM. Roots with a constraint a PEM file cannot express (a distrust-after date) are left
// out.
func CACertificates() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// layer makes a gzipped tar layer of files: sorted, every entry with mtime t, fixed modes and
// owners, no user or group names, PAX headers only where needed.
func layer(files []file, t time.Time) (v1.Layer, error) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.name), "/")
		h := &tar.Header{Name: name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: t, Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !f.dir {
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}
