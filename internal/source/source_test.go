package source_test

import (
	"encoding/base64"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/source"
	"github.com/rewind-dev/rewind/internal/source/sourcetest"
)

// The sources below are real servers on loopback (see sourcetest); nothing is mocked.

const (
	user, pass = "ci", "s3cret-password"
	token      = "t0ken-for-bearer"
)

// sample writes release version of the sample operator and returns its folder.
func sample(t *testing.T, version string) string {
	t.Helper()
	p, err := mysqloperator.Write(t.TempDir(), version)
	if err != nil {
		t.Fatal(err)
	}
	return p.Dir
}

// checkErr fails unless err is a *source.Error with reason, retry and every part in its text.
func checkErr(t *testing.T, err error, reason string, retry bool, parts ...string) {
	t.Helper()
	t.Logf("%s: %v", reason, err)
	var se *source.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want a *source.Error with reason %s", err, err, reason)
	}
	if se.Reason != reason || se.Retry != retry {
		t.Errorf("reason %s retry %v, want %s retry %v (%v)", se.Reason, se.Retry, reason, retry, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func creds(ca []byte, a sourcetest.Auth) *source.Credentials {
	return &source.Credentials{Username: a.Username, Password: a.Password, Token: a.Token, CA: ca}
}

func TestOCIChart(t *testing.T) {
	auth := sourcetest.Auth{Username: user, Password: pass}
	reg := sourcetest.NewRegistry(t, auth)
	tgz := sourcetest.PackageChart(t, sample(t, "2.0.0"))
	digest := reg.PushChart(t, "charts/mysql-operator", "2.0.0", tgz)
	// Another push under the same tag moves the tag; the old digest stays fetchable.
	v1tgz := sourcetest.PackageChart(t, sample(t, "2.0.0"))
	moved := reg.PushChart(t, "moved/mysql-operator", "2.0.0", v1tgz)
	reg.PushBundle(t, "moved/mysql-operator", "2.0.0", sample(t, "3.0.0"), nil) // the tag now names a bundle image
	good := creds(reg.CA(), auth)

	cases := []struct {
		name string
		src  v1alpha1.OCISource
		// creds sent (nil: anonymous, no CA).
		creds *source.Credentials
		// reason of the failure ("" for success), whether it is retried, and parts of its text.
		reason string
		retry  bool
		says   []string
	}{
		{name: "by digest and tag", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest, Tag: "2.0.0"}, creds: good},
		{name: "by digest", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest}, creds: good},
		{name: "moved tag", src: v1alpha1.OCISource{Repository: reg.Repository("moved/mysql-operator"), Digest: moved, Tag: "2.0.0"}, creds: good,
			reason: v1alpha1.ReasonTagMoved, says: []string{"tag 2.0.0 of oci://" + reg.Repository("moved/mysql-operator") + " now points at sha256:", "not at spec.source.oci.digest " + moved, "create a new OperatorRelease"}},
		{name: "moved tag, digest still fetchable without the tag", src: v1alpha1.OCISource{Repository: reg.Repository("moved/mysql-operator"), Digest: moved}, creds: good},
		{name: "unknown digest", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: sourcetest.Digest([]byte("nothing"))}, creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"not found in the registry", "push the artifact"}},
		{name: "unknown tag", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest, Tag: "9.9.9"}, creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"resolving tag 9.9.9"}},
		{name: "no credentials", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest}, creds: &source.Credentials{CA: reg.CA()},
			reason: v1alpha1.ReasonSourceUnauthorized, retry: true, says: []string{"401", "spec.source.secretRef"}},
		{name: "wrong password", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest},
			creds: creds(reg.CA(), sourcetest.Auth{Username: user, Password: "wrong"}), reason: v1alpha1.ReasonSourceUnauthorized, retry: true, says: []string{"401"}},
		{name: "untrusted certificate", src: v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest},
			reason: v1alpha1.ReasonSourceUnreachable, retry: true, says: []string{"TLS", "ca.crt"}},
		{name: "nobody listening", src: v1alpha1.OCISource{Repository: "127.0.0.1:1/charts/mysql-operator", Digest: digest}, creds: good,
			reason: v1alpha1.ReasonSourceUnreachable, retry: true, says: []string{"127.0.0.1:1", "rewind keeps trying"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := source.FetchOCI(t.Context(), &tc.src, tc.creds)
			if tc.reason != "" {
				checkErr(t, err, tc.reason, tc.retry, tc.says...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != v1alpha1.FormatChart || got.Chart == nil || got.Chart.Metadata.Name != "mysql-operator" || got.Chart.Metadata.Version != "2.0.0" {
				t.Fatalf("got %s %+v, want the chart mysql-operator 2.0.0", got.Format, got.Chart)
			}
		})
	}
	// No error message carries the password.
	_, err := source.FetchOCI(t.Context(), &v1alpha1.OCISource{Repository: reg.Repository("charts/none"), Digest: digest}, creds(reg.CA(), sourcetest.Auth{Username: user, Password: "wrong-" + pass}))
	if err == nil || strings.Contains(err.Error(), pass) {
		t.Errorf("error %v: want one that does not print the password", err)
	}
}

