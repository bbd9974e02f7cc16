//go:build !unit

package v1alpha1_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub-only testbed with the rewind.dev CRDs installed.
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{}, &env)
}

const (
	commit = "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90"
	digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

var hubClient client.Client

func hub(t *testing.T) client.Client {
	t.Helper()
	if hubClient == nil {
		hubClient = testenv.HubClient(t, env.Hub.RESTConfig())
	}
	return hubClient
}

func goodRelease() *v1alpha1.OperatorRelease {
	return &v1alpha1.OperatorRelease{
		Spec: v1alpha1.OperatorReleaseSpec{
			Operator: "mysql-operator", Version: "1.2.3", GitCommit: commit,
			Image: "registry.example.com/mysql-operator:" + commit, Format: v1alpha1.FormatManifests, Digest: digest,
		},
	}
}

// sourceRelease is goodRelease fetched from an OCI chart instead of uploaded, with edit applied.
func sourceRelease(edit func(*v1alpha1.OperatorReleaseSpec)) *v1alpha1.OperatorRelease {
	r := goodRelease()
	r.Spec.Format, r.Spec.Digest = "", ""
	r.Spec.Source = &v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{
		Repository: "registry.example.com:5000/charts/mysql-operator", Digest: digest, Tag: "1.2.3"}}
	if edit != nil {
		edit(&r.Spec)
	}
	return r
}

func goodRollout() *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		Spec: v1alpha1.RolloutSpec{
			Operator: "mysql-operator", Release: "mysql-v2", InstallNamespace: "mysql-system",
			Waves: []v1alpha1.Wave{
				{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
				{Name: "rest", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, MaxConcurrency: 2},
			},
		},
	}
}

func dur(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &metav1.Duration{Duration: d}
}

