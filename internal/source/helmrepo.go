package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

const helmRepoAuthFix = "put the repository's username and password in a Secret and name it in spec.source.secretRef; rewind keeps trying"

// maxIndexSize bounds a repository's index.yaml.
const maxIndexSize = 64 << 20

// FetchHelmRepository reads the index.yaml of the repository src.URL, downloads the .tgz of
// chart src.Chart version src.Version (credentials go only to the repository's own host, as
// helm does) and verifies its sha256 against src.Digest before loading it.
func FetchHelmRepository(ctx context.Context, src *v1alpha1.HelmRepositorySource, creds *Credentials) (*Content, error) {
	if creds != nil && creds.Token != "" {
		return nil, fail(v1alpha1.ReasonCredentialsInvalid, true, "put a username and password (the password may be an access token) in the Secret instead",
			"a Helm repository takes basic auth, not a bearer token (key %s)", KeyToken)
	}
	base, err := url.Parse(src.URL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "set spec.source.helmRepository.url to the https:// URL of the repository (where index.yaml is)",
			"spec.source.helmRepository.url %q is not an http(s) URL", redactURL(src.URL))
	}
	if base.User != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "remove the user information from the URL; put the username and password in a Secret and name it in spec.source.secretRef",
			"spec.source.helmRepository.url %s carries user information (USER:PASSWORD@): credentials do not belong in the spec", redactURL(src.URL))
	}
	// Every message names the repository and the chart by their redacted URLs: a query may
	// hold a token (a signed URL).
	repoURL := redactURL(src.URL)
	tr, err := httpTransport(creds)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: tr}
	where := fmt.Sprintf("chart %s %s of %s", src.Chart, src.Version, repoURL)

	indexURL := strings.TrimSuffix(src.URL, "/") + "/index.yaml"
	data, err := httpGet(ctx, client, indexURL, base.Host, creds, maxIndexSize, "the index of Helm repository "+repoURL)
	if err != nil {
		return nil, err
	}
	index := &repoIndex{}
	if err := yaml.Unmarshal(data, index); err != nil || index.APIVersion == "" {
		if err == nil {
			err = fmt.Errorf("no apiVersion")
		}
		return nil, fail(v1alpha1.ReasonSourceInvalid, true, "check spec.source.helmRepository.url: it must be the URL where the repository's index.yaml is",
			"%s is not a Helm repository index: %v", redactURL(indexURL), err)
	}
	var entry *chartVersion
	var versions []string
	for _, cv := range index.Entries[src.Chart] {
		if cv == nil {
			continue
		}
		versions = append(versions, cv.Version)
		if cv.Version == src.Version {
			entry = cv
		}
	}
	if entry == nil {
		if len(versions) == 0 {
			return nil, fail(v1alpha1.ReasonSourceNotFound, true, "check spec.source.helmRepository.chart, or publish the chart; rewind keeps trying",
				"Helm repository %s has no chart %s", repoURL, src.Chart)
		}
		slices.Sort(versions)
		if len(versions) > 10 {
			versions = append(versions[len(versions)-10:], "...")
		}
		return nil, fail(v1alpha1.ReasonSourceNotFound, true, "check spec.source.helmRepository.version, or publish that version; rewind keeps trying",
			"Helm repository %s has no version %s of chart %s (it has %s)", repoURL, src.Version, src.Chart, strings.Join(versions, ", "))
	}
	if len(entry.URLs) == 0 {
		return nil, fail(v1alpha1.ReasonSourceInvalid, true, "fix the repository's index.yaml", "the index of %s lists %s without a URL", repoURL, where)
	}
	chartURL, err := resolveReferenceURL(src.URL, entry.URLs[0])
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, true, "fix the repository's index.yaml", "the index of %s lists %s at %q: %v", repoURL, where, redactURL(entry.URLs[0]), err)
	}
	tgz, err := httpGet(ctx, client, chartURL, base.Host, creds, MaxArchiveSize, where)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(tgz)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != src.Digest {
		indexSays := ""
		if entry.Digest != "" && "sha256:"+entry.Digest != src.Digest {
			indexSays = fmt.Sprintf(" (the repository's index says sha256:%s)", entry.Digest)
		}
		return nil, fail(v1alpha1.ReasonDigestMismatch, false,
			"spec.source.helmRepository.digest must be the sha256 of the chart's .tgz (its digest in index.yaml): releases are immutable, so create a new OperatorRelease with the right one; if it was right, the chart was re-published under the same version or the download was altered",
			"%s: the .tgz at %s has digest %s, not spec.source.helmRepository.digest %s%s", where, redactURL(chartURL), got, src.Digest, indexSays)
	}
	chrt, err := loader.LoadArchive(bytes.NewReader(tgz))
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "publish a valid chart (helm package) under a new version and create a release for it",
			"%s: the .tgz at %s is not a valid chart archive: %w", where, redactURL(chartURL), err)
	}
	if chrt.Metadata.Name != src.Chart || chrt.Metadata.Version != src.Version {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "fix the repository: the archive must hold the chart and version its index lists",
			"%s: the .tgz at %s holds chart %s %s", where, redactURL(chartURL), chrt.Metadata.Name, chrt.Metadata.Version)
	}
	return &Content{Format: v1alpha1.FormatChart, Chart: chrt, Name: where}, nil
}

