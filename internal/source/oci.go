package source

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Media types of a Helm chart pushed to an OCI registry (helm push).
const (
	HelmConfigMediaType       = "application/vnd.cncf.helm.config.v1+json"
	HelmChartLayerMediaType   = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	helmLegacyChartLayerMedia = "application/tar+gzip"
)

const ociAuthFix = "put credentials for the registry (username and password, token, or .dockerconfigjson) in a Secret and name it in spec.source.secretRef; rewind keeps trying"

// FetchOCI fetches the artifact src.Digest of src.Repository: a Helm chart (by its config
// media type) or else an OLM bundle image (its filesystem, manifests/ and metadata/ at the
// root). When src.Tag is set it must still point at src.Digest. The registry client verifies
// every manifest and blob it reads against its digest.
func FetchOCI(ctx context.Context, src *v1alpha1.OCISource, creds *Credentials) (*Content, error) {
	var nameOpts []name.Option
	if src.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	repo, err := name.NewRepository(src.Repository, nameOpts...)
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "fix spec.source.oci.repository: a registry host and repository path such as registry.example.com/charts/mysql-operator",
			"spec.source.oci.repository %q: %w", src.Repository, err)
	}
	ref := repo.Digest(src.Digest)
	where := "oci://" + src.Repository + "@" + src.Digest
	opts, err := remoteOptions(ctx, repo, creds, src.Insecure)
	if err != nil {
		return nil, err
	}
	if src.Tag != "" {
		tag := repo.Tag(src.Tag)
		desc, err := remote.Head(tag, opts...)
		if err != nil {
			return nil, ociError(fmt.Sprintf("resolving tag %s of oci://%s", src.Tag, src.Repository), err)
		}
		if desc.Digest.String() != src.Digest {
			return nil, fail(v1alpha1.ReasonTagMoved, false,
				fmt.Sprintf("a release is immutable: create a new OperatorRelease for the new content (spec.source.oci.digest %s), or move the tag back", desc.Digest),
				"tag %s of oci://%s now points at %s, not at spec.source.oci.digest %s: the tag was moved", src.Tag, src.Repository, desc.Digest, src.Digest)
		}
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, ociError("fetching "+where, err)
	}
	if desc.MediaType.IsIndex() {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "set spec.source.oci.digest to the digest of one image manifest of the index (a bundle image is built for one platform)",
			"%s is an image index (%s), not a chart or a bundle image", where, desc.MediaType)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "reference a Helm chart (helm push) or an OLM bundle image", "%s: %w", where, err)
	}
	manifest, err := img.Manifest()
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "reference a Helm chart (helm push) or an OLM bundle image", "%s: reading the manifest: %w", where, err)
	}
	if manifest.Config.MediaType == HelmConfigMediaType {
		return ociChart(img, manifest, where)
	}
	return ociBundle(img, where)
}

// ociChart reads the chart layer of a Helm chart artifact.
func ociChart(img v1.Image, manifest *v1.Manifest, where string) (*Content, error) {
	var layer *v1.Descriptor
	for i, l := range manifest.Layers {
		if l.MediaType == HelmChartLayerMediaType || l.MediaType == helmLegacyChartLayerMedia {
			if layer != nil {
				return nil, fail(v1alpha1.ReasonSourceInvalid, false, "push the chart with helm push", "%s has more than one chart layer", where)
			}
			layer = &manifest.Layers[i]
		}
	}
	if layer == nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "push the chart with helm push", "%s is a Helm chart artifact without a chart layer (%s)", where, HelmChartLayerMediaType)
	}
	if layer.Size > MaxArchiveSize {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: the chart layer is %d bytes, more than the %d MiB rewind reads", where, layer.Size, MaxArchiveSize>>20)
	}
	l, err := img.LayerByDigest(layer.Digest)
	if err != nil {
		return nil, ociError("fetching the chart of "+where, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, ociError("fetching the chart of "+where, err)
	}
	defer rc.Close()
	tgz, err := io.ReadAll(io.LimitReader(rc, MaxArchiveSize+1))
	if err != nil {
		// The blob is verified against its digest while it is read.
		return nil, ociError("fetching the chart of "+where, err)
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "push a valid chart (helm package, helm push) and create a release for its digest",
			"%s: the chart layer is not a valid chart archive: %w", where, err)
	}
	return &Content{Format: v1alpha1.FormatChart, Chart: chrt, Name: where}, nil
}