func TestOCIBundle(t *testing.T) {
	reg := sourcetest.NewRegistry(t, sourcetest.Auth{Token: token})
	labels := map[string]string{"operators.operatorframework.io.bundle.mediatype.v1": "registry+v1"}
	digest := reg.PushBundle(t, "bundles/mysql-operator", "v3.0.0", sample(t, "3.0.0"), labels)
	// An image that is not a bundle: the chart folder of 2.0.0 as an image.
	notBundle := reg.PushBundle(t, "bundles/not-a-bundle", "v2.0.0", sample(t, "2.0.0"), nil)

	src := &v1alpha1.OCISource{Repository: reg.Repository("bundles/mysql-operator"), Digest: digest, Tag: "v3.0.0"}
	got, err := source.FetchOCI(t.Context(), src, creds(reg.CA(), sourcetest.Auth{Token: token}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != v1alpha1.FormatBundle || got.Files == nil {
		t.Fatalf("got format %s, want a bundle's files", got.Format)
	}
	for _, f := range []string{"metadata/annotations.yaml", "manifests/mysql-operator.clusterserviceversion.yaml"} {
		if _, err := fs.Stat(got.Files, f); err != nil {
			t.Errorf("the bundle image's files lack %s: %v", f, err)
		}
	}
	objs, info, err := release.RenderBundleFS(got.Files, got.Name, "mysql-operator-system")
	if err != nil {
		t.Fatal(err)
	}
	if info.OperatorVersion != "3.0.0" || len(objs) == 0 {
		t.Errorf("rendered %d objects of bundle %+v, want those of 3.0.0", len(objs), info)
	}

	// A wrong token is a 401; an image that is not a bundle renders to a clear error.
	_, err = source.FetchOCI(t.Context(), src, creds(reg.CA(), sourcetest.Auth{Token: "wrong"}))
	checkErr(t, err, v1alpha1.ReasonSourceUnauthorized, true, "401")
	got, err = source.FetchOCI(t.Context(), &v1alpha1.OCISource{Repository: reg.Repository("bundles/not-a-bundle"), Digest: notBundle}, creds(reg.CA(), sourcetest.Auth{Token: token}))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := release.RenderBundleFS(got.Files, got.Name, "mysql-operator-system"); err == nil || !strings.Contains(err.Error(), "no metadata/annotations.yaml") {
		t.Errorf("rendering an image that is no bundle: %v, want an error naming metadata/annotations.yaml", err)
	}
}

func TestHelmRepository(t *testing.T) {
	auth := sourcetest.Auth{Username: user, Password: pass}
	repo := sourcetest.NewHelmRepo(t, auth)
	tgz := sourcetest.PackageChart(t, sample(t, "2.0.0"))
	digest := repo.Add(t, "mysql-operator-2.0.0.tgz", tgz)
	corrupt := repo.AddCorrupt(t, "mysql-operator", "2.0.1", append([]byte{0x1f, 0x8b}, []byte("not gzip at all")...))
	good := creds(repo.CA(), auth)
	src := func(edit func(*v1alpha1.HelmRepositorySource)) *v1alpha1.HelmRepositorySource {
		s := &v1alpha1.HelmRepositorySource{URL: repo.URL(), Chart: "mysql-operator", Version: "2.0.0", Digest: digest}
		if edit != nil {
			edit(s)
		}
		return s
	}
	cases := []struct {
		name   string
		src    *v1alpha1.HelmRepositorySource
		creds  *source.Credentials
		reason string
		retry  bool
		says   []string
	}{
		{name: "good", src: src(nil), creds: good},
		{name: "trailing slash", src: src(func(s *v1alpha1.HelmRepositorySource) { s.URL += "/" }), creds: good},
		{name: "wrong digest", src: src(func(s *v1alpha1.HelmRepositorySource) { s.Digest = sourcetest.Digest([]byte("other")) }), creds: good,
			reason: v1alpha1.ReasonDigestMismatch, says: []string{"has digest " + digest, "not spec.source.helmRepository.digest", "the repository's index says " + digest}},
		{name: "no credentials", src: src(nil), creds: &source.Credentials{CA: repo.CA()},
			reason: v1alpha1.ReasonSourceUnauthorized, retry: true, says: []string{"401 Unauthorized", "GET " + repo.URL() + "/index.yaml", "spec.source.secretRef"}},
		{name: "unknown version", src: src(func(s *v1alpha1.HelmRepositorySource) { s.Version = "2.0.2" }), creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"has no version 2.0.2 of chart mysql-operator (it has 2.0.0, 2.0.1)"}},
		{name: "unknown chart", src: src(func(s *v1alpha1.HelmRepositorySource) { s.Chart = "postgres-operator" }), creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"has no chart postgres-operator"}},
		{name: "no index", src: src(func(s *v1alpha1.HelmRepositorySource) { s.URL += "/charts" }), creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"404 Not Found"}},
		{name: "corrupt tgz", src: src(func(s *v1alpha1.HelmRepositorySource) { s.Version, s.Digest = "2.0.1", corrupt }), creds: good,
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"is not a valid chart archive"}},
		{name: "bearer token", src: src(nil), creds: creds(repo.CA(), sourcetest.Auth{Token: token}),
			reason: v1alpha1.ReasonCredentialsInvalid, retry: true, says: []string{"basic auth, not a bearer token"}},
		{name: "untrusted certificate", src: src(nil), creds: &source.Credentials{Username: user, Password: pass},
			reason: v1alpha1.ReasonSourceUnreachable, retry: true, says: []string{"TLS", "ca.crt"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := source.FetchHelmRepository(t.Context(), tc.src, tc.creds)
			if tc.reason != "" {
				checkErr(t, err, tc.reason, tc.retry, tc.says...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != v1alpha1.FormatChart || got.Chart.Metadata.Version != "2.0.0" {
				t.Fatalf("got %s %+v, want chart 2.0.0", got.Format, got.Chart.Metadata)
			}
		})
	}

	// The chart re-published under the same version, with other content: the digest pinned
	// in the spec no longer matches.
	other := sourcetest.PackageChart(t, sample(t, "2.0.0"))
	other = append(other[:len(other):len(other)], 0) // trailing byte: other content
	repo.Replace(t, "mysql-operator-2.0.0.tgz", other)
	_, err := source.FetchHelmRepository(t.Context(), src(nil), good)
	checkErr(t, err, v1alpha1.ReasonDigestMismatch, false, "has digest "+sourcetest.Digest(other), "re-published under the same version", "create a new OperatorRelease")
}

