//go:build !unit

package cli

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/source/sourcetest"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// rewind release create with a source creates the OperatorRelease and waits until the
// controller has fetched and stored it, or prints why it could not.
func TestReleaseCreateFromSources(t *testing.T) {
	c := hubClient(t)
	auth := sourcetest.Auth{Username: "ci", Password: "s3cret-password"}
	reg := sourcetest.NewRegistry(t, auth)
	repo := sourcetest.NewHelmRepo(t, auth)
	git := sourcetest.NewGitServer(t, auth)
	var pkgs []mysqloperator.Package
	for _, v := range []string{"1.0.0", "2.0.0", "3.0.0"} {
		p, err := mysqloperator.Write(t.TempDir(), v)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	v1, v2, v3 := pkgs[0], pkgs[1], pkgs[2]
	tgz := sourcetest.PackageChart(t, v2.Dir)
	chartDigest := reg.PushChart(t, "charts/mysql-operator", "2.0.0", tgz)
	bundleDigest := reg.PushBundle(t, "bundles/mysql-operator", "v3.0.0", v3.Dir, nil)
	tgzDigest := repo.Add(t, "mysql-operator-2.0.0.tgz", tgz)
	commit := git.Commit(t, "mysql-operator", "release 1", map[string]string{"deploy/v1": v1.Dir})
	startManager(t)

	digest := func(p mysqloperator.Package) string {
		objs, err := p.Render("mysql-operator-system")
		if err != nil {
			t.Fatal(err)
		}
		canonical, err := release.Canonical(objs)
		if err != nil {
			t.Fatal(err)
		}
		return release.Digest(canonical)
	}
	common := func(p mysqloperator.Package) []string {
		return []string{"--operator", "mysql-operator", "--version", p.Build.Version, "--git-commit", p.Build.GitCommit, "--image", p.Build.Image()}
	}
	cases := []struct {
		name string
		args []string
		ca   []byte
		// want are parts of the output; problem of the error ("" for success).
		want    []string
		problem string
	}{
		{name: "oci chart", ca: reg.CA(),
			args: append(common(v2), "--from", "oci://"+reg.Repository("charts/mysql-operator")+":2.0.0@"+chartDigest),
			want: []string{"operatorrelease/mysql created: mysql-operator 2.0.0", "digest " + digest(v2), "mysqlclusters.database.example.com"}},
		{name: "oci bundle", ca: reg.CA(),
			args: append(common(v3), "--from", "oci://"+reg.Repository("bundles/mysql-operator")+"@"+bundleDigest),
			want: []string{"operatorrelease/mysql created: mysql-operator 3.0.0", "digest " + digest(v3)}},
		{name: "helm repository", ca: repo.CA(),
			args: append(common(v2), "--repo", repo.URL(), "--chart", "mysql-operator", "--chart-version", "2.0.0", "--chart-digest", tgzDigest),
			want: []string{"digest " + digest(v2)}},
		{name: "git", ca: git.CA(),
			args: append(common(v1), "--git", git.RepoURL("mysql-operator"), "--commit", commit, "--path", "deploy/v1", "--kind", "manifests"),
			want: []string{"digest " + digest(v1)}},
		{name: "git, no wait", ca: git.CA(),
			args: append(common(v1), "--git", git.RepoURL("mysql-operator"), "--commit", commit, "--path", "deploy/v1", "--kind", "manifests", "--no-wait"),
			want: []string{"operatorrelease/mysql created", "the controller fetches it"}},
		{name: "wrong chart digest", ca: repo.CA(),
			args:    append(common(v2), "--repo", repo.URL(), "--chart", "mysql-operator", "--chart-version", "2.0.0", "--chart-digest", sourcetest.Digest([]byte("x"))),
			problem: "operatorrelease/mysql is not ready: DigestMismatch: chart mysql-operator 2.0.0 of " + repo.URL()},
		{name: "no credentials", ca: nil,
			args:    append(common(v1), "--git", git.RepoURL("mysql-operator"), "--commit", commit, "--path", "deploy/v1", "--kind", "manifests"),
			problem: "is not ready: SourceUnreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := testenv.Namespace(t, env.Hub.RESTConfig())
			args := append([]string{"release", "create", "mysql"}, tc.args...)
			if tc.ca != nil {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source"},
					Data: map[string][]byte{"username": []byte(auth.Username), "password": []byte(auth.Password), "ca.crt": tc.ca}}
				if err := c.Create(t.Context(), s); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--secret", "source")
			}
			out, err := run(t.Context(), append(args, hubArgs(ns)...)...)
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("err %v, want one saying %q; output:\n%s", err, tc.problem, out)
				}
				if strings.Contains(err.Error(), auth.Password) {
					t.Errorf("the error prints the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output does not say %q:\n%s", w, out)
				}
			}
			// Creating the same release again changes nothing.
			if !strings.Contains(strings.Join(args, " "), "--no-wait") {
				again, err := run(t.Context(), append(args, hubArgs(ns)...)...)
				if err != nil || !strings.Contains(again, "operatorrelease/mysql unchanged") {
					t.Errorf("again: %v\n%s", err, again)
				}
			}
		})
	}
}
