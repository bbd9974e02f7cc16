package release

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// realChart is a public operator chart kept as a test fixture, rendered with the values a kwok
// testbed installs it with (test/fixtures/charts/README.md and README-external-secrets.md say why).
type realChart struct {
	name      string // subtest name: <chart>-<version>
	dir       string // the unpacked chart
	values    string // the values file
	release   string
	namespace string
	info      v1alpha1.ChartInfo
	kinds     map[string]int    // objects rendered, by kind
	has       []string          // ids (see ids) that must be rendered
	crds      map[string]string // CRD name -> crdSummary
	images    map[string]string // Deployment name -> podImages joined by " "
	pins      []imagePin        // the values that pin every Deployment image by digest
	operator  string            // repository of the release image (rewind's --image)
}

// requirePresent fails the test when a fixture is missing (every one is in test/fixtures).
func (c realChart) requirePresent(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(c.dir); errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("fixture %s is missing: the real-chart tests need it", c.dir)
	}
}

// imagePin is a value that sets the tag of one image repository.
type imagePin struct {
	path []string // values path of the tag
	repo string   // the image repository the tag goes with
	tag  string
}

// TestRealCharts renders the fixture charts of public operators with rewind's RenderChart and
// the kwok values recorded for them: Kyverno 3.1.5 and 3.2.9 (test/fixtures/charts) and External
// Secrets Operator 0.15.1 and 0.16.2 (test/fixtures/charts too).
func TestRealCharts(t *testing.T) {
	for _, c := range realCharts(repoRoot(t)) {
		t.Run(c.name, func(t *testing.T) {
			c.requirePresent(t)
			objs, info, err := RenderChart(c.dir, c.values, c.release, c.namespace)
			if err != nil {
				t.Fatal(err)
			}
			if *info != c.info {
				t.Errorf("chart info = %+v, want %+v", *info, c.info)
			}
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GetKind()]++
			}
			if !maps.Equal(kinds, c.kinds) {
				t.Errorf("kinds rendered:\n got %v\nwant %v", kinds, c.kinds)
			}
			total := 0
			for _, n := range c.kinds {
				total += n
			}
			if len(objs) != total {
				t.Errorf("%d objects rendered, want %d", len(objs), total)
			}
			got := ids(objs)
			for _, id := range c.has {
				if !slices.Contains(got, id) {
					t.Errorf("%s not rendered; objects: %q", id, got)
				}
			}
			for _, o := range objs {
				// Nothing a kwok pod would have to serve: the values switch webhooks off.
				switch o.GetKind() {
				case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "APIService":
					t.Errorf("%s %s rendered: pods on kwok serve nothing", o.GetKind(), o.GetName())
				}
				// Charts that choose an API version by .Capabilities fall back to old versions
				// under rewind's fixed Capabilities; the values must override them.
				if removedAPIs[o.GetAPIVersion()] {
					t.Errorf("%s %s rendered as %s, which Kubernetes %s does not serve", o.GetKind(), o.GetName(), o.GetAPIVersion(), RenderKubeVersion)
				}
			}

			crds := map[string]string{}
			for _, crd := range CRDInventory(objs) {
				crds[crd.Name] = crdSummary(crd)
			}
			for _, name := range slices.Sorted(maps.Keys(c.crds)) {
				if crds[name] != c.crds[name] {
					t.Errorf("CRD %s: %q, want %q", name, crds[name], c.crds[name])
				}
			}
			for _, name := range slices.Sorted(maps.Keys(crds)) {
				if _, ok := c.crds[name]; !ok {
					t.Errorf("unexpected CRD %s: %s", name, crds[name])
				}
			}

			deps := map[string]string{}
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					deps[o.GetName()] = strings.Join(podImages(t, o), " ")
				}
			}
			if !maps.Equal(deps, c.images) {
				t.Errorf("Deployment images:\n got %q\nwant %q", deps, c.images)
			}

			// rewind stores and digests the manifests in canonical form: it must hold them all.
			canonical, err := Canonical(objs)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(canonical)
			if err != nil {
				t.Fatal(err)
			}
			if len(back) != len(objs) {
				t.Errorf("canonical form holds %d objects, want %d", len(back), len(objs))
			}
		})
		t.Run(c.name+" pinned by digest", func(t *testing.T) {
			c.requirePresent(t)
			objs, _, err := RenderChart(c.dir, pinnedValues(t, c.values, c.pins), c.release, c.namespace)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			release := ""
			for _, p := range c.pins {
				img := p.repo + ":" + p.tag
				want[img] = true
				if p.repo == c.operator {
					release = img
				}
			}
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				for _, img := range podImages(t, o) {
					if !want[img] {
						t.Errorf("Deployment %s runs %s, not one of the pinned images %q", o.GetName(), img, slices.Sorted(maps.Keys(want)))
					}
					if err := ValidateImage(img, ""); err != nil {
						t.Errorf("Deployment %s: %v", o.GetName(), err)
					}
				}
			}
			if err := ValidateImage(release, ""); err != nil {
				t.Error(err)
			}
			if err := CheckImage(objs, release); err != nil {
				t.Error(err)
			}
		})
	}
}