// TestHelmRepositoryKeepsCredentialsOutOfErrors: a URL with user information is refused,
// naming the field and where credentials go; no error shows a password or a query token.
func TestHelmRepositoryKeepsCredentialsOutOfErrors(t *testing.T) {
	auth := sourcetest.Auth{Username: user, Password: pass}
	repo := sourcetest.NewHelmRepo(t, auth)
	digest := repo.Add(t, "mysql-operator-2.0.0.tgz", sourcetest.PackageChart(t, sample(t, "2.0.0")))
	withUser := strings.Replace(repo.URL(), "https://", "https://"+user+":"+pass+"@", 1)
	for _, tc := range []struct {
		// name says what the URL holds; url is spec.source.helmRepository.url.
		name, url string
		// creds are those of the Secret.
		creds *source.Credentials
		// reason and says: the error expected.
		reason string
		says   []string
	}{
		{name: "user and password", url: withUser, creds: &source.Credentials{CA: repo.CA()},
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"spec.source.helmRepository.url " + repo.URL() + " carries user information", "spec.source.secretRef"}},
		{name: "user and password, with a Secret too", url: withUser, creds: creds(repo.CA(), auth),
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"spec.source.helmRepository.url", "spec.source.secretRef"}},
		{name: "token in the query, refused", url: repo.URL() + "?sig=" + token, creds: &source.Credentials{CA: repo.CA()},
			reason: v1alpha1.ReasonSourceUnauthorized, says: []string{"401 Unauthorized", "GET " + repo.URL()}},
		{name: "token in the query, server down", url: "https://127.0.0.1:1/charts?sig=" + token, creds: &source.Credentials{CA: repo.CA()},
			reason: v1alpha1.ReasonSourceUnreachable, says: []string{"https://127.0.0.1:1/charts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := source.FetchHelmRepository(t.Context(), &v1alpha1.HelmRepositorySource{URL: tc.url, Chart: "mysql-operator", Version: "2.0.0", Digest: digest}, tc.creds)
			checkErr(t, err, tc.reason, tc.reason != v1alpha1.ReasonSourceInvalid, tc.says...)
			if err == nil {
				return
			}
			var se *source.Error
			errors.As(err, &se)
			for _, secret := range []string{pass, token, "sig="} {
				if strings.Contains(err.Error(), secret) || (se != nil && strings.Contains(se.Fix, secret)) {
					t.Errorf("the error shows %q: %v", secret, err)
				}
			}
		})
	}
}