// ociBundle reads the filesystem of a bundle image (its layers, applied in order).
func ociBundle(img v1.Image, where string) (*Content, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, ociError("reading the layers of "+where, err)
	}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			return nil, ociError("reading the layers of "+where, err)
		}
		if !mt.IsLayer() {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "reference a Helm chart (helm push) or an OLM bundle image",
				"%s is neither a Helm chart (config media type %s) nor a container image (layer media type %s)", where, HelmConfigMediaType, mt)
		}
		if size, err := l.Size(); err == nil && size > MaxArchiveSize {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: a layer is %d bytes, more than the %d MiB rewind reads", where, size, MaxArchiveSize>>20)
		}
	}
	files := newMemFiles(where)
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, ociError("reading the files of "+where, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = files.mkdir(h.Name)
		case tar.TypeReg:
			err = files.add(h.Name, h.FileInfo().Mode(), tr, h.Size)
		}
		if err != nil {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", where, err)
		}
	}
	root, err := files.sub(".")
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", where, err)
	}
	return &Content{Format: v1alpha1.FormatBundle, Files: root, Name: where}, nil
}

// remoteOptions are the registry client's options: context, credentials, CAs. Unless
// insecure, plain HTTP is refused (the registry client would otherwise fall back to it for
// registries on loopback, private addresses and .local names).
func remoteOptions(ctx context.Context, repo name.Repository, creds *Credentials, insecure bool) ([]remote.Option, error) {
	base, err := httpTransport(creds)
	if err != nil {
		return nil, err
	}
	var tr http.RoundTripper = base
	if !insecure {
		tr = httpsOnly{base}
	}
	auth, err := ociAuth(repo.RegistryStr(), creds)
	if err != nil {
		return nil, err
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuth(auth)}, nil
}

// ociAuth picks the credentials for registry: token, username and password, or the entry of a
// .dockerconfigjson for the registry.
func ociAuth(registry string, creds *Credentials) (authn.Authenticator, error) {
	switch {
	case creds == nil:
		return authn.Anonymous, nil
	case creds.Token != "":
		return authn.FromConfig(authn.AuthConfig{RegistryToken: creds.Token}), nil
	case creds.Username != "":
		return authn.FromConfig(authn.AuthConfig{Username: creds.Username, Password: creds.Password}), nil
	case len(creds.DockerConfig) > 0:
		var cfg struct {
			Auths map[string]struct {
				Username      string `json:"username"`
				Password      string `json:"password"`
				Auth          string `json:"auth"`
				IdentityToken string `json:"identitytoken"`
				RegistryToken string `json:"registrytoken"`
			} `json:"auths"`
		}
		if err := json.Unmarshal(creds.DockerConfig, &cfg); err != nil {
			return nil, fail(v1alpha1.ReasonCredentialsInvalid, true, "put a valid .dockerconfigjson (kubectl create secret docker-registry) in the Secret of spec.source.secretRef",
				"key %s of the credentials Secret is not valid JSON", KeyDockerConfig)
		}
		for host, a := range cfg.Auths {
			h := strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://")
			h = strings.TrimSuffix(strings.TrimSuffix(h, "/v1/"), "/v2/")
			h = strings.TrimSuffix(h, "/")
			if h != registry && !(registry == name.DefaultRegistry && (h == "docker.io" || h == "index.docker.io/v1")) {
				continue
			}
			ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
			if a.Auth != "" && ac.Username == "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				user, pass, ok := strings.Cut(string(raw), ":")
				if err != nil || !ok {
					return nil, fail(v1alpha1.ReasonCredentialsInvalid, true, "fix the auth field (base64 of username:password) of the .dockerconfigjson",
						"the %s entry for %s has an auth field that is not base64 of username:password", KeyDockerConfig, host)
				}
				ac.Username, ac.Password = user, pass
			}
			return authn.FromConfig(ac), nil
		}
		return authn.Anonymous, nil
	}
	return authn.Anonymous, nil
}

// ociError words a registry failure.
func ociError(what string, err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		code := terr.StatusCode
		for _, d := range terr.Errors {
			switch d.Code {
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				code = http.StatusUnauthorized
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				code = http.StatusNotFound
			}
		}
		if code == http.StatusNotFound {
			return &Error{Reason: v1alpha1.ReasonSourceNotFound, Retry: true, Err: fmt.Errorf("%s: not found in the registry", what),
				Fix: "check spec.source.oci (repository, digest, tag), or push the artifact; rewind keeps trying"}
		}
		return statusError(what, code, ociAuthFix)
	}
	if isNetworkError(err) {
		return networkError(what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return networkError(what, err)
	}
	// What is left is content that does not verify or parse.
	return fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", what, err)
}

// httpsOnly refuses plain-HTTP requests.
type httpsOnly struct{ next http.RoundTripper }

// errPlainHTTP is the error for a plain-HTTP request to a registry without insecure.
var errPlainHTTP = errors.New("plain HTTP is refused (set spec.source.oci.insecure to allow it)")

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return nil, errPlainHTTP
	}
	return h.next.RoundTrip(req)
}