// Kyverno's admission controller runs an init container (kyvernopre) whose tag defaults to the
// tag of the main container, digest included: pinning only the main container gives the init
// container the kyverno image's digest. Tests must pin both (see kyvernoPins).
func TestKyvernoInitContainerTag(t *testing.T) {
	root := repoRoot(t)
	tag := "v1.12.7@" + fakeDigest("ghcr.io/kyverno/kyverno:v1.12.7")
	values := pinnedValues(t, filepath.Join(root, "test", "fixtures", "charts", "values", "kyverno-kwok.yaml"),
		[]imagePin{{path: []string{"admissionController", "container", "image", "tag"}, tag: tag}})
	objs, _, err := RenderChart(filepath.Join(root, "test", "fixtures", "charts", "kyverno-3.2.9"), values, "kyverno", "kyverno")
	if err != nil {
		t.Fatal(err)
	}
	got := podImages(t, find(t, objs, "Deployment", "kyverno-admission-controller"))
	want := []string{"ghcr.io/kyverno/kyvernopre:" + tag, "ghcr.io/kyverno/kyverno:" + tag}
	if !slices.Equal(got, want) {
		t.Errorf("images = %q, want %q", got, want)
	}
}

func realCharts(root string) []realChart {
	fixtures := filepath.Join(root, "test", "fixtures", "charts")
	charts := filepath.Join(root, "test", "fixtures", "charts")
	kyvernoValues := filepath.Join(fixtures, "values", "kyverno-kwok.yaml")
	esoValues := filepath.Join(fixtures, "values", "external-secrets-kwok.yaml")
	return []realChart{
		kyverno(fixtures, kyvernoValues, "3.1.5", "v1.11.5"),
		kyverno(fixtures, kyvernoValues, "3.2.9", "v1.12.7"),
		externalSecrets(charts, esoValues, "0.15.1"),
		externalSecrets(charts, esoValues, "0.16.2"),
	}
}