func TestGit(t *testing.T) {
	srv := sourcetest.NewGitServer(t, sourcetest.Auth{Username: user, Password: pass, Token: token})
	commit := srv.Commit(t, "mysql-operator", "releases 1, 2 and 3", map[string]string{
		"deploy/v1": sample(t, "1.0.0"), "deploy/v2": sample(t, "2.0.0"), "deploy/v3": sample(t, "3.0.0")})
	later := srv.Commit(t, "mysql-operator", "drop 1", map[string]string{"deploy/v4": sample(t, "1.0.0")})
	good := creds(srv.CA(), sourcetest.Auth{Username: user, Password: pass})
	src := func(path, kind string) *v1alpha1.GitSource {
		return &v1alpha1.GitSource{URL: srv.RepoURL("mysql-operator"), Commit: commit, Path: path, Kind: kind}
	}
	cases := []struct {
		name   string
		src    *v1alpha1.GitSource
		creds  *source.Credentials
		reason string
		retry  bool
		says   []string
	}{
		{name: "manifests", src: src("deploy/v1", v1alpha1.FormatManifests), creds: good},
		{name: "chart", src: src("deploy/v2", v1alpha1.FormatChart), creds: good},
		{name: "bundle", src: src("./deploy/v3/", v1alpha1.FormatBundle), creds: good},
		{name: "bearer token", src: src("deploy/v1", v1alpha1.FormatManifests), creds: creds(srv.CA(), sourcetest.Auth{Token: token})},
		{name: "a later commit", src: &v1alpha1.GitSource{URL: srv.RepoURL("mysql-operator"), Commit: later, Path: "deploy/v4", Kind: v1alpha1.FormatManifests}, creds: good},
		{name: "folder not in that commit", src: src("deploy/v4", v1alpha1.FormatManifests), creds: good,
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"commit " + commit, "has no folder deploy/v4", "spec.source.git.path"}},
		{name: "commit that does not exist", src: &v1alpha1.GitSource{URL: srv.RepoURL("mysql-operator"), Commit: strings.Repeat("ab", 20), Kind: v1alpha1.FormatManifests}, creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"commit abababab", "is not in any branch or tag of " + srv.RepoURL("mysql-operator")}},
		{name: "chart kind on a manifests folder", src: src("deploy/v1", v1alpha1.FormatChart), creds: good,
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"is not a Helm chart", "spec.source.git.kind"}},
		{name: "no credentials", src: src("deploy/v1", v1alpha1.FormatManifests), creds: &source.Credentials{CA: srv.CA()},
			reason: v1alpha1.ReasonSourceUnauthorized, retry: true, says: []string{"authentication required", "spec.source.secretRef"}},
		{name: "wrong password", src: src("deploy/v1", v1alpha1.FormatManifests), creds: creds(srv.CA(), sourcetest.Auth{Username: user, Password: "wrong"}),
			reason: v1alpha1.ReasonSourceUnauthorized, retry: true},
		{name: "unknown repository", src: &v1alpha1.GitSource{URL: srv.RepoURL("postgres-operator"), Commit: commit, Kind: v1alpha1.FormatManifests}, creds: good,
			reason: v1alpha1.ReasonSourceNotFound, retry: true, says: []string{"repository not found"}},
		{name: "untrusted certificate", src: src("deploy/v1", v1alpha1.FormatManifests), creds: &source.Credentials{Username: user, Password: pass},
			reason: v1alpha1.ReasonSourceUnreachable, retry: true, says: []string{"ca.crt"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := source.FetchGit(t.Context(), tc.src, tc.creds)
			if tc.reason != "" {
				checkErr(t, err, tc.reason, tc.retry, tc.says...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Format != tc.src.Kind {
				t.Errorf("format %s, want %s", got.Format, tc.src.Kind)
			}
			var n int
			switch got.Format {
			case v1alpha1.FormatManifests:
				objs, err := release.RenderManifestsFS(got.Files, got.Name)
				if err != nil {
					t.Fatal(err)
				}
				n = len(objs)
			case v1alpha1.FormatChart:
				objs, _, err := release.RenderLoadedChart(got.Chart, nil, "mysql-operator", "mysql-operator-system")
				if err != nil {
					t.Fatal(err)
				}
				n = len(objs)
			case v1alpha1.FormatBundle:
				objs, _, err := release.RenderBundleFS(got.Files, got.Name, "mysql-operator-system")
				if err != nil {
					t.Fatal(err)
				}
				n = len(objs)
			}
			if n == 0 {
				t.Errorf("%s renders no objects", got.Name)
			}
		})
	}
}

