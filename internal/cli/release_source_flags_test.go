package cli

import (
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestParseOCIRef(t *testing.T) {
	const d = "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	cases := []struct {
		ref                string
		repo, tag, problem string
	}{
		{ref: "oci://registry.example.com/charts/op@" + d, repo: "registry.example.com/charts/op"},
		{ref: "oci://registry.example.com:5000/charts/op:1.2.3@" + d, repo: "registry.example.com:5000/charts/op", tag: "1.2.3"},
		{ref: "registry.example.com/charts/op@" + d, problem: "give oci://REGISTRY/REPOSITORY@sha256:DIGEST"},
		{ref: "oci://registry.example.com/charts/op:1.2.3", problem: "has no digest: a tag alone can move"},
		{ref: "oci://registry.example.com/charts/op@sha256:abc", problem: "is not sha256:<64 lowercase hex>"},
		{ref: "oci://registry.example.com@" + d, problem: "no repository after the registry host"},
	}
	for _, tc := range cases {
		got, err := parseOCIRef(tc.ref)
		if tc.problem != "" {
			if err == nil || !strings.Contains(err.Error(), tc.problem) || !strings.Contains(err.Error(), "--from") {
				t.Errorf("%s: %v, want an error naming --from and saying %q", tc.ref, err, tc.problem)
			}
			continue
		}
		if err != nil || got.Repository != tc.repo || got.Tag != tc.tag || got.Digest != d {
			t.Errorf("%s: %+v, %v; want repository %s tag %q", tc.ref, got, err, tc.repo, tc.tag)
		}
	}
}

func TestSourceReleaseFlags(t *testing.T) {
	base := func() *releaseCreateOptions {
		return &releaseCreateOptions{operator: "mysql-operator", version: "1.0.0", gitCommit: "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90",
			image: "registry.example.com/mysql-operator:3f2a9c1"}
	}
	const commit = "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90"
	cases := []struct {
		name string
		edit func(*releaseCreateOptions)
		// problem is part of the error ("" for none).
		problem string
		check   func(t *testing.T, rel *v1alpha1.OperatorRelease)
	}{
		{name: "git", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.path, o.kind, o.secret = "https://git.example.com/op.git", commit, "./deploy/v1", "manifests", "git-creds"
		}, check: func(t *testing.T, rel *v1alpha1.OperatorRelease) {
			g := rel.Spec.Source.Git
			if g == nil || g.Kind != v1alpha1.FormatManifests || g.Path != "deploy/v1" || rel.Spec.Source.SecretRef.Name != "git-creds" || rel.Spec.Format != "" || rel.Spec.Digest != "" {
				t.Errorf("spec %+v", rel.Spec)
			}
		}},
		{name: "git helm kind", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.kind = "https://git.example.com/op.git", commit, "helm"
		},
			check: func(t *testing.T, rel *v1alpha1.OperatorRelease) {
				if rel.Spec.Source.Git.Kind != v1alpha1.FormatChart {
					t.Errorf("kind %s, want Chart", rel.Spec.Source.Git.Kind)
				}
			}},
		{name: "git short commit", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.kind = "https://git.example.com/op.git", commit[:7], "helm"
		},
			problem: "--commit \"3f2a9c1\": give the full 40-hex commit SHA"},
		{name: "git without kind", edit: func(o *releaseCreateOptions) { o.gitURL, o.commit = "https://git.example.com/op.git", commit },
			problem: "--kind \"\": say what --path holds: helm"},
		{name: "git over ssh", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.kind = "git@git.example.com:op.git", commit, "helm"
		},
			problem: "--git \"git@git.example.com:op.git\": give an https:// URL"},
		{name: "git path escapes", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.kind, o.path = "https://git.example.com/op.git", commit, "helm", "../x"
		}, problem: "--path \"../x\""},
		{name: "repo without digest", edit: func(o *releaseCreateOptions) {
			o.repo, o.chart, o.chartVersion = "https://charts.example.com", "op", "1.0.0"
		},
			problem: "--repo needs --chart NAME, --chart-version V and --chart-digest"},
		{name: "repo with bad digest", edit: func(o *releaseCreateOptions) {
			o.repo, o.chart, o.chartVersion, o.chartDigest = "https://charts.example.com", "op", "1.0.0", "abc"
		}, problem: "--chart-digest \"abc\" is not sha256"},
		{name: "repo with a chart path", edit: func(o *releaseCreateOptions) {
			o.repo, o.chart, o.chartVersion, o.chartDigest = "https://charts.example.com", "./chart", "1.0.0", "sha256:"+strings.Repeat("a", 64)
		}, problem: "--chart \"./chart\": with --repo, --chart is the chart's name"},
		{name: "from with kind", edit: func(o *releaseCreateOptions) {
			o.from, o.kind = "oci://registry.example.com/charts/op@sha256:"+strings.Repeat("a", 64), "helm"
		}, problem: "--kind does not apply to --from"},
		{name: "insecure without from", edit: func(o *releaseCreateOptions) {
			o.gitURL, o.commit, o.kind, o.insecure = "https://g/op.git", commit, "helm", true
		},
			problem: "--insecure applies to --from only"},
		{name: "values from", edit: func(o *releaseCreateOptions) {
			o.from, o.valuesFrom = "oci://registry.example.com/charts/op@sha256:"+strings.Repeat("a", 64), []string{"base", "prod:prod.yaml"}
		}, check: func(t *testing.T, rel *v1alpha1.OperatorRelease) {
			v := rel.Spec.ValuesFrom
			if len(v) != 2 || v[0].ConfigMap != "base" || v[0].Key != "" || v[1].ConfigMap != "prod" || v[1].Key != "prod.yaml" {
				t.Errorf("valuesFrom %+v", v)
			}
		}},
		{name: "bad version", edit: func(o *releaseCreateOptions) {
			o.version, o.from = "1.0", "oci://registry.example.com/charts/op@sha256:"+strings.Repeat("a", 64)
		}, problem: "--version \"1.0\" is not a SemVer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.edit(o)
			rel, err := o.sourceRelease("mysql-v1", "team-a")
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					t.Fatalf("%v, want an error saying %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, rel)
		})
	}
	// Upload flags refuse the flags of a source.
	o := base()
	o.manifests, o.secret = "./deploy", "creds"
	if err := o.checkUploadFlags(); err == nil || !strings.Contains(err.Error(), "--secret applies to a release from a source") {
		t.Errorf("checkUploadFlags: %v", err)
	}
}