// kyverno describes test/fixtures/charts/kyverno-<version>, rendered with values/kyverno-kwok.yaml.
func kyverno(fixtures, values, version, app string) realChart {
	c := realChart{
		name:      "kyverno-" + version,
		dir:       filepath.Join(fixtures, "kyverno-"+version),
		values:    values,
		release:   "kyverno",
		namespace: "kyverno",
		info:      v1alpha1.ChartInfo{Name: "kyverno", Version: version, AppVersion: app},
		operator:  "ghcr.io/kyverno/kyverno",
	}
	controllers := []string{"admission-controller", "background-controller", "cleanup-controller", "reports-controller"}
	for _, ctl := range controllers {
		c.has = append(c.has, "ServiceMonitor kyverno/kyverno-"+ctl, "PodDisruptionBudget kyverno/kyverno-"+ctl)
	}
	c.has = append(c.has, "CronJob kyverno/kyverno-cleanup-admission-reports", "CronJob kyverno/kyverno-cleanup-cluster-admission-reports")
	c.images = map[string]string{
		"kyverno-admission-controller":  "ghcr.io/kyverno/kyvernopre:" + app + " ghcr.io/kyverno/kyverno:" + app,
		"kyverno-background-controller": "ghcr.io/kyverno/background-controller:" + app,
		"kyverno-cleanup-controller":    "ghcr.io/kyverno/cleanup-controller:" + app,
		"kyverno-reports-controller":    "ghcr.io/kyverno/reports-controller:" + app,
	}
	pin := func(repo string, path ...string) imagePin {
		return imagePin{path: path, repo: repo, tag: app + "@" + fakeDigest(repo+":"+app)}
	}
	c.pins = []imagePin{
		pin("ghcr.io/kyverno/kyverno", "admissionController", "container", "image", "tag"),
		pin("ghcr.io/kyverno/kyvernopre", "admissionController", "initContainer", "image", "tag"),
		pin("ghcr.io/kyverno/background-controller", "backgroundController", "image", "tag"),
		pin("ghcr.io/kyverno/cleanup-controller", "cleanupController", "image", "tag"),
		pin("ghcr.io/kyverno/reports-controller", "reportsController", "image", "tag"),
	}
	c.kinds = map[string]int{
		"ClusterRole": 17, "ClusterRoleBinding": 5, "ConfigMap": 2, "CronJob": 2, "CustomResourceDefinition": 12,
		"Deployment": 4, "PodDisruptionBudget": 4, "Role": 4, "RoleBinding": 4, "Service": 6,
		"ServiceAccount": 5, "ServiceMonitor": 4,
	}
	c.crds = map[string]string{
		"admissionreports.kyverno.io":             "storage v1alpha2, served v1alpha2, conversion None",
		"backgroundscanreports.kyverno.io":        "storage v1alpha2, served v1alpha2, conversion None",
		"clusteradmissionreports.kyverno.io":      "storage v1alpha2, served v1alpha2, conversion None",
		"clusterbackgroundscanreports.kyverno.io": "storage v1alpha2, served v1alpha2, conversion None",
		"cleanuppolicies.kyverno.io":              "storage v2beta1, served v2alpha1 v2beta1, conversion None",
		"clustercleanuppolicies.kyverno.io":       "storage v2beta1, served v2alpha1 v2beta1, conversion None",
		"policyexceptions.kyverno.io":             "storage v2beta1, served v2alpha1 v2beta1, conversion None",
		"clusterpolicies.kyverno.io":              "storage v1, served v1 v2beta1, conversion None",
		"policies.kyverno.io":                     "storage v1, served v1 v2beta1, conversion None",
		"updaterequests.kyverno.io":               "storage v1beta1, served v1beta1, conversion None",
		"clusterpolicyreports.wgpolicyk8s.io":     "storage v1alpha2, served v1alpha2, conversion None",
		"policyreports.wgpolicyk8s.io":            "storage v1alpha2, served v1alpha2, conversion None",
	}
	if version == "3.1.5" {
		c.has = append(c.has, "ClusterRole kyverno-cleanup-jobs", "ClusterRoleBinding kyverno-cleanup-jobs")
		return c
	}
	// 3.2.9 (Kyverno 1.12): v2 is served next to the old versions (the storage versions do not
	// move), v2alpha1 is no longer served, three CRDs and two cleanup CronJobs are new, and the
	// cleanup jobs' ClusterRole and ClusterRoleBinding are renamed.
	c.has = append(c.has, "CronJob kyverno/kyverno-cleanup-ephemeral-reports", "CronJob kyverno/kyverno-cleanup-cluster-ephemeral-reports",
		"ClusterRole kyverno:cleanup-jobs", "ClusterRoleBinding kyverno:cleanup-jobs")
	c.kinds["CronJob"] = 4
	c.kinds["CustomResourceDefinition"] = 15
	for _, name := range []string{"admissionreports", "backgroundscanreports", "clusteradmissionreports", "clusterbackgroundscanreports"} {
		c.crds[name+".kyverno.io"] = "storage v1alpha2, served v1alpha2 v2, conversion None"
	}
	for _, name := range []string{"cleanuppolicies", "clustercleanuppolicies", "policyexceptions"} {
		c.crds[name+".kyverno.io"] = "storage v2beta1, served v2 v2beta1, conversion None"
	}
	c.crds["updaterequests.kyverno.io"] = "storage v1beta1, served v1beta1 v2, conversion None"
	c.crds["globalcontextentries.kyverno.io"] = "storage v2alpha1, served v2alpha1, conversion None"
	c.crds["ephemeralreports.reports.kyverno.io"] = "storage v1, served v1, conversion None"
	c.crds["clusterephemeralreports.reports.kyverno.io"] = "storage v1, served v1, conversion None"
	return c
}

