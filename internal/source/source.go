// Package source fetches the content of an OperatorRelease's spec.source (a chart or bundle
// image in an OCI registry, a chart of a Helm repository, a folder of a Git commit) and
// verifies it against the digest or commit the spec pins, before anything is rendered or
// stored. Failures are *Error values that say what failed, whether trying again can help, and
// how to fix it.
package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Limits on what a source may hold, so a wrong or hostile source cannot exhaust the
// controller's memory.
const (
	// MaxArchiveSize bounds a chart .tgz and each layer of a bundle image (compressed).
	MaxArchiveSize = 64 << 20
	// MaxContentSize bounds the files of a bundle image or a Git folder, uncompressed.
	MaxContentSize = 128 << 20
	// MaxFiles bounds the number of files of a bundle image or a Git folder.
	MaxFiles = 10000
)

// Credentials for a source, from the Secret spec.source.secretRef names. Never log them.
type Credentials struct {
	// Username and Password are basic-auth credentials (a registry exchanges them for a
	// token; for Git the password may be an access token).
	Username, Password string
	// Token is a bearer token (OCI registries and Git servers).
	Token string
	// DockerConfig is a .dockerconfigjson (OCI registries).
	DockerConfig []byte
	// CA is PEM CA certificates to trust besides the system's.
	CA []byte
}

// Secret keys of Credentials.
const (
	KeyUsername     = "username"
	KeyPassword     = "password"
	KeyToken        = "token"
	KeyDockerConfig = ".dockerconfigjson"
	KeyCA           = "ca.crt"
)

// FromSecretData reads Credentials from the data of a Secret. A Secret with none of the keys
// is an error naming them.
func FromSecretData(data map[string][]byte) (*Credentials, error) {
	c := &Credentials{
		Username: string(data[KeyUsername]), Password: string(data[KeyPassword]), Token: string(data[KeyToken]),
		DockerConfig: data[KeyDockerConfig], CA: data[KeyCA],
	}
	if c.Username == "" && c.Password == "" && c.Token == "" && len(c.DockerConfig) == 0 && len(c.CA) == 0 {
		return nil, fmt.Errorf("it has none of the keys %s and %s, %s, %s, %s", KeyUsername, KeyPassword, KeyToken, KeyDockerConfig, KeyCA)
	}
	if (c.Username == "") != (c.Password == "") {
		return nil, fmt.Errorf("it has only one of %s and %s; basic auth needs both", KeyUsername, KeyPassword)
	}
	if len(c.CA) > 0 {
		if ok := x509.NewCertPool().AppendCertsFromPEM(c.CA); !ok {
			return nil, fmt.Errorf("key %s holds no PEM certificate", KeyCA)
		}
	}
	return c, nil
}

// Content is what a source holds, verified.
type Content struct {
	// Format is what it is: v1alpha1.FormatManifests, FormatChart or FormatBundle.
	Format string
	// Chart is the loaded chart (format Chart).
	Chart *chart.Chart
	// Files are the manifests or the bundle (formats Manifests and Bundle), at the root.
	Files fs.FS
	// Name says where the content comes from, for messages (oci://repo@digest,
	// https://charts.example.com chart 1.2.3, https://git.example.com/x.git@commit:path).
	Name string
}

// Error is a failed fetch: Reason is one of the v1alpha1.Reason* of OperatorRelease
// (SourceUnreachable, SourceUnauthorized, SourceNotFound, DigestMismatch, TagMoved,
// SourceInvalid); Retry says whether trying again later can help without a new release.
type Error struct {
	Reason string
	Retry  bool
	// Err says what failed.
	Err error
	// Fix says what to do about it.
	Fix string
}

func (e *Error) Error() string {
	if e.Fix == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + "; " + e.Fix
}

func (e *Error) Unwrap() error { return e.Err }

func fail(reason string, retry bool, fix string, format string, args ...any) *Error {
	return &Error{Reason: reason, Retry: retry, Err: fmt.Errorf(format, args...), Fix: fix}
}

// Fetch fetches and verifies the content of src.
func Fetch(ctx context.Context, src *v1alpha1.ReleaseSource, creds *Credentials) (*Content, error) {
	switch {
	case src == nil:
		return nil, errors.New("the release has no spec.source")
	case src.OCI != nil:
		return FetchOCI(ctx, src.OCI, creds)
	case src.HelmRepository != nil:
		return FetchHelmRepository(ctx, src.HelmRepository, creds)
	case src.Git != nil:
		return FetchGit(ctx, src.Git, creds)
	}
	return nil, fail(v1alpha1.ReasonSourceInvalid, false, "set exactly one of spec.source.oci, spec.source.helmRepository and spec.source.git", "spec.source names no source")
}

// tlsConfig trusts the system's CAs and those of creds.
func tlsConfig(creds *Credentials) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if creds == nil || len(creds.CA) == 0 {
		return cfg, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(creds.CA) {
		return nil, fail(v1alpha1.ReasonCredentialsInvalid, true, "put PEM CA certificates in key "+KeyCA+" of the Secret of spec.source.secretRef", "key %s of the credentials Secret holds no PEM certificate", KeyCA)
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// httpTransport is a transport like http.DefaultTransport's that trusts creds' CAs.
func httpTransport(creds *Credentials) (*http.Transport, error) {
	cfg, err := tlsConfig(creds)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return tr, nil
}

// networkError words a failure to reach server: TLS verification, DNS, connection, timeout.
func networkError(server string, err error) *Error {
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostnameErr x509.HostnameError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostnameErr) {
		return &Error{Reason: v1alpha1.ReasonSourceUnreachable, Retry: true, Err: fmt.Errorf("%s: TLS: %w", server, err),
			Fix: "if the server's certificate is signed by a private CA, put that CA in key " + KeyCA + " of a Secret and name it in spec.source.secretRef"}
	}
	return &Error{Reason: v1alpha1.ReasonSourceUnreachable, Retry: true, Err: fmt.Errorf("%s: %w", server, err),
		Fix: "check the URL and that the controller can reach the server (DNS, network policy, proxy); rewind keeps trying"}
}

// isNetworkError reports whether err is a failure to talk to a server at all.
func isNetworkError(err error) bool {
	var urlErr *url.Error
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	return errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.As(err, &certErr)
}

// statusError words an HTTP status answered for what (a description of the request).
func statusError(what string, code int, authFix string) *Error {
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return &Error{Reason: v1alpha1.ReasonSourceUnauthorized, Retry: true,
			Err: fmt.Errorf("%s: %d %s", what, code, http.StatusText(code)), Fix: authFix}
	case code == http.StatusNotFound:
		return &Error{Reason: v1alpha1.ReasonSourceNotFound, Retry: true,
			Err: fmt.Errorf("%s: %d %s", what, code, http.StatusText(code)),
			Fix: "check the URL, name and version in spec.source, or publish it there; rewind keeps trying"}
	}
	return &Error{Reason: v1alpha1.ReasonSourceUnreachable, Retry: true,
		Err: fmt.Errorf("%s: %d %s", what, code, http.StatusText(code)), Fix: "the server failed; rewind keeps trying"}
}
