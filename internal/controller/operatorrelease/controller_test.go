//go:build !unit

package operatorrelease_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/source/sourcetest"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub-only testbed.
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{}, &env)
}

const installNS = "mysql-operator-system"

var auth = sourcetest.Auth{Username: "ci", Password: "s3cret-password"}

// startManager runs rewind's manager (every reconciler, as `rewind controller` does) against
// the hub until the test ends.
func startManager(t *testing.T) {
	t.Helper()
	mgr, err := controller.NewManager(env.Hub.RESTConfig(), controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
}

// sample writes release version of the sample operator and returns it.
func sample(t *testing.T, version string) mysqloperator.Package {
	t.Helper()
	p, err := mysqloperator.Write(t.TempDir(), version)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// digestOf renders a package as rewind release create does (valuesFile for a chart) and
// returns the digest of its canonical manifests.
func digestOf(t *testing.T, p mysqloperator.Package, valuesFile string) string {
	t.Helper()
	var canonical []byte
	var err error
	switch p.Source {
	case mysqloperator.SourceChart:
		objs, _, rerr := release.RenderChart(p.Dir, valuesFile, "mysql-operator", installNS)
		if rerr != nil {
			t.Fatal(rerr)
		}
		canonical, err = release.Canonical(objs)
	default:
		objs, rerr := p.Render(installNS)
		if rerr != nil {
			t.Fatal(rerr)
		}
		canonical, err = release.Canonical(objs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return release.Digest(canonical)
}

// newRelease is an OperatorRelease of version from src.
func newRelease(ns, name, version string, src v1alpha1.ReleaseSource) *v1alpha1.OperatorRelease {
	b, err := operator.BuildFor(version)
	if err != nil {
		panic(err)
	}
	return &v1alpha1.OperatorRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.OperatorReleaseSpec{Operator: "mysql-operator", Version: b.Version, GitCommit: b.GitCommit, Image: b.Image(),
			InstallNamespace: installNS, Source: &src},
	}
}

// credentialsSecret creates the Secret name with basic auth and the CA ca.
func credentialsSecret(t *testing.T, c client.Client, ns, name string, ca []byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{"username": []byte(auth.Username), "password": []byte(auth.Password), "ca.crt": ca}}
	if err := c.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until done holds for the release (or fails after timeout) and returns it.
func waitFor(t *testing.T, c client.Client, rel *v1alpha1.OperatorRelease, timeout time.Duration, what string, done func(*v1alpha1.OperatorRelease) bool) *v1alpha1.OperatorRelease {
	t.Helper()
	got := &v1alpha1.OperatorRelease{}
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(rel), got); err != nil {
			return false, err
		}
		return done(got), nil
	})
	if err != nil {
		t.Fatalf("release %s: waiting %s until %s: %v; status: %+v", rel.Name, timeout, what, err, got.Status)
	}
	return got
}

func isReady(r *v1alpha1.OperatorRelease) bool {
	return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady)
}

func isStalled(r *v1alpha1.OperatorRelease) bool {
	return meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionStalled)
}