// externalSecrets describes the ESO fixture external-secrets-<version>, rendered with
// values/external-secrets-kwok.yaml (webhook.create, certController.create and
// crds.conversion.enabled false): the 29 objects and the CRDs of README-external-secrets.md.
func externalSecrets(charts, values, version string) realChart {
	app := "v" + version
	repo := "oci.external-secrets.io/external-secrets/external-secrets"
	c := realChart{
		name:      "external-secrets-" + version,
		dir:       filepath.Join(charts, "external-secrets-"+version),
		values:    values,
		release:   "eso",
		namespace: "external-secrets",
		info:      v1alpha1.ChartInfo{Name: "external-secrets", Version: version, AppVersion: app},
		kinds: map[string]int{
			"CustomResourceDefinition": 20, "ClusterRole": 4, "ClusterRoleBinding": 1, "Deployment": 1,
			"Role": 1, "RoleBinding": 1, "ServiceAccount": 1,
		},
		has: []string{
			"ClusterRole eso-external-secrets-controller", "ClusterRole eso-external-secrets-edit",
			"ClusterRole eso-external-secrets-servicebindings", "ClusterRole eso-external-secrets-view",
			"ClusterRoleBinding eso-external-secrets-controller", "Deployment external-secrets/eso-external-secrets",
			"Role external-secrets/eso-external-secrets-leaderelection", "RoleBinding external-secrets/eso-external-secrets-leaderelection",
			"ServiceAccount external-secrets/eso-external-secrets",
		},
		images:   map[string]string{"eso-external-secrets": repo + ":" + app},
		pins:     []imagePin{{path: []string{"image", "tag"}, repo: repo, tag: app + "@" + fakeDigest(repo+":"+app)}},
		operator: repo,
		crds:     map[string]string{},
	}
	for _, name := range []string{"acraccesstokens", "clustergenerators", "ecrauthorizationtokens", "fakes", "gcraccesstokens",
		"generatorstates", "githubaccesstokens", "grafanas", "passwords", "quayaccesstokens", "stssessiontokens", "uuids",
		"vaultdynamicsecrets", "webhooks"} {
		c.crds[name+".generators.external-secrets.io"] = "storage v1alpha1, served v1alpha1, conversion None"
	}
	for _, name := range []string{"pushsecrets", "clusterpushsecrets"} {
		c.crds[name+".external-secrets.io"] = "storage v1alpha1, served v1alpha1, conversion None"
	}
	// 0.15.1 without its conversion webhook serves v1beta1 only; 0.16.2 stores v1 and still serves v1beta1.
	es := "storage v1beta1, served v1beta1, conversion None"
	if version == "0.16.2" {
		es = "storage v1, served v1 v1beta1, conversion None"
	}
	for _, name := range []string{"externalsecrets", "secretstores", "clustersecretstores", "clusterexternalsecrets"} {
		c.crds[name+".external-secrets.io"] = es
	}
	return c
}

