package source

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

const gitAuthFix = "put a username and password (or access token) or a token in a Secret and name it in spec.source.secretRef; rewind keeps trying"

// FetchGit fetches commit src.Commit of src.URL shallow (one commit deep when it can) into a
// temporary folder on disk (a bare repository, removed before it returns: objects are cached in
// memory up to gitCacheSize and large ones streamed, never the history in memory), takes
// the folder src.Path of that commit and reads it as src.Kind says. Git names every object by
// its hash, so the files are those of that commit. The commit is fetched
//   - through a branch or tag that points at it (directly, or through an annotated tag): that
//     ref alone, one commit deep;
//   - otherwise by its SHA, one commit deep, from a server that allows it (it advertises
//     allow-reachable-sha1-in-want or allow-tip-sha1-in-want, as Git forges do);
//   - otherwise every branch and tag is fetched one commit deep and then deepened (to
//     deepenSteps commits, then the whole history) until the commit is there.
//
// Symbolic links and submodules in the folder are left out.
func FetchGit(ctx context.Context, src *v1alpha1.GitSource, creds *Credentials) (*Content, error) {
	dir := strings.Trim(path.Clean("/"+src.Path), "/")
	where := src.URL + "@" + src.Commit
	if dir != "" {
		where += ":" + dir
	}
	auth := gitAuth(creds)
	var ca []byte
	if creds != nil {
		ca = creds.CA
	}
	ref, err := refAt(ctx, src.URL, src.Commit, auth, ca)
	if err != nil {
		return nil, gitError("cloning "+src.URL, err)
	}
	tmp, err := os.MkdirTemp("", "rewind-git-")
	if err != nil {
		return nil, &Error{Reason: v1alpha1.ReasonSourceUnreachable, Retry: true, Err: fmt.Errorf("cloning %s: %w", src.URL, err),
			Fix: "the controller needs a writable temporary folder ($TMPDIR); rewind keeps trying"}
	}
	defer os.RemoveAll(tmp)
	repo, storage, err := initShallowRepo(tmp, src.URL)
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceUnreachable, true, "rewind keeps trying", "cloning %s: %w", src.URL, err)
	}
	defer storage.Close()
	f := &gitFetch{repo: repo, auth: auth, ca: ca, commit: plumbing.NewHash(src.Commit)}
	if err := f.fetch(ctx, ref); err != nil {
		return nil, gitError("cloning "+src.URL, err)
	}
	commit, err := repo.CommitObject(plumbing.NewHash(src.Commit))
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, fail(v1alpha1.ReasonSourceNotFound, true, "check spec.source.git.commit (the full SHA of a commit reachable from a branch or tag), or push it; rewind keeps trying",
			"commit %s is not in any branch or tag of %s", src.Commit, src.URL)
	}
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "reading commit %s of %s: %w", src.Commit, src.URL, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "reading commit %s of %s: %w", src.Commit, src.URL, err)
	}
	if dir != "" {
		tree, err = tree.Tree(dir)
		if err != nil && !errors.Is(err, object.ErrDirectoryNotFound) {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "reading folder %s of commit %s of %s: %w", dir, src.Commit, src.URL, err)
		}
		if err != nil {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "fix spec.source.git.path: a folder of that commit, relative to the repository root",
				"commit %s of %s has no folder %s", src.Commit, src.URL, dir)
		}
	}
	files := newMemFiles(where)
	err = tree.Files().ForEach(func(f *object.File) error {
		if f.Mode == filemode.Symlink || f.Mode == filemode.Submodule {
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		mode, _ := f.Mode.ToOSFileMode()
		return files.add(f.Name, mode, r, f.Size)
	})
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", where, err)
	}
	root, err := files.sub(".")
	if err != nil {
		return nil, fail(v1alpha1.ReasonSourceInvalid, false, "", "%s: %w", where, err)
	}
	content := &Content{Format: src.Kind, Files: root, Name: where}
	if src.Kind == v1alpha1.FormatChart {
		content.Chart, err = release.LoadChartFS(root)
		if err != nil {
			return nil, fail(v1alpha1.ReasonSourceInvalid, false, "fix spec.source.git.path or spec.source.git.kind: the folder must be a Helm chart (Chart.yaml, templates/)",
				"%s is not a Helm chart: %w", where, err)
		}
		content.Files = nil
	}
	return content, nil
}

// gitAuth is how creds authenticate to a Git server over HTTP (nil: anonymously).
func gitAuth(creds *Credentials) transport.AuthMethod {
	switch {
	case creds == nil:
		return nil
	case creds.Token != "":
		return &githttp.TokenAuth{Token: creds.Token}
	case creds.Username != "":
		return &githttp.BasicAuth{Username: creds.Username, Password: creds.Password}
	}
	return nil
}

