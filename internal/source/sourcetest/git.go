package sourcetest

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// GitServer serves the bare repositories of a folder over smart HTTP (git http-backend, the
// CGI program that ships with git, as a Git forge runs it), behind TLS and auth.
type GitServer struct {
	server
	root string
	// shallow counts the fetches that asked for a shallow history (a deepen line).
	shallow atomic.Int64
}

// NewGitServer starts a Git server that requires auth, stopped when the test ends.
func NewGitServer(t testing.TB, auth Auth) *GitServer {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("the Git server of the tests runs git http-backend: %v", err)
	}
	root := t.TempDir()
	h := &cgi.Handler{Path: git, Args: []string{"http-backend"},
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}, Stderr: io.Discard}
	g := &GitServer{root: root}
	count := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if bytes.Contains(body, []byte("deepen ")) {
				g.shallow.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	})
	g.server = startTLS(t, auth.wrap(count))
	return g
}

// ShallowFetches is how many fetches so far asked for a shallow history.
func (g *GitServer) ShallowFetches() int { return int(g.shallow.Load()) }

// Tag adds an annotated tag to repository name that points at commit.
func (g *GitServer) Tag(t testing.TB, name, tag, commit string) {
	t.Helper()
	storage := filesystem.NewStorage(osfs.New(filepath.Join(g.root, name+".git")), cache.NewObjectLRUDefault())
	repo, err := git.Open(storage, nil)
	if err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "rewind test", Email: "test@rewind.dev", When: time.Unix(1767225600, 0)}
	if _, err := repo.CreateTag(tag, plumbing.NewHash(commit), &git.CreateTagOptions{Tagger: sig, Message: "release " + tag}); err != nil {
		t.Fatal(err)
	}
}

// AllowFetchBySHA lets clients of repository name fetch any commit reachable from a ref by its
// SHA (uploadpack.allowReachableSHA1InWant, as Git forges allow); by default git serves only
// what its refs point at.
func (g *GitServer) AllowFetchBySHA(t testing.TB, name string) {
	t.Helper()
	storage := filesystem.NewStorage(osfs.New(filepath.Join(g.root, name+".git")), cache.NewObjectLRUDefault())
	repo, err := git.Open(storage, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := repo.Config()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Raw.Section("uploadpack").SetOption("allowReachableSHA1InWant", "true")
	if err := repo.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// URL of repository name (https://HOST/name.git).
func (g *GitServer) RepoURL(name string) string { return g.URL() + "/" + name + ".git" }

// Commit adds a commit to repository name (created bare when it does not exist) on branch main
// whose tree is the files of each folder of dirs (path in the repository -> folder on disk),
// written with go-git; it returns the commit's SHA.
func (g *GitServer) Commit(t testing.TB, name, message string, dirs map[string]string) string {
	t.Helper()
	bare := filepath.Join(g.root, name+".git")
	storage := filesystem.NewStorage(osfs.New(bare), cache.NewObjectLRUDefault())
	work := memfs.New()
	repo, err := git.Open(storage, work)
	if err != nil {
		repo, err = git.Init(storage, work)
	}
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if head, err := repo.Head(); err == nil {
		if err := wt.Checkout(&git.CheckoutOptions{Branch: head.Name(), Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	for dest, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			target := filepath.ToSlash(filepath.Join(dest, rel))
			if err := work.MkdirAll(filepath.ToSlash(filepath.Dir(target)), 0o755); err != nil {
				return err
			}
			f, err := work.Create(target)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			_, err = wt.Add(target)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sig := &object.Signature{Name: "rewind test", Email: "test@rewind.dev", When: time.Unix(1767225600, 0)}
	hash, err := wt.Commit(message, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		t.Fatal(err)
	}
	return hash.String()
}