// removedAPIs are group versions that Kubernetes no longer serves (all removed by 1.32).
var removedAPIs = map[string]bool{
	"policy/v1beta1": true, "batch/v1beta1": true, "autoscaling/v2beta1": true, "autoscaling/v2beta2": true,
	"extensions/v1beta1": true, "rbac.authorization.k8s.io/v1beta1": true, "apiextensions.k8s.io/v1beta1": true,
	"flowcontrol.apiserver.k8s.io/v1beta1": true, "flowcontrol.apiserver.k8s.io/v1beta2": true,
	"flowcontrol.apiserver.k8s.io/v1beta3": true,
}

// crdSummary is the storage version, the served versions and the conversion strategy of a CRD.
func crdSummary(crd v1alpha1.CRDInfo) string {
	served := slices.Sorted(slices.Values(crd.ServedVersions))
	return fmt.Sprintf("storage %s, served %s, conversion %s", crd.StorageVersion, strings.Join(served, " "), crd.ConversionStrategy)
}

// podImages returns the images of the init containers and then of the containers of a
// Deployment's pod template.
func podImages(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range containers {
			out = append(out, c.(map[string]interface{})["image"].(string))
		}
	}
	return out
}

// pinnedValues writes valuesFile with the image tags of pins set into a temporary file and
// returns its path.
func pinnedValues(t *testing.T, valuesFile string, pins []imagePin) string {
	t.Helper()
	values, err := chartutil.ReadValuesFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pins {
		if err := unstructured.SetNestedField(values, p.tag, p.path...); err != nil {
			t.Fatal(err)
		}
	}
	data, err := yaml.Marshal(map[string]interface{}(values))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeDigest returns a well-formed sha256 digest derived from s. It names no real image:
// kwok pulls nothing, and rewind only checks that the image is pinned.
func fakeDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// repoRoot returns the folder holding the module's go.mod, walking up from the package folder.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package folder")
		}
		dir = parent
	}
}

// Charts test .Capabilities.APIVersions for kinds, as discovery lists them on a real cluster:
// Kyverno renders its PodDisruptionBudgets at policy/v1 only when "policy/v1/PodDisruptionBudget"
// is there (otherwise at policy/v1beta1, which Kubernetes no longer serves), and ESO renders its
// ServiceMonitor only when the cluster serves monitoring.coreos.com/v1 (--api-versions).
func TestCapabilitiesListKinds(t *testing.T) {
	root := repoRoot(t)
	empty := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(empty, []byte("podDisruptionBudget: {enabled: true}\nadmissionController: {podDisruptionBudget: {enabled: true}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, _, err := RenderChart(filepath.Join(root, "test", "fixtures", "charts", "kyverno-3.2.9"), empty, "kyverno", "kyverno")
	if err != nil {
		t.Fatal(err)
	}
	pdbs := 0
	for _, o := range objs {
		if o.GetKind() == "PodDisruptionBudget" {
			pdbs++
			if o.GetAPIVersion() != "policy/v1" {
				t.Errorf("PodDisruptionBudget %s at %s, want policy/v1 (the built-in kinds must be in the Capabilities)", o.GetName(), o.GetAPIVersion())
			}
		}
	}
	if pdbs == 0 {
		t.Fatal("no PodDisruptionBudget rendered: the test proves nothing")
	}

	eso := filepath.Join(root, "test", "fixtures", "charts", "external-secrets-0.16.2")
	values := filepath.Join(t.TempDir(), "eso.yaml")
	if err := os.WriteFile(values, []byte("serviceMonitor: {enabled: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	count := func(objs []*unstructured.Unstructured) int {
		n := 0
		for _, o := range objs {
			if o.GetKind() == "ServiceMonitor" {
				n++
			}
		}
		return n
	}
	without, _, err := RenderChart(eso, values, "eso", "external-secrets")
	if err != nil {
		t.Fatal(err)
	}
	with, _, err := RenderChart(eso, values, "eso", "external-secrets", "monitoring.coreos.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	if count(without) != 0 || count(with) == 0 {
		t.Fatalf("ServiceMonitors: %d without monitoring.coreos.com/v1 in the Capabilities, %d with it; want 0 and at least 1", count(without), count(with))
	}
}