// httpGet reads u, at most limit bytes. Credentials go only to host (the repository's).
func httpGet(ctx context.Context, client *http.Client, u, host string, creds *Credentials, limit int64, what string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", what, redactURLError(err))
	}
	if creds != nil && creds.Username != "" && req.URL.Host == host {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	resp, err := client.Do(req)
	if err != nil {
		// The client's error quotes the URL, with the query and the user name.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redactURL(ue.URL)
		}
		return nil, networkError(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(fmt.Sprintf("%s (GET %s)", what, redactURL(u)), resp.StatusCode, helmRepoAuthFix)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, networkError(what, err)
	}
	if int64(len(data)) > limit {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s is larger than %d MiB", what, limit>>20)
	}
	return data, nil
}

// redactURL is u as messages show it: without user information, query and fragment (which
// may hold credentials or tokens); a string that does not parse as a URL is not shown at all.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	p.User, p.RawQuery, p.ForceQuery, p.Fragment, p.RawFragment = nil, "", false, "", ""
	return p.String()
}

// redactURLError is a url.Parse error without the URL it quotes.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// repoIndex is the part of a Helm repository's index.yaml that rewind reads (helm's
// repo.IndexFile; its package would link helm's kube client and kubectl into the controller).
type repoIndex struct {
	APIVersion string                     `json:"apiVersion"`
	Entries    map[string][]*chartVersion `json:"entries"`
}

type chartVersion struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	URLs    []string `json:"urls"`
	Digest  string   `json:"digest"`
}

// resolveReferenceURL resolves refURL relative to the repository URL baseURL as helm's
// repo.ResolveReferenceURL does: the base is taken as a folder (a trailing slash is added), its
// query is kept for a relative reference.
func resolveReferenceURL(baseURL, refURL string) (string, error) {
	parsedRefURL, err := url.Parse(refURL)
	if err != nil {
		return "", fmt.Errorf("parsing the chart URL %q: %w", redactURL(refURL), redactURLError(err))
	}
	if parsedRefURL.IsAbs() {
		return refURL, nil
	}
	parsedBaseURL, err := url.Parse(baseURL)
	if err != nil {
		return "", fmt.Errorf("parsing the repository URL %q: %w", redactURL(baseURL), redactURLError(err))
	}
	parsedBaseURL.RawPath = strings.TrimSuffix(parsedBaseURL.RawPath, "/") + "/"
	parsedBaseURL.Path = strings.TrimSuffix(parsedBaseURL.Path, "/") + "/"
	resolved := parsedBaseURL.ResolveReference(parsedRefURL)
	resolved.RawQuery = parsedBaseURL.RawQuery
	return resolved.String(), nil
}
