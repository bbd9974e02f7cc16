package release

import (
	"fmt"
	"regexp"
	"strings"
)

// The checks below mirror the validation rules of the OperatorRelease CRD so that the CLI can
// refuse bad input before it sends anything. Their errors name the CLI flag.

var (
	gitCommitRE = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
	digestRE    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hexTagRE    = regexp.MustCompile(`^[0-9a-f]{7,40}$`)
)

// mutableTags are tags that are moved from image to image by convention.
var mutableTags = map[string]bool{"latest": true, "stable": true, "main": true, "master": true, "dev": true, "edge": true}

// ValidateVersion checks a release version: SemVer 2.0 with an optional leading v.
func ValidateVersion(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("--version is required: the release's SemVer version, e.g. 1.4.2")
	case len(v) > 128:
		return fmt.Errorf("--version %q is longer than 128 characters", v)
	case !semverRE.MatchString(v):
		return fmt.Errorf("--version %q is not a SemVer 2.0 version such as 1.4.2, v1.4.2 or 2.0.0-rc.1", v)
	}
	return nil
}

// ValidateGitCommit checks a git commit: 7 to 40 lowercase hex characters.
func ValidateGitCommit(c string) error {
	switch {
	case c == "":
		return fmt.Errorf("--git-commit is required: the commit the operator image was built from (7 to 40 lowercase hex characters)")
	case !gitCommitRE.MatchString(c):
		return fmt.Errorf("--git-commit %q is not a git commit: 7 to 40 lowercase hex characters", c)
	}
	return nil
}

// ValidateImage checks that image is pinned: by digest (repo@sha256:<64 lowercase hex>), or by
// a tag of 7 to 40 lowercase hex characters that is gitCommit, a prefix of it, or has it as a
// prefix. Mutable tags (latest, stable, main, master, dev, edge and any other tag) are refused.
func ValidateImage(image, gitCommit string) error {
	if image == "" {
		return fmt.Errorf("--image is required: the operator image, pinned by digest (repo@sha256:<64 hex>) or by a git commit tag")
	}
	if len(image) > 512 {
		return fmt.Errorf("--image %q is longer than 512 characters", image)
	}
	if strings.ContainsAny(image, " \t\n") {
		return fmt.Errorf("--image %q contains whitespace", image)
	}
	if at := strings.LastIndex(image, "@"); at >= 0 {
		if at == 0 {
			return fmt.Errorf("--image %q has no repository before the digest", image)
		}
		digest := image[at+1:]
		if !digestRE.MatchString(digest) {
			return fmt.Errorf("--image %q: digest %q is not sha256:<64 lowercase hex>", image, digest)
		}
		return nil
	}
	commit := gitCommit
	if commit == "" {
		commit = "--git-commit"
	}
	// The tag follows the last ':' after the last '/' (a ':' before it is a registry port).
	colon := strings.LastIndex(image, ":")
	if colon < 0 || colon < strings.LastIndex(image, "/") {
		return fmt.Errorf("--image %q has neither a digest nor a tag (which means latest): pin the image by digest (repo@sha256:<64 hex>) or tag it with the git commit (%s)", image, commit)
	}
	if colon == 0 {
		return fmt.Errorf("--image %q has no repository before the tag", image)
	}
	tag := image[colon+1:]
	mutable := fmt.Errorf("--image: image tag %q is mutable: pin the image by digest (repo@sha256:<64 hex>) or tag it with the git commit (%s)", tag, commit)
	if mutableTags[tag] || !hexTagRE.MatchString(tag) {
		return mutable
	}
	if gitCommit == "" {
		return fmt.Errorf("--image: image tag %q looks like a git commit, but --git-commit is empty; pass the commit the image was built from", tag)
	}
	if strings.HasPrefix(gitCommit, tag) || strings.HasPrefix(tag, gitCommit) {
		return nil
	}
	return fmt.Errorf("%w; the tag names a different commit than --git-commit", mutable)
}
