package source

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/source/sourcetest"
)

// manyCommits makes repository name with n commits on main, each adding one file, and
// returns their SHAs, oldest first.
func manyCommits(t *testing.T, srv *sourcetest.GitServer, name string, n int) []string {
	t.Helper()
	var shas []string
	for i := range n {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "file.yaml"), []byte(fmt.Sprintf("# commit %d\n", i)), 0o600); err != nil {
			t.Fatal(err)
		}
		shas = append(shas, srv.Commit(t, name, fmt.Sprintf("commit %d", i), map[string]string{fmt.Sprintf("c/%03d", i): dir}))
	}
	return shas
}

// commitsIn counts the distinct commits a fetch brought (a pack of a deepening fetch may hold
// a commit an earlier pack has).
func commitsIn(t *testing.T, f *gitFetch) int {
	t.Helper()
	iter, err := f.repo.CommitObjects()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[plumbing.Hash]bool{}
	if err := iter.ForEach(func(c *object.Commit) error { seen[c.Hash] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return len(seen)
}

// A commit in the middle of a long history is fetched shallow, to disk: by its SHA alone (one
// commit's objects) from a server that serves commits by SHA, and otherwise by deepening a
// shallow fetch of the refs only as far as needed, never the whole history.
func TestGitFetchIsShallow(t *testing.T) {
	const n = 40
	auth := sourcetest.Auth{Username: "ci", Password: "s3cret-password"}
	srv := sourcetest.NewGitServer(t, auth)
	shas := map[string][]string{"bysha": manyCommits(t, srv, "bysha", n), "plain": manyCommits(t, srv, "plain", n)}
	srv.AllowFetchBySHA(t, "bysha")
	creds := &Credentials{Username: auth.Username, Password: auth.Password, CA: srv.CA()}
	for _, tc := range []struct {
		name, repo string
		// commit is the index of the commit fetched.
		commit int
		// wantDepths are the depths fetched, in order.
		wantDepths []int
		// maxCommits bounds the commits fetched.
		maxCommits int
	}{
		{name: "by SHA", repo: "bysha", commit: 5, wantDepths: []int{1}, maxCommits: 1},
		{name: "deepened", repo: "plain", commit: n - 10, wantDepths: []int{1, 1, 16}, maxCommits: 16},
		{name: "deepened further", repo: "plain", commit: 5, wantDepths: []int{1, 1, 16, 256}, maxCommits: n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			repo, storage, err := initShallowRepo(dir, srv.RepoURL(tc.repo))
			if err != nil {
				t.Fatal(err)
			}
			defer storage.Close()
			f := &gitFetch{repo: repo, auth: gitAuth(creds), ca: creds.CA, commit: plumbing.NewHash(shas[tc.repo][tc.commit])}
			if err := f.fetch(t.Context(), ""); err != nil {
				t.Fatal(err)
			}
			if !f.has() {
				t.Fatalf("commit %d is not in the repository", tc.commit)
			}
			if !slices.Equal(f.depths, tc.wantDepths) {
				t.Errorf("fetched to depths %v, want %v", f.depths, tc.wantDepths)
			}
			if got := commitsIn(t, f); got > tc.maxCommits {
				t.Errorf("%d commits fetched, want at most %d of the %d", got, tc.maxCommits, n)
			}
			shallow, err := storage.Shallow()
			if err != nil || len(shallow) == 0 {
				t.Errorf("the repository is not shallow (%v)", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "objects", "pack")); err != nil {
				t.Errorf("the objects are not on disk: %v", err)
			}
		})
	}
}

// FetchGit leaves nothing in the temporary folder, whether it succeeds or fails; a commit that
// is nowhere in a repository that serves commits by SHA is still "not in any branch or tag".
func TestGitLeavesNothingOnDisk(t *testing.T) {
	auth := sourcetest.Auth{Username: "ci", Password: "s3cret-password"}
	srv := sourcetest.NewGitServer(t, auth)
	shas := manyCommits(t, srv, "repo", 3)
	srv.AllowFetchBySHA(t, "repo")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	creds := &Credentials{Username: auth.Username, Password: auth.Password, CA: srv.CA()}
	for _, tc := range []struct {
		// commit and path are what is fetched; wantReason is the failure's reason ("" none).
		commit, path, wantReason string
	}{
		{commit: shas[1], path: "c/001"},
		{commit: shas[1], path: "c/002", wantReason: v1alpha1.ReasonSourceInvalid},                   // not in that commit
		{commit: strings.Repeat("ab", 20), path: "c/001", wantReason: v1alpha1.ReasonSourceNotFound}, // no such commit
	} {
		src := &v1alpha1.GitSource{URL: srv.RepoURL("repo"), Commit: tc.commit, Path: tc.path, Kind: v1alpha1.FormatManifests}
		_, err := FetchGit(t.Context(), src, creds)
		var se *Error
		switch {
		case tc.wantReason == "" && err != nil:
			t.Errorf("%s:%s: %v", tc.commit, tc.path, err)
		case tc.wantReason != "" && (!errors.As(err, &se) || se.Reason != tc.wantReason):
			t.Errorf("%s:%s: %v; want a failure with reason %s", tc.commit, tc.path, err, tc.wantReason)
		}
		left, err := os.ReadDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("%s:%s: %d entries left in the temporary folder, first %s", tc.commit, tc.path, len(left), left[0].Name())
		}
	}
}