// artifactChunks lists the artifact Secrets of namespace ns.
func artifactChunks(t *testing.T, c client.Client, ns string) []string {
	t.Helper()
	var list corev1.SecretList
	if err := c.List(t.Context(), &list, client.InNamespace(ns), client.HasLabels{artifact.LabelArtifact}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	return names
}

// sources are real servers for the sample operator's releases.
type sources struct {
	reg                                           *sourcetest.Registry
	helm                                          *sourcetest.HelmRepo
	git                                           *sourcetest.GitServer
	v1, v2, v3                                    mysqloperator.Package
	chartDigest, bundleDigest, tgzDigest, corrupt string
	movedDigest                                   string
	commit                                        string
}

func startSources(t *testing.T) *sources {
	s := &sources{reg: sourcetest.NewRegistry(t, auth), helm: sourcetest.NewHelmRepo(t, auth), git: sourcetest.NewGitServer(t, auth),
		v1: sample(t, "1.0.0"), v2: sample(t, "2.0.0"), v3: sample(t, "3.0.0")}
	tgz := sourcetest.PackageChart(t, s.v2.Dir)
	s.chartDigest = s.reg.PushChart(t, "charts/mysql-operator", "2.0.0", tgz)
	s.movedDigest = s.reg.PushChart(t, "moved/mysql-operator", "2.0.0", tgz)
	s.reg.PushBundle(t, "moved/mysql-operator", "2.0.0", s.v3.Dir, nil) // moves the tag
	s.bundleDigest = s.reg.PushBundle(t, "bundles/mysql-operator", "v3.0.0", s.v3.Dir,
		map[string]string{"operators.operatorframework.io.bundle.mediatype.v1": "registry+v1"})
	s.tgzDigest = s.helm.Add(t, "mysql-operator-2.0.0.tgz", tgz)
	s.corrupt = s.helm.AddCorrupt(t, "mysql-operator", "2.0.1", []byte("\x1f\x8bdamaged"))
	s.commit = s.git.Commit(t, "mysql-operator", "three releases", map[string]string{
		"deploy/v1": s.v1.Dir, "deploy/v2": s.v2.Dir, "deploy/v3": s.v3.Dir})
	return s
}

func TestReleasesFromSources(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	src := startSources(t)
	startManager(t)

	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, []byte("replicas: 3\nextraArgs: [--fail-on-config=query_cache_type]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	creds := &v1alpha1.LocalObjectReference{Name: "source-credentials"}

	cases := []struct {
		name    string
		version string
		source  v1alpha1.ReleaseSource
		// edit changes the release before it is created.
		edit func(*v1alpha1.OperatorRelease)
		// setup runs in the release's namespace before it is created.
		setup func(t *testing.T, ns string)
		// format and digest of a release that becomes Ready.
		format, digest string
		// reason and parts of the message of one that stalls.
		reason string
		says   []string
	}{
		{name: "helm chart in an OCI registry", version: "2.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("charts/mysql-operator"), Digest: src.chartDigest, Tag: "2.0.0"}, SecretRef: creds},
			format: v1alpha1.FormatChart, digest: digestOf(t, src.v2, "")},
		{name: "bundle image in an OCI registry", version: "3.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("bundles/mysql-operator"), Digest: src.bundleDigest, Tag: "v3.0.0"}, SecretRef: creds},
			format: v1alpha1.FormatBundle, digest: digestOf(t, src.v3, "")},
		{name: "chart of a helm repository with values", version: "2.0.0",
			source: v1alpha1.ReleaseSource{HelmRepository: &v1alpha1.HelmRepositorySource{URL: src.helm.URL(), Chart: "mysql-operator", Version: "2.0.0", Digest: src.tgzDigest}, SecretRef: creds},
			edit: func(r *v1alpha1.OperatorRelease) {
				r.Spec.ValuesFrom = []v1alpha1.ValuesReference{{ConfigMap: "base"}, {ConfigMap: "prod", Key: "prod.yaml"}, {ConfigMap: "absent", Optional: true}}
				r.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(`{"replicas":3}`)}
			},
			setup: func(t *testing.T, ns string) {
				for name, data := range map[string]map[string]string{
					"base": {"values.yaml": "replicas: 2\nextraArgs: [--fail-reconcile]\n"},
					"prod": {"prod.yaml": "extraArgs: [--fail-on-config=query_cache_type]\n"},
				} {
					if err := c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}); err != nil {
						t.Fatal(err)
					}
				}
			},
			format: v1alpha1.FormatChart, digest: digestOf(t, src.v2, valuesFile)},
		{name: "plain manifests in git", version: "1.0.0",
			source: v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: src.git.RepoURL("mysql-operator"), Commit: src.commit, Path: "deploy/v1", Kind: v1alpha1.FormatManifests}, SecretRef: creds},
			format: v1alpha1.FormatManifests, digest: digestOf(t, src.v1, "")},
		{name: "chart in git with the expected spec.digest", version: "2.0.0",
			source: v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: src.git.RepoURL("mysql-operator"), Commit: src.commit, Path: "deploy/v2", Kind: v1alpha1.FormatChart}, SecretRef: creds},
			edit:   func(r *v1alpha1.OperatorRelease) { r.Spec.Digest = digestOf(t, src.v2, "") },
			format: v1alpha1.FormatChart, digest: digestOf(t, src.v2, "")},

		{name: "moved tag", version: "2.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("moved/mysql-operator"), Digest: src.movedDigest, Tag: "2.0.0"}, SecretRef: creds},
			reason: v1alpha1.ReasonTagMoved, says: []string{"tag 2.0.0 of oci://" + src.reg.Repository("moved/mysql-operator") + " now points at", "create a new OperatorRelease"}},
		{name: "wrong chart digest", version: "2.0.0",
			source: v1alpha1.ReleaseSource{HelmRepository: &v1alpha1.HelmRepositorySource{URL: src.helm.URL(), Chart: "mysql-operator", Version: "2.0.0", Digest: src.corrupt}, SecretRef: creds},
			reason: v1alpha1.ReasonDigestMismatch, says: []string{"has digest " + src.tgzDigest, "not spec.source.helmRepository.digest " + src.corrupt}},
		{name: "corrupt tgz", version: "2.0.0",
			source: v1alpha1.ReleaseSource{HelmRepository: &v1alpha1.HelmRepositorySource{URL: src.helm.URL(), Chart: "mysql-operator", Version: "2.0.1", Digest: src.corrupt}, SecretRef: creds},
			reason: v1alpha1.ReasonSourceInvalid, says: []string{"is not a valid chart archive"}},
		{name: "unauthorized", version: "1.0.0",
			source: v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: src.git.RepoURL("mysql-operator"), Commit: src.commit, Path: "deploy/v1", Kind: v1alpha1.FormatManifests}, SecretRef: &v1alpha1.LocalObjectReference{Name: "ca-only"}},
			setup: func(t *testing.T, ns string) {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca-only"}, Data: map[string][]byte{"ca.crt": src.git.CA()}}
				if err := c.Create(t.Context(), s); err != nil {
					t.Fatal(err)
				}
			},
			reason: v1alpha1.ReasonSourceUnauthorized, says: []string{"authentication required", "spec.source.secretRef"}},
		{name: "commit that does not exist", version: "1.0.0",
			source: v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: src.git.RepoURL("mysql-operator"), Commit: strings.Repeat("0f", 20), Path: "deploy/v1", Kind: v1alpha1.FormatManifests}, SecretRef: creds},
			reason: v1alpha1.ReasonSourceNotFound, says: []string{"commit " + strings.Repeat("0f", 20) + " is not in any branch or tag"}},
		{name: "unknown digest", version: "2.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("charts/mysql-operator"), Digest: sourcetest.Digest([]byte("nothing"))}, SecretRef: creds},
			reason: v1alpha1.ReasonSourceNotFound, says: []string{"not found in the registry"}},
		{name: "rendered manifests differ from spec.digest", version: "2.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("charts/mysql-operator"), Digest: src.chartDigest}, SecretRef: creds},
			edit:   func(r *v1alpha1.OperatorRelease) { r.Spec.Digest = digestOf(t, src.v1, "") },
			reason: v1alpha1.ReasonDigestMismatch, says: []string{"have digest " + digestOf(t, src.v2, ""), "not spec.digest " + digestOf(t, src.v1, "")}},
		{name: "chart of another version", version: "3.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("charts/mysql-operator"), Digest: src.chartDigest}, SecretRef: creds},
			reason: v1alpha1.ReasonRenderFailed, says: []string{"has appVersion 2.0.0 but spec.version is 3.0.0"}},
		{name: "manifests without the release's image", version: "2.0.0",
			source: v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: src.git.RepoURL("mysql-operator"), Commit: src.commit, Path: "deploy/v1", Kind: v1alpha1.FormatManifests}, SecretRef: creds},
			reason: v1alpha1.ReasonRenderFailed, says: []string{"no Deployment in the manifests runs spec.image"}},
		{name: "values for a bundle", version: "3.0.0",
			source: v1alpha1.ReleaseSource{OCI: &v1alpha1.OCISource{Repository: src.reg.Repository("bundles/mysql-operator"), Digest: src.bundleDigest}, SecretRef: creds},
			edit: func(r *v1alpha1.OperatorRelease) {
				r.Spec.Values = &apiextensionsv1.JSON{Raw: []byte(`{"replicas":3}`)}
			},
			reason: v1alpha1.ReasonValuesInvalid, says: []string{"apply to a Helm chart", "an OLM bundle"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testenv.Namespace(t, env.Hub.RESTConfig())
			if tc.source.SecretRef == creds {
				ca := src.reg.CA()
				switch {
				case tc.source.HelmRepository != nil:
					ca = src.helm.CA()
				case tc.source.Git != nil:
					ca = src.git.CA()
				}
				credentialsSecret(t, c, ns, creds.Name, ca)
			}
			if tc.setup != nil {
				tc.setup(t, ns)
			}
			rel := newRelease(ns, "mysql", tc.version, tc.source)
			if tc.edit != nil {
				tc.edit(rel)
			}
			if err := c.Create(t.Context(), rel); err != nil {
				t.Fatal(err)
			}
			if tc.reason != "" {
				got := waitFor(t, c, rel, time.Minute, "it stalls", isStalled)
				ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
				if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason {
					t.Fatalf("Ready condition %+v, want False with reason %s", ready, tc.reason)
				}
				for _, s := range tc.says {
					if !strings.Contains(ready.Message, s) {
						t.Errorf("Ready message %q does not say %q", ready.Message, s)
					}
				}
				if got.Status.ObservedGeneration != got.Generation || got.Status.Digest != "" || got.Status.Artifact != "" {
					t.Errorf("status %+v: want observedGeneration %d and no digest or artifact", got.Status, got.Generation)
				}
				if chunks := artifactChunks(t, c, ns); len(chunks) > 0 {
					t.Errorf("a release that failed left artifact chunks %v", chunks)
				}
				// The Rollout reconciler loads releases through release.Cache: it gets a
				// NotReadyError it can wait on.
				_, _, err := (&release.Cache{}).Load(t.Context(), c, ns, rel.Name)
				var nr *release.NotReadyError
				if !errors.As(err, &nr) || !nr.Stalled || nr.Reason != tc.reason {
					t.Errorf("Cache.Load of the stalled release: %v, want a NotReadyError (stalled, %s)", err, tc.reason)
				}
				return
			}
			got := waitFor(t, c, rel, time.Minute, "it is Ready", isReady)
			if got.Status.Digest != tc.digest {
				t.Errorf("status.digest %s, want %s (the digest rewind release create computes for the same release)", got.Status.Digest, tc.digest)
			}
			if got.Status.Format != tc.format || got.Status.ObservedGeneration != got.Generation || isStalled(got) ||
				meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReconciling) != nil {
				t.Errorf("status %+v, want format %s, observedGeneration %d, only Ready", got.Status, tc.format, got.Generation)
			}
			if len(got.Status.CRDs) != 1 || got.Status.CRDs[0].Name != "mysqlclusters.database.example.com" || got.Status.Objects == 0 ||
				got.Status.Bytes == 0 || got.Status.Artifact != "secrets://"+ns+"/"+tc.digest {
				t.Errorf("status %+v: want the MySQLCluster CRD, counts and the artifact", got.Status)
			}
			switch tc.format {
			case v1alpha1.FormatChart:
				if ch := release.ChartOf(got); ch == nil || ch.Name != "mysql-operator" || ch.Version != "2.0.0" || ch.AppVersion != "2.0.0" {
					t.Errorf("chart %+v, want mysql-operator 2.0.0", ch)
				}
			case v1alpha1.FormatBundle:
				if b := release.BundleOf(got); b == nil || b.OperatorVersion != "3.0.0" || b.Package != "mysql-operator" {
					t.Errorf("bundle %+v, want mysql-operator 3.0.0", b)
				}
			}
			loaded, objs, err := release.Load(t.Context(), c, ns, rel.Name)
			if err != nil {
				t.Fatal(err)
			}
			if release.ManifestDigest(loaded) != tc.digest || len(objs) != int(got.Status.Objects) {
				t.Errorf("Load: digest %s and %d objects, want %s and %d", release.ManifestDigest(loaded), len(objs), tc.digest, got.Status.Objects)
			}
		})
	}
}

