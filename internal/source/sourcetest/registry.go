package sourcetest

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	helmregistry "helm.sh/helm/v3/pkg/registry"
)

// Registry is an OCI registry (go-containerregistry's, the same code as its `crane registry
// serve`) behind TLS and, optionally, basic auth or a bearer token.
type Registry struct {
	server
	auth Auth
}

// NewRegistry starts a registry that requires auth (none for the zero value), stopped when the
// test ends.
func NewRegistry(t testing.TB, auth Auth) *Registry {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	return &Registry{server: startTLS(t, auth.wrap(h)), auth: auth}
}

// Repository is HOST/path, as spec.source.oci.repository takes it.
func (r *Registry) Repository(path string) string { return r.Host() + "/" + path }

// NewPlainRegistry starts a registry over plain HTTP (no TLS, no auth), stopped when the test
// ends; it returns the registry and its host (127.0.0.1:PORT).
func NewPlainRegistry(t testing.TB) (*Registry, string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return &Registry{server: server{srv: srv}}, strings.TrimPrefix(srv.URL, "http://")
}

// PackageChart packages the chart folder dir as helm package does and returns the .tgz bytes.
func PackageChart(t testing.TB, dir string) []byte {
	t.Helper()
	chrt, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := chartutil.Save(chrt, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// PushChart pushes the packaged chart tgz to repository path with tag (the chart's version,
// as helm push does) through the Helm SDK's OCI client and returns the manifest digest.
func (r *Registry) PushChart(t testing.TB, path, tag string, tgz []byte) string {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig.RootCAs = r.Pool()
	opts := []helmregistry.ClientOption{helmregistry.ClientOptHTTPClient(&http.Client{Transport: tr}), helmregistry.ClientOptWriter(io.Discard)}
	if r.auth.Username != "" {
		opts = append(opts, helmregistry.ClientOptBasicAuth(r.auth.Username, r.auth.Password))
	}
	c, err := helmregistry.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Push(tgz, r.Repository(path)+":"+tag)
	if err != nil {
		t.Fatalf("helm push to %s: %v", r.Repository(path), err)
	}
	return res.Manifest.Digest
}

// PushBundle builds an OLM bundle image from the bundle folder dir (one layer holding
// manifests/ and metadata/ at the image root, the bundle annotations as labels, as operator-sdk
// bundle images are) and pushes it to repository path with tag; it returns the digest.
func (r *Registry) PushBundle(t testing.TB, path, tag, dir string, labels map[string]string) string {
	t.Helper()
	img := BundleImage(t, dir, labels)
	return r.PushImage(t, path, tag, img)
}

// BundleImage builds the bundle image of PushBundle.
func BundleImage(t testing.TB, dir string, labels map[string]string) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, layer)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// PushImage pushes img to repository path with tag and returns its digest.
func (r *Registry) PushImage(t testing.TB, path, tag string, img v1.Image) string {
	t.Helper()
	var opts []name.Option
	if r.srv.TLS == nil {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(r.Repository(path)+":"+tag, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.remoteOptions()...); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// Tag points tag of repository path at digest (moves it when it exists).
func (r *Registry) Tag(t testing.TB, path, tag, digest string) {
	t.Helper()
	ref, err := name.NewDigest(r.Repository(path) + "@" + digest)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(ref, r.remoteOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	tagRef, err := name.NewTag(r.Repository(path) + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Tag(tagRef, desc, r.remoteOptions()...); err != nil {
		t.Fatal(err)
	}
}

func (r *Registry) remoteOptions() []remote.Option {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.srv.TLS != nil {
		tr.TLSClientConfig.RootCAs = r.Pool()
	}
	auth := authn.Anonymous
	switch {
	case r.auth.Username != "":
		auth = authn.FromConfig(authn.AuthConfig{Username: r.auth.Username, Password: r.auth.Password})
	case r.auth.Token != "":
		auth = authn.FromConfig(authn.AuthConfig{RegistryToken: r.auth.Token})
	}
	return []remote.Option{remote.WithTransport(tr), remote.WithAuth(auth)}
}