func TestReleaseAndRolloutValidation(t *testing.T) {
	c := hub(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	cases := []struct {
		name string
		// obj is sent to the API server.
		obj client.Object
		// field and message must appear in the rejection; empty means the object is accepted.
		field, message string
	}{
		// Accepted objects.
		{name: "release pinned by full commit tag", obj: goodRelease()},
		{name: "release pinned by 7-hex commit prefix", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "registry.example.com/op:" + commit[:7] })},
		{name: "release pinned by digest", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "registry.example.com/op@" + digest })},
		{name: "release from a chart", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Format = v1alpha1.FormatChart
			r.Chart = &v1alpha1.ChartInfo{Name: "op", Version: "0.4.1", AppVersion: "1.2.3"}
		})},
		{name: "release from a bundle", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Format = v1alpha1.FormatBundle
			r.Bundle = &v1alpha1.BundleInfo{OperatorVersion: "1.2.3", Package: "op", Channel: "stable"}
		})},
		{name: "release from an OCI chart", obj: sourceRelease(nil)},
		{name: "release from a Helm repository with values", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "https://charts.example.com/stable", Chart: "op", Version: "0.4.1", Digest: digest}
			r.Source.SecretRef = &v1alpha1.LocalObjectReference{Name: "charts-auth"}
			r.Values = &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2,"image":{"pullPolicy":"Always"}}`)}
			r.ValuesFrom = []v1alpha1.ValuesReference{{ConfigMap: "prod-values"}}
		})},
		{name: "release from git with an expected digest", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "https://git.example.com/op.git", Commit: commit, Path: "deploy/v1", Kind: v1alpha1.FormatManifests}
			r.Digest = digest
		})},
		{name: "release from a Helm repository with an at sign in its path", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "https://charts.example.com/@team/stable", Chart: "op", Version: "0.4.1", Digest: digest}
		})},
		{name: "release with prerelease version", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Version = "2.0.0-rc.1+build.5" })},
		{name: "rollout with two waves", obj: goodRollout()},
		{name: "rollout with bake time and gates", obj: ro(func(r *v1alpha1.RolloutSpec) {
			r.Waves[0].BakeTime = dur("30s")
			r.HealthGates.Timeout = dur("2m30s")
			r.FailurePolicy = v1alpha1.FailurePolicyPause
		})},

		// Rejected OperatorReleases.
		{name: "image tag latest", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "registry.example.com/op:latest" }), field: "spec.image", message: "must be pinned"},
		{name: "image tag stable", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "registry.example.com/op:stable" }), field: "spec.image", message: "mutable tags such as latest, stable"},
		{name: "image tag main", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:main" }), field: "spec.image", message: "must be pinned"},
		{name: "image tag master", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:master" }), field: "spec.image", message: "must be pinned"},
		{name: "image tag dev", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:dev" }), field: "spec.image", message: "must be pinned"},
		{name: "image tag edge", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:edge" }), field: "spec.image", message: "must be pinned"},
		{name: "image semver tag", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:v1.2.3" }), field: "spec.image", message: "must be pinned"},
		{name: "image without tag", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "registry.example.com:5000/op" }), field: "spec.image", message: "must be pinned"},
		{name: "image tag of another commit", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:deadbeefcafe" }), field: "spec.image", message: "tag equal to spec.gitCommit"},
		{name: "image tag too short", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op:" + commit[:6] }), field: "spec.image", message: "at least its first 7 hex"},
		{name: "image digest too short", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Image = "op@sha256:abc123" }), field: "spec.image", message: "repo@sha256:<64 hex>"},
		{name: "version not semver", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Version = "1.2" }), field: "spec.version", message: "must be a SemVer version"},
		{name: "version with leading zero", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Version = "01.2.3" }), field: "spec.version", message: "must be a SemVer version"},
		{name: "git commit not hex", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.GitCommit = "zzzzzzzzz"; r.Image = "op@" + digest }), field: "spec.gitCommit", message: "lowercase hex"},
		{name: "git commit too short", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.GitCommit = "abc12"; r.Image = "op@" + digest }), field: "spec.gitCommit", message: "at least 7"},
		{name: "chart without appVersion", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Format = v1alpha1.FormatChart
			r.Chart = &v1alpha1.ChartInfo{Name: "op", Version: "0.4.1"}
		}), field: "spec.chart.appVersion", message: "at least 1 chars long"},
		{name: "chart version not semver", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Format = v1alpha1.FormatChart
			r.Chart = &v1alpha1.ChartInfo{Name: "op", Version: "four", AppVersion: "1.2.3"}
		}), field: "spec.chart.version", message: "Chart.yaml version"},
		{name: "chart format without chart", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Format = v1alpha1.FormatChart }), field: "spec.chart", message: "required when spec.format is Chart"},
		{name: "bundle operatorVersion not semver", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Format = v1alpha1.FormatBundle
			r.Bundle = &v1alpha1.BundleInfo{OperatorVersion: "1.x"}
		}), field: "spec.bundle.operatorVersion", message: "CSV spec.version"},
		{name: "unknown format", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Format = "Kustomize" }), field: "spec.format", message: "Unsupported value"},
		{name: "uploaded release without format", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Format = "" }), field: "spec.format", message: "spec.format (Manifests, Chart or Bundle) is required"},
		{name: "uploaded release without digest", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Digest = "" }), field: "spec.digest", message: "spec.digest is required for a release uploaded"},
		{name: "uploaded release with values", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Values = &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2}`)}
		}), field: "spec.values", message: "apply to a release from spec.source"},
		{name: "source with format", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) { r.Format = v1alpha1.FormatChart }), field: "spec.format", message: "takes its format from the source"},
		{name: "source with chart", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Chart = &v1alpha1.ChartInfo{Name: "op", Version: "0.4.1", AppVersion: "1.2.3"}
		}), field: "spec.chart", message: "records them in status.chart"},
		{name: "source with two kinds", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.Git = &v1alpha1.GitSource{URL: "https://git.example.com/op.git", Commit: commit, Kind: v1alpha1.FormatManifests}
		}), field: "spec.source", message: "exactly one of oci, helmRepository and git"},
		{name: "source with no kind", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) { r.Source.OCI = nil }), field: "spec.source", message: "exactly one of oci, helmRepository and git"},
		{name: "oci repository with scheme", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI.Repository = "oci://registry.example.com/charts/op"
		}), field: "spec.source.oci.repository", message: "without a scheme"},
		{name: "oci repository with tag", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI.Repository = "registry.example.com/charts/op:1.2.3"
		}), field: "spec.source.oci.repository", message: "without tag or digest"},
		{name: "oci tag without digest", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) { r.Source.OCI.Digest = "" }), field: "spec.source.oci.digest", message: "a tag alone would move"},
		{name: "oci bad tag", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) { r.Source.OCI.Tag = "-x" }), field: "spec.source.oci.tag", message: "must be an OCI tag"},
		{name: "helm repository version range", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "https://charts.example.com", Chart: "op", Version: "^1.2.0", Digest: digest}
		}), field: "spec.source.helmRepository.version", message: "ranges are not allowed"},
		{name: "helm repository oci url", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "oci://registry.example.com/charts", Chart: "op", Version: "1.2.0", Digest: digest}
		}), field: "spec.source.helmRepository.url", message: "use spec.source.oci"},
		{name: "helm repository url with credentials", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.HelmRepository = &v1alpha1.HelmRepositorySource{URL: "https://robot:s3cret@charts.example.com/stable", Chart: "op", Version: "1.2.0", Digest: digest}
		}), field: "spec.source.helmRepository.url", message: "name it in spec.source.secretRef"},
		{name: "git url with a token", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "https://oauth2:glpat-xyz@git.example.com/op.git", Commit: commit, Kind: v1alpha1.FormatManifests}
		}), field: "spec.source.git.url", message: "name it in spec.source.secretRef"},
		{name: "git short commit", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "https://git.example.com/op.git", Commit: commit[:7], Kind: v1alpha1.FormatManifests}
		}), field: "spec.source.git.commit", message: "full commit SHA"},
		{name: "git ssh url", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "git@git.example.com:op.git", Commit: commit, Kind: v1alpha1.FormatManifests}
		}), field: "spec.source.git.url", message: "ssh:// and scp-like"},
		{name: "git path escapes", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "https://git.example.com/op.git", Commit: commit, Path: "deploy/../../etc", Kind: v1alpha1.FormatManifests}
		}), field: "spec.source.git.path", message: "without .."},
		{name: "git unknown kind", obj: sourceRelease(func(r *v1alpha1.OperatorReleaseSpec) {
			r.Source.OCI = nil
			r.Source.Git = &v1alpha1.GitSource{URL: "https://git.example.com/op.git", Commit: commit, Kind: "Kustomize"}
		}), field: "spec.source.git.kind", message: "Unsupported value"},
		{name: "digest malformed", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Digest = "md5:abc" }), field: "spec.digest", message: "sha256:<64 lowercase hex>"},
		{name: "operator name invalid", obj: rel(func(r *v1alpha1.OperatorReleaseSpec) { r.Operator = "MySQL_Operator" }), field: "spec.operator", message: "should match"},

		// Rejected Rollouts.
		{name: "rollout without waves", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves = nil }), field: "spec.waves", message: "Required value"},
		{name: "rollout with empty waves", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves = []v1alpha1.Wave{} }), field: "spec.waves", message: "at least 1 items"},
		{name: "wave maxConcurrency 0", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves[0].MaxConcurrency = -1 }), field: "spec.waves[0].maxConcurrency", message: "greater than or equal to 1"},
		{name: "wave bake time invalid", obj: ro(func(r *v1alpha1.RolloutSpec) {
			r.Waves[0].BakeTime = &metav1.Duration{Duration: -time.Second}
		}), field: "spec.waves[0].bakeTime", message: "must be a duration"},
		{name: "gate timeout invalid", obj: ro(func(r *v1alpha1.RolloutSpec) {
			r.HealthGates.Timeout = &metav1.Duration{Duration: -time.Minute}
		}), field: "spec.healthGates.timeout", message: "must be a duration"},
		{name: "failure policy unknown", obj: ro(func(r *v1alpha1.RolloutSpec) { r.FailurePolicy = "RollForward" }), field: "spec.failurePolicy", message: "Unsupported value"},
		{name: "release reference missing", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Release = "" }), field: "spec.release", message: "at least 1 chars"},
		{name: "wave selects nothing", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves[0].Clusters = nil }), field: "spec.waves[0]", message: "set selector or clusters"},
		{name: "wave selects both ways", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves[0].Selector = &metav1.LabelSelector{} }), field: "spec.waves[0]", message: "not both"},
		{name: "duplicate wave names", obj: ro(func(r *v1alpha1.RolloutSpec) { r.Waves[1].Name = "canary" }), field: "spec.waves", message: "wave names must be unique"},
		{name: "snapshot retention 0", obj: ro(func(r *v1alpha1.RolloutSpec) { r.SnapshotRetention = -1 }), field: "spec.snapshotRetention", message: "greater than or equal to 1"},
	}
	rejected := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.SetNamespace(ns)
			tc.obj.SetName("case-" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-"))[:min(40, len(tc.name))] + "-" + string(rune('a'+i%26)))
			err := c.Create(t.Context(), tc.obj)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("want accepted, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want rejected on %s (%q), but it was accepted", tc.field, tc.message)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.message) {
				t.Fatalf("want the error to name %q with %q, got: %s", tc.field, tc.message, msg)
			}
			rejected++
		})
	}
	if rejected < 20 {
		t.Errorf("want at least 20 rejected objects, got %d", rejected)
	}
}