// TestGitShallow: a commit that a branch or tag points at is fetched one commit deep (the fetch
// asks the server for a shallow history); a commit in the middle of the history is found too,
// by deepening a shallow fetch (this server does not serve a commit by its SHA).
func TestGitShallow(t *testing.T) {
	srv := sourcetest.NewGitServer(t, sourcetest.Auth{Username: user, Password: pass})
	tagged := srv.Commit(t, "mysql-operator", "release 1", map[string]string{"deploy/a": sample(t, "1.0.0")})
	srv.Tag(t, "mysql-operator", "v1.0.0", tagged)
	middle := srv.Commit(t, "mysql-operator", "release 2", map[string]string{"deploy/b": sample(t, "1.0.0")})
	tip := srv.Commit(t, "mysql-operator", "release 3", map[string]string{"deploy/c": sample(t, "1.0.0")})
	good := creds(srv.CA(), sourcetest.Auth{Username: user, Password: pass})
	for _, tc := range []struct {
		// name says where the commit is; dir is the folder it adds.
		name, commit, dir string
		// shallow is whether the fetch should ask for a shallow history.
		shallow bool
	}{
		{name: "tip of the branch", commit: tip, dir: "deploy/c", shallow: true},
		{name: "annotated tag", commit: tagged, dir: "deploy/a", shallow: true},
		{name: "middle of the history", commit: middle, dir: "deploy/b", shallow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.ShallowFetches()
			got, err := source.FetchGit(t.Context(), &v1alpha1.GitSource{URL: srv.RepoURL("mysql-operator"), Commit: tc.commit, Path: tc.dir, Kind: v1alpha1.FormatManifests}, good)
			if err != nil {
				t.Fatal(err)
			}
			if objs, err := release.RenderManifestsFS(got.Files, got.Name); err != nil || len(objs) == 0 {
				t.Fatalf("%s renders %d objects: %v", got.Name, len(objs), err)
			}
			if shallow := srv.ShallowFetches() > before; shallow != tc.shallow {
				t.Errorf("shallow fetch %t, want %t", shallow, tc.shallow)
			}
		})
	}
}