// A failure that can go away (here: credentials that are not there yet) is retried: the
// release becomes Ready once the Secret exists, without anyone touching it.
func TestReleaseRecoversWhenCredentialsAppear(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	reg := sourcetest.NewRegistry(t, auth)
	p := sample(t, "2.0.0")
	digest := reg.PushChart(t, "charts/mysql-operator", "2.0.0", sourcetest.PackageChart(t, p.Dir))
	startManager(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	rel := newRelease(ns, "mysql-v2", "2.0.0", v1alpha1.ReleaseSource{
		OCI:       &v1alpha1.OCISource{Repository: reg.Repository("charts/mysql-operator"), Digest: digest},
		SecretRef: &v1alpha1.LocalObjectReference{Name: "registry"}})
	if err := c.Create(t.Context(), rel); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, c, rel, time.Minute, "it stalls", isStalled)
	if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonCredentialsInvalid ||
		!strings.Contains(r.Message, "Secret "+ns+"/registry of spec.source.secretRef") || !strings.Contains(r.Message, "create it") {
		t.Fatalf("Ready %+v: want CredentialsInvalid naming the Secret and the fix", r)
	}
	credentialsSecret(t, c, ns, "registry", reg.CA())
	got = waitFor(t, c, rel, time.Minute, "it is Ready", isReady)
	if got.Status.Digest != digestOf(t, p, "") || isStalled(got) {
		t.Errorf("status %+v: want Ready with the chart's digest and no Stalled condition", got.Status)
	}
}