// refAt is a branch or tag of the repository at url that points at commit (directly, or
// through an annotated tag), "" when none does. Branches are preferred to tags.
func refAt(ctx context.Context, url, commit string, auth transport.AuthMethod, ca []byte) (plumbing.ReferenceName, error) {
	remote := git.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: auth, CABundle: ca, PeelingOption: git.AppendPeeled})
	if err != nil {
		return "", err
	}
	want := plumbing.NewHash(commit)
	var tag plumbing.ReferenceName
	for _, r := range refs {
		if r.Type() != plumbing.HashReference || r.Hash() != want {
			continue
		}
		// A peeled annotated tag is listed as refs/tags/NAME^{}; the clone names the tag.
		name := plumbing.ReferenceName(strings.TrimSuffix(r.Name().String(), "^{}"))
		switch {
		case name.IsBranch():
			return name, nil
		case name.IsTag() && tag == "":
			tag = name
		}
	}
	return tag, nil
}

// gitError words a failed clone.
func gitError(what string, err error) error {
	var herr *githttp.Err
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed):
		return &Error{Reason: v1alpha1.ReasonSourceUnauthorized, Retry: true, Err: fmt.Errorf("%s: %w", what, err), Fix: gitAuthFix}
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return &Error{Reason: v1alpha1.ReasonSourceNotFound, Retry: true, Err: fmt.Errorf("%s: %w", what, err),
			Fix: "check spec.source.git.url (a private repository may also answer not found without credentials); rewind keeps trying"}
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return &Error{Reason: v1alpha1.ReasonSourceNotFound, Retry: true, Err: fmt.Errorf("%s: %w", what, err), Fix: "push the commit of spec.source.git.commit; rewind keeps trying"}
	case errors.As(err, &herr) && herr.Response != nil:
		return statusError(what, herr.Response.StatusCode, gitAuthFix)
	case isNetworkError(err), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return networkError(what, err)
	}
	return &Error{Reason: v1alpha1.ReasonSourceUnreachable, Retry: true, Err: fmt.Errorf("%s: %w", what, err), Fix: "rewind keeps trying"}
}

// Memory bounds of a Git fetch: the objects go to disk; at most gitCacheSize of them are
// cached in memory, and an object larger than gitLargeObject is streamed from its pack, never
// read whole.
const (
	gitCacheSize   = 8 * cache.MiByte
	gitLargeObject = 1 << 20
)

// deepenSteps are the depths a fetch of every branch and tag goes to, in turn, looking for a
// commit no ref points at on a server that does not serve a commit by its SHA; after the last,
// the whole history is fetched.
var deepenSteps = []int{16, 256, 4096}

// unshallow is the depth that fetches the whole history (what git fetch --unshallow asks).
const unshallow = math.MaxInt32

// pinnedRef is where a commit fetched by its SHA is kept in the temporary repository.
const pinnedRef = "refs/rewind/pinned"

// initShallowRepo makes an empty bare repository in dir with url as its remote origin.
func initShallowRepo(dir, url string) (*git.Repository, *filesystem.Storage, error) {
	storage := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRU(gitCacheSize),
		filesystem.Options{ExclusiveAccess: true, LargeObjectThreshold: gitLargeObject})
	repo, err := git.Init(storage, nil)
	if err != nil {
		storage.Close()
		return nil, nil, err
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{url}}); err != nil {
		storage.Close()
		return nil, nil, err
	}
	return repo, storage, nil
}

// gitFetch fetches one commit into a repository.
type gitFetch struct {
	repo   *git.Repository
	auth   transport.AuthMethod
	ca     []byte
	commit plumbing.Hash
	// depths are the depths fetched, in order (tests read them).
	depths []int
}

// fetch brings the commit into the repository; see FetchGit. A commit that is nowhere in the
// repository is not an error here: the commit is then missing from the repository.
func (f *gitFetch) fetch(ctx context.Context, ref plumbing.ReferenceName) error {
	if ref != "" {
		return f.run(ctx, 1, config.RefSpec("+"+ref+":"+ref))
	}
	err := f.run(ctx, 1, config.RefSpec("+"+f.commit.String()+":"+pinnedRef))
	switch {
	case err == nil && f.has():
		return nil
	case ctx.Err() != nil:
		return err
	}
	// Not served by its SHA: the server does not allow it (git.ErrExactSHA1NotSupported), or
	// refused this commit (go-git keeps no type for the server's "not our ref": a commit it
	// does not have or does not let us see), or the fetch failed otherwise (the fetches below
	// then meet the same failure and return it). Look for it in the history of every branch
	// and tag.
	all := []config.RefSpec{"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"}
	for _, depth := range append(append([]int{1}, deepenSteps...), unshallow) {
		if err := f.run(ctx, depth, all...); err != nil {
			return err
		}
		if f.has() {
			return nil
		}
	}
	return nil
}

// run fetches specs to depth (unshallow: the whole history).
func (f *gitFetch) run(ctx context.Context, depth int, specs ...config.RefSpec) error {
	f.depths = append(f.depths, depth)
	err := f.repo.FetchContext(ctx, &git.FetchOptions{RemoteName: git.DefaultRemoteName, RefSpecs: specs, Depth: depth,
		Auth: f.auth, CABundle: f.ca, Tags: git.NoTags, Force: true})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return err
}

// has says whether the commit is in the repository.
func (f *gitFetch) has() bool {
	_, err := f.repo.CommitObject(f.commit)
	return err == nil
}