func TestOCIPlainHTTPAndDockerConfig(t *testing.T) {
	// A plain-HTTP registry is used only with insecure.
	plain, _ := sourcetest.NewPlainRegistry(t)
	digest := plain.PushBundle(t, "bundles/mysql-operator", "v3.0.0", sample(t, "3.0.0"), nil)
	src := &v1alpha1.OCISource{Repository: plain.Repository("bundles/mysql-operator"), Digest: digest}
	_, err := source.FetchOCI(t.Context(), src, nil)
	checkErr(t, err, v1alpha1.ReasonSourceUnreachable, true, "plain HTTP is refused (set spec.source.oci.insecure to allow it)")
	src.Insecure = true
	if got, err := source.FetchOCI(t.Context(), src, nil); err != nil || got.Format != v1alpha1.FormatBundle {
		t.Fatalf("insecure: %v", err)
	}

	// An image pull Secret's .dockerconfigjson authenticates as its username and password.
	auth := sourcetest.Auth{Username: user, Password: pass}
	reg := sourcetest.NewRegistry(t, auth)
	digest = reg.PushBundle(t, "bundles/mysql-operator", "v3.0.0", sample(t, "3.0.0"), nil)
	dockerConfig := func(host, u, p string) []byte {
		return []byte(`{"auths":{"` + host + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) + `"}}}`)
	}
	src = &v1alpha1.OCISource{Repository: reg.Repository("bundles/mysql-operator"), Digest: digest}
	if _, err := source.FetchOCI(t.Context(), src, &source.Credentials{CA: reg.CA(), DockerConfig: dockerConfig(reg.Host(), user, pass)}); err != nil {
		t.Fatalf(".dockerconfigjson: %v", err)
	}
	_, err = source.FetchOCI(t.Context(), src, &source.Credentials{CA: reg.CA(), DockerConfig: dockerConfig("other.example.com", user, pass)})
	checkErr(t, err, v1alpha1.ReasonSourceUnauthorized, true, "401")
	_, err = source.FetchOCI(t.Context(), src, &source.Credentials{CA: reg.CA(), DockerConfig: []byte("{not json")})
	checkErr(t, err, v1alpha1.ReasonCredentialsInvalid, true, ".dockerconfigjson")
}

func TestCredentialsFromSecretData(t *testing.T) {
	cases := []struct {
		data    map[string][]byte
		problem string
	}{
		{data: map[string][]byte{"username": []byte("u"), "password": []byte("p")}},
		{data: map[string][]byte{"token": []byte("t")}},
		{data: map[string][]byte{"other": []byte("x")}, problem: "none of the keys username and password, token, .dockerconfigjson, ca.crt"},
		{data: map[string][]byte{"username": []byte("u")}, problem: "only one of username and password"},
		{data: map[string][]byte{"ca.crt": []byte("not pem")}, problem: "ca.crt holds no PEM certificate"},
	}
	for _, tc := range cases {
		_, err := source.FromSecretData(tc.data)
		if tc.problem == "" && err != nil || tc.problem != "" && (err == nil || !strings.Contains(err.Error(), tc.problem)) {
			t.Errorf("%v: %v, want %q", tc.data, err, tc.problem)
		}
	}
}
