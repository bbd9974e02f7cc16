package release

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	commit   = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39" // a full 40 hex git commit
	digest64 = "sha256:9a29f767217bb37ff4908f8cdde53c33bd89babc544a8722d7559128d47a7651"
)

func TestValidateImage(t *testing.T) {
	cases := []struct {
		name      string
		image     string
		gitCommit string
		want      []string // parts of the error; nil: accepted
	}{
		{name: "digest", image: "example.com/op@" + digest64, gitCommit: commit},
		{name: "digest with tag", image: "example.com/op:v1.2.3@" + digest64, gitCommit: commit},
		{name: "digest, registry with port", image: "localhost:5000/op@" + digest64, gitCommit: commit},
		{name: "full sha tag", image: "example.com/op:" + commit, gitCommit: commit},
		{name: "7 hex prefix tag", image: "example.com/op:" + commit[:7], gitCommit: commit},
		{name: "12 hex prefix tag, registry with port", image: "localhost:5000/op:" + commit[:12], gitCommit: commit},
		{name: "tag longer than the short commit", image: "example.com/op:" + commit, gitCommit: commit[:8]},

		{name: "latest", image: "example.com/op:latest", gitCommit: commit, want: []string{"--image", `image tag "latest" is mutable: pin the image by digest (repo@sha256:<64 hex>) or tag it with the git commit (` + commit + ")"}},
		{name: "stable", image: "example.com/op:stable", gitCommit: commit, want: []string{`image tag "stable" is mutable`}},
		{name: "main", image: "example.com/op:main", gitCommit: commit, want: []string{`image tag "main" is mutable`}},
		{name: "master", image: "example.com/op:master", gitCommit: commit, want: []string{`image tag "master" is mutable`}},
		{name: "dev", image: "example.com/op:dev", gitCommit: commit, want: []string{`image tag "dev" is mutable`}},
		{name: "edge", image: "example.com/op:edge", gitCommit: commit, want: []string{`image tag "edge" is mutable`}},
		{name: "semver tag", image: "example.com/op:v1.2.3", gitCommit: commit, want: []string{`image tag "v1.2.3" is mutable`}},
		{name: "hex tag too short", image: "example.com/op:" + commit[:6], gitCommit: commit, want: []string{`image tag "3f2a9c" is mutable`}},
		{name: "uppercase hex tag", image: "example.com/op:" + strings.ToUpper(commit[:7]), gitCommit: commit, want: []string{"is mutable"}},
		{name: "tag of another commit", image: "example.com/op:abcdef1", gitCommit: commit, want: []string{`image tag "abcdef1" is mutable`, "different commit"}},
		{name: "hex tag without a commit", image: "example.com/op:" + commit[:7], want: []string{"--git-commit is empty"}},
		{name: "no tag no digest", image: "example.com/op", gitCommit: commit, want: []string{"--image", "neither a digest nor a tag"}},
		{name: "registry port is not a tag", image: "localhost:5000/op", gitCommit: commit, want: []string{"neither a digest nor a tag"}},
		{name: "digest too short", image: "example.com/op@" + digest64[:len(digest64)-1], gitCommit: commit, want: []string{"--image", "not sha256:<64 lowercase hex>"}},
		{name: "digest too long", image: "example.com/op@" + digest64 + "0", gitCommit: commit, want: []string{"not sha256:<64 lowercase hex>"}},
		{name: "uppercase digest", image: "example.com/op@" + strings.ToUpper(digest64), gitCommit: commit, want: []string{"not sha256:<64 lowercase hex>"}},
		{name: "other algorithm", image: "example.com/op@sha512:" + strings.Repeat("a", 64), gitCommit: commit, want: []string{"not sha256:<64 lowercase hex>"}},
		{name: "empty", image: "", gitCommit: commit, want: []string{"--image is required"}},
		{name: "digest only", image: "@" + digest64, gitCommit: commit, want: []string{"no repository"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateImage(tc.image, tc.gitCommit)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("ValidateImage(%q, %q) = %v, want nil", tc.image, tc.gitCommit, err)
				}
				return
			}
			wantErr(t, err, tc.want...)
		})
	}
}

