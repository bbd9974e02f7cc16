package release

import (
	"path/filepath"
	"slices"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestRenderChart(t *testing.T) {
	cases := []struct {
		name         string
		valuesFile   string   // "" renders the chart's defaults
		wantIDs      []string // ids of the rendered objects
		wantReplicas int64    // spec.replicas of the Deployment
	}{{
		name: "chart defaults",
		wantIDs: []string{
			"ClusterRole widget",
			"ClusterRoleBinding widget",
			"CustomResourceDefinition widgets.example.com",
			"Deployment widget-system/widget",
			"ServiceAccount widget-system/widget",
		},
		wantReplicas: 1,
	}, {
		name:       "values file merged over the defaults",
		valuesFile: "testdata/chart-values-ha.yaml",
		wantIDs: []string{
			"ClusterRole widget",
			"ClusterRoleBinding widget",
			"CustomResourceDefinition widgets.example.com",
			"Deployment widget-system/widget",
			"Service widget-system/widget-metrics",
			"ServiceAccount widget-system/widget",
		},
		wantReplicas: 2,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, info, err := RenderChart("testdata/chart", tc.valuesFile, "widget", "widget-system")
			if err != nil {
				t.Fatal(err)
			}
			want := v1alpha1.ChartInfo{Name: "widget-operator", Version: "0.2.0", AppVersion: "2.0.0"}
			if *info != want {
				t.Errorf("chart info = %+v, want %+v", *info, want)
			}
			// NOTES.txt, the disabled template and the test hook are not objects.
			if got := ids(objs); !slices.Equal(got, tc.wantIDs) {
				t.Fatalf("objects:\n got %q\nwant %q", got, tc.wantIDs)
			}
			dep := find(t, objs, "Deployment", "widget")
			if got := images(t, dep); !slices.Equal(got, []string{imageV2}) {
				t.Errorf("images = %q, want %q", got, imageV2)
			}
			if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != tc.wantReplicas {
				t.Errorf("replicas = %d, want %d", r, tc.wantReplicas)
			}
			if v := dep.GetLabels()["app.kubernetes.io/version"]; v != "2.0.0" {
				t.Errorf("version label = %q, want the appVersion 2.0.0", v)
			}
			crb := find(t, objs, "ClusterRoleBinding", "widget")
			subjects, _, _ := unstructured.NestedSlice(crb.Object, "subjects")
			if ns := subjects[0].(map[string]interface{})["namespace"]; ns != "widget-system" {
				t.Errorf("subject namespace = %v, want .Release.Namespace", ns)
			}
		})
	}
}

// A packaged chart (.tgz) renders exactly like its folder.
func TestRenderChartArchive(t *testing.T) {
	chrt, err := loader.Load("testdata/chart")
	if err != nil {
		t.Fatal(err)
	}
	archive, err := chartutil.Save(chrt, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Ext(archive) != ".tgz" {
		t.Fatalf("archive %s", archive)
	}
	digest := func(path string) string {
		objs, _, err := RenderChart(path, "", "widget", "widget-system")
		if err != nil {
			t.Fatal(err)
		}
		c, err := Canonical(objs)
		if err != nil {
			t.Fatal(err)
		}
		return Digest(c)
	}
	if a, b := digest("testdata/chart"), digest(archive); a != b {
		t.Errorf("folder digest %s != archive digest %s", a, b)
	}
}

func TestRenderChartErrors(t *testing.T) {
	template := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
	cases := []struct {
		name      string
		files     map[string]string // the chart folder; nil: no chart at all
		namespace string
		want      []string // parts of the error
	}{{
		name: "missing appVersion",
		files: map[string]string{
			"Chart.yaml":          "apiVersion: v2\nname: noapp\nversion: 1.0.0\n",
			"templates/cm.yaml":   template,
			"templates/NOTES.txt": "hi",
		},
		namespace: "ns",
		want:      []string{"Chart.yaml of noapp has no appVersion; rewind binds the chart to the operator version through it"},
	}, {
		name: "template renders a non-object",
		files: map[string]string{
			"Chart.yaml":         "apiVersion: v2\nname: bad\nversion: 1.0.0\nappVersion: 1.0.0\n",
			"templates/bad.yaml": template + "---\nkind: ConfigMap\nmetadata:\n  name: x\n",
		},
		namespace: "ns",
		want:      []string{"bad/templates/bad.yaml", "document 2", "apiVersion"},
	}, {
		name: "kubeVersion the render version does not satisfy",
		files: map[string]string{
			"Chart.yaml":        "apiVersion: v2\nname: old\nversion: 1.0.0\nappVersion: 1.0.0\nkubeVersion: <1.20.0\n",
			"templates/cm.yaml": template,
		},
		namespace: "ns",
		want:      []string{"kubeVersion", RenderKubeVersion},
	}, {
		name: "namespace required",
		files: map[string]string{
			"Chart.yaml":        "apiVersion: v2\nname: ok\nversion: 1.0.0\nappVersion: 1.0.0\n",
			"templates/cm.yaml": template,
		},
		want: []string{"namespace is required"},
	}, {
		name:      "no chart",
		namespace: "ns",
		want:      []string{"loading chart"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "missing")
			if tc.files != nil {
				dir = t.TempDir()
				writeFiles(t, dir, tc.files)
			}
			_, _, err := RenderChart(dir, "", "rel", tc.namespace)
			wantErr(t, err, tc.want...)
		})
	}
}
