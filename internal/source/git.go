package source

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

const gitAuthFix = "put a username and password (or access token) or a token in a Secret and name it in spec.source.secretRef; rewind keeps trying"

// FetchGit clones src.URL into memory (no working tree), takes the folder src.Path of commit
// src.Commit and reads it as src.Kind says. Git names every object by its hash, so the files are
// those of that commit. When a branch or tag of the repository points at the commit, only that
// ref is cloned, one commit deep; otherwise every branch and tag is cloned with its history,
// since the commit may be anywhere in it. Symbolic links and submodules in the folder are left
// out.
func FetchGit(ctx context.Context, src *v1alpha1.GitSource, creds *Credentials) (*Content, error) {
	dir := strings.Trim(path.Clean("/"+src.Path), "/")
	where := src.URL + "@" + src.Commit
	if dir != "" {
		where += ":" + dir
	}
	var auth transport.AuthMethod
	var ca []byte
	if creds != nil {
		ca = creds.CA
		switch {
		case creds.Token != "":
			auth = &githttp.TokenAuth{Token: creds.Token}
		case creds.Username != "":
			auth = &githttp.BasicAuth{Username: creds.Username, Password: creds.Password}
		}
	}
	opts := &git.CloneOptions{URL: src.URL, Auth: auth, CABundle: ca, Tags: git.AllTags}
	ref, err := refAt(ctx, src.URL, src.Commit, auth, ca)
	if err != nil {
		return nil, gitError("cloning "+src.URL, err)
	}
	if ref != "" {
		opts.ReferenceName, opts.SingleBranch, opts.Depth, opts.Tags = ref, true, 1, git.NoTags
	}
	repo, err := git.CloneContext(ctx, memory.NewStorage(), nil, opts)
	if err != nil {
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