func TestValidateVersion(t *testing.T) {
	cases := []struct {
		version string
		ok      bool
	}{
		{"1.4.2", true},
		{"v1.4.2", true},
		{"0.0.0", true},
		{"2.0.0-rc.1", true},
		{"1.0.0-alpha+build.7", true},
		{"1.0.0+20260101", true},
		{"", false},
		{"1.4", false},
		{"1", false},
		{"01.2.3", false},
		{"1.2.3-01", false},
		{"V1.2.3", false},
		{"latest", false},
		{"1.2.3 ", false},
		{"1.2.3-" + strings.Repeat("a", 130), false},
	}
	for _, tc := range cases {
		err := ValidateVersion(tc.version)
		if tc.ok && err != nil {
			t.Errorf("ValidateVersion(%q) = %v, want nil", tc.version, err)
		}
		if !tc.ok {
			if err == nil {
				t.Errorf("ValidateVersion(%q) = nil, want an error", tc.version)
			} else if !strings.Contains(err.Error(), "--version") {
				t.Errorf("ValidateVersion(%q) = %q, want it to name --version", tc.version, err)
			}
		}
	}
}

func TestValidateGitCommit(t *testing.T) {
	cases := []struct {
		commit string
		ok     bool
	}{
		{commit, true},
		{commit[:7], true},
		{commit[:20], true},
		{"", false},
		{commit[:6], false},
		{commit + "a", false},
		{strings.ToUpper(commit[:7]), false},
		{"g123456", false},
		{"main", false},
	}
	for _, tc := range cases {
		err := ValidateGitCommit(tc.commit)
		if tc.ok && err != nil {
			t.Errorf("ValidateGitCommit(%q) = %v, want nil", tc.commit, err)
		}
		if !tc.ok {
			if err == nil {
				t.Errorf("ValidateGitCommit(%q) = nil, want an error", tc.commit)
			} else if !strings.Contains(err.Error(), "--git-commit") {
				t.Errorf("ValidateGitCommit(%q) = %q, want it to name --git-commit", tc.commit, err)
			}
		}
	}
}

func TestCheckImage(t *testing.T) {
	deployment := func(name string, containers, initContainers []string) *unstructured.Unstructured {
		list := func(images []string) []interface{} {
			var out []interface{}
			for i, img := range images {
				out = append(out, map[string]interface{}{"name": "c" + string(rune('0'+i)), "image": img})
			}
			return out
		}
		spec := map[string]interface{}{"containers": list(containers)}
		if initContainers != nil {
			spec["initContainers"] = list(initContainers)
		}
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]interface{}{"name": name, "namespace": "ops"},
			"spec":     map[string]interface{}{"template": map[string]interface{}{"spec": spec}},
		}}
	}
	configMap := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "cm"},
	}}
	manifests, err := RenderManifests("testdata/manifests")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		objs  []*unstructured.Unstructured
		image string
		want  []string // parts of the error; nil: ok
	}{{
		name:  "fixture image",
		objs:  manifests,
		image: imageV1,
	}, {
		name:  "second deployment, sidecar",
		objs:  []*unstructured.Unstructured{configMap, deployment("a", []string{"x"}, nil), deployment("b", []string{"proxy", "op@" + digest64}, nil)},
		image: "op@" + digest64,
	}, {
		name:  "init container",
		objs:  []*unstructured.Unstructured{deployment("a", []string{"x"}, []string{"op:" + commit})},
		image: "op:" + commit,
	}, {
		name:  "fixture with another image",
		objs:  manifests,
		image: imageV2,
		want:  []string{imageV2, "Deployment widget-operator uses " + `"` + imageV1 + `"`, "pass the image the manifests use to --image"},
	}, {
		name:  "image differs only by tag",
		objs:  []*unstructured.Unstructured{deployment("a", []string{"op:" + commit[:7]}, nil), deployment("b", nil, nil)},
		image: "op:" + commit,
		want:  []string{`ops/a uses "op:3f2a9c1"`, "ops/b (no containers)", "--image"},
	}, {
		name:  "no deployment",
		objs:  []*unstructured.Unstructured{configMap},
		image: "op@" + digest64,
		want:  []string{"no Deployment"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckImage(tc.objs, tc.image)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckImage = %v, want nil", err)
				}
				return
			}
			wantErr(t, err, tc.want...)
		})
	}
}