func TestReleaseSpecIsImmutable(t *testing.T) {
	c := hub(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	r := goodRelease()
	r.Name, r.Namespace = "immutable", ns
	if err := c.Create(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Spec.Version = "1.2.4"
	err := c.Update(t.Context(), r)
	if err == nil || !strings.Contains(err.Error(), "spec is immutable") {
		t.Fatalf("want the update refused as immutable, got %v", err)
	}
}

func rel(mut func(*v1alpha1.OperatorReleaseSpec)) *v1alpha1.OperatorRelease {
	r := goodRelease()
	mut(&r.Spec)
	return r
}

func ro(mut func(*v1alpha1.RolloutSpec)) *v1alpha1.Rollout {
	r := goodRollout()
	mut(&r.Spec)
	return r
}

func TestSnapshotStoreAndScheduleValidation(t *testing.T) {
	c := hub(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	store := func(spec v1alpha1.SnapshotStoreSpec) client.Object {
		return &v1alpha1.SnapshotStore{Spec: spec}
	}
	for i, tc := range []struct {
		// obj is sent to the API server.
		obj client.Object
		// message must appear in the rejection; empty means the object is accepted.
		message string
	}{
		{obj: store(v1alpha1.SnapshotStoreSpec{})},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "S3", Bucket: "b", Endpoint: "http://127.0.0.1:9000", KeyRef: &v1alpha1.SnapshotKeyRef{KMS: "awskms://alias/k?region=eu-west-1"}})},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "Folder", Path: "/var/backups", KeyRef: &v1alpha1.SnapshotKeyRef{SecretRef: &v1alpha1.SecretKeyReference{Name: "k"}}})},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "S3"}), message: "bucket is required for providers S3, GCS and AzureBlob"},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "Folder"}), message: "path is required for provider Folder"},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "HubSecrets", Bucket: "b"}), message: "leave bucket, endpoint and path unset"},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "Tape"}), message: "spec.provider"},
		{obj: store(v1alpha1.SnapshotStoreSpec{KeyRef: &v1alpha1.SnapshotKeyRef{}}), message: "set exactly one of kms"},
		{obj: store(v1alpha1.SnapshotStoreSpec{KeyRef: &v1alpha1.SnapshotKeyRef{KMS: "base64key://c2VjcmV0"}}), message: "spec.keyRef.kms"},
		{obj: store(v1alpha1.SnapshotStoreSpec{Provider: "S3", Bucket: "b", Endpoint: "minio:9000"}), message: "spec.endpoint"},
		{obj: &v1alpha1.SnapshotSchedule{Spec: v1alpha1.SnapshotScheduleSpec{Schedule: "@hourly", Operator: "mysql-operator", Retention: 0}}},
		{obj: &v1alpha1.SnapshotSchedule{Spec: v1alpha1.SnapshotScheduleSpec{Schedule: "", Operator: "mysql-operator"}}, message: "spec.schedule"},
	} {
		tc.obj.SetNamespace(ns)
		tc.obj.SetName(fmt.Sprintf("v-%d", i))
		err := c.Create(t.Context(), tc.obj)
		switch {
		case tc.message == "" && err != nil:
			t.Errorf("case %d must be accepted: %v", i, err)
		case tc.message != "" && (err == nil || !strings.Contains(err.Error(), tc.message)):
			t.Errorf("case %d: error %v, want one containing %q", i, err, tc.message)
		}
	}
}