// An uploaded release applied without its manifests (e.g. from Git) says so, and becomes
// Ready once rewind release create uploads them.
func TestUploadedReleaseWithoutArtifact(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	startManager(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	p := sample(t, "1.0.0")
	objs, err := p.Render(installNS)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		t.Fatal(err)
	}
	rel := newRelease(ns, "mysql-v1", "1.0.0", v1alpha1.ReleaseSource{})
	rel.Spec.Source, rel.Spec.InstallNamespace = nil, ""
	rel.Spec.Format, rel.Spec.Digest = v1alpha1.FormatManifests, release.Digest(canonical)
	if err := c.Create(t.Context(), rel.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, c, rel, time.Minute, "it stalls", isStalled)
	if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r.Reason != v1alpha1.ReasonArtifactMissing || !strings.Contains(r.Message, "rewind release create mysql-v1") {
		t.Fatalf("Ready %+v: want ArtifactMissing saying how to upload", r)
	}
	if _, _, err := release.Load(t.Context(), c, ns, rel.Name); !release.IsNotReady(err) {
		t.Errorf("Load: %v, want a NotReadyError", err)
	}
	if _, err := release.Create(t.Context(), c, rel, canonical); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, c, rel, time.Minute, "it is Ready", isReady)
	if isStalled(got) || got.Status.Digest != rel.Spec.Digest || got.Status.Format != v1alpha1.FormatManifests {
		t.Errorf("status %+v: want Ready, digest and format, no Stalled", got.Status)
	}
}

// artifact.Put leaves no partial payload behind when a chunk cannot be written.
func TestArtifactPutCleansUpAfterAFailedWrite(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	payload := make([]byte, 2*artifact.ChunkSize+100) // three chunks
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	base, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	creates := 0
	failing := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				creates++
				if creates == 3 {
					return errors.New("injected: the API server refused the third chunk")
				}
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	if _, err := artifact.Put(t.Context(), failing, ns, release.ArtifactKind, payload); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Put: %v, want the injected failure", err)
	}
	if chunks := artifactChunks(t, c, ns); len(chunks) > 0 {
		t.Fatalf("the failed Put left chunks %v", chunks)
	}
	// Written again without failures, the payload is stored whole and reads back.
	ref, err := artifact.Put(t.Context(), c, ns, release.ArtifactKind, payload)
	if err != nil {
		t.Fatal(err)
	}
	back, err := artifact.Get(t.Context(), c, ns, ref.Digest)
	if err != nil || len(back) != len(payload) || ref.Chunks != 3 {
		t.Fatalf("Get: %d bytes, %v; want %d bytes in 3 chunks", len(back), err, len(payload))
	}
}
