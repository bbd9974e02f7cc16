package release

import (
	"path/filepath"
	"slices"
	"testing"
)

func TestRenderManifestsFixture(t *testing.T) {
	objs, err := RenderManifests("testdata/manifests")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ClusterRole widget-operator",
		"ClusterRoleBinding widget-operator",
		"CustomResourceDefinition widgets.example.com",
		"Deployment widget-operator",
		"ServiceAccount widget-operator",
	}
	if got := ids(objs); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}
	// Files are read in lexical order, documents in file order.
	if objs[0].GetKind() != "CustomResourceDefinition" || objs[len(objs)-1].GetKind() != "Deployment" {
		t.Errorf("objects not in file order: %v", ids(objs))
	}
	dep := find(t, objs, "Deployment", "widget-operator")
	if got := images(t, dep); !slices.Equal(got, []string{imageV1}) {
		t.Errorf("deployment images = %q, want %q", got, imageV1)
	}
	if dep.GetNamespace() != "" {
		t.Errorf("RenderManifests must leave namespaces as written, got %q", dep.GetNamespace())
	}
	// Integers stay integers (int64), as the API machinery expects.
	if replicas, ok := dep.Object["spec"].(map[string]interface{})["replicas"].(int64); !ok || replicas != 1 {
		t.Errorf("spec.replicas = %#v, want int64 1", dep.Object["spec"].(map[string]interface{})["replicas"])
	}
}

func TestRenderManifestsLayouts(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string // relative path -> content
		want  []string          // ids of the objects
	}{{
		name: "list kinds are flattened",
		files: map[string]string{"list.yaml": `
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: b}
`},
		want: []string{"ConfigMap a", "ConfigMap b"},
	}, {
		name: "typed list items inherit apiVersion and kind",
		files: map[string]string{"cms.yaml": `
apiVersion: v1
kind: ConfigMapList
items:
- metadata: {name: c}
  data: {k: v}
`},
		want: []string{"ConfigMap c"},
	}, {
		name: "json, yml and nested folders; other files and dot folders ignored",
		files: map[string]string{
			"a.json":            `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"j"}}`,
			"sub/b.yml":         "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n",
			"README.md":         "# not a manifest",
			".git/config.yaml":  "not: an object",
			"sub/deeper/c.yaml": "---\n# only a comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: deep\n...\n",
		},
		want: []string{"ConfigMap deep", "ConfigMap j", "Secret s"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			objs, err := RenderManifests(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(objs); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRenderManifestsErrors(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string // relative path -> content; nil: the folder does not exist
		want  []string          // parts of the error
	}{{
		name:  "document without kind names file and index",
		files: map[string]string{"x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n---\napiVersion: v1\nmetadata:\n  name: nokind\n"},
		want:  []string{"x.yaml", "document 2", "missing kind"},
	}, {
		name:  "document without metadata.name",
		files: map[string]string{"y.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n"},
		want:  []string{"y.yaml", "document 1", "metadata.name"},
	}, {
		name:  "document without anything",
		files: map[string]string{"z.yaml": "foo: bar\n"},
		want:  []string{"z.yaml", "document 1", "apiVersion, kind, metadata.name"},
	}, {
		name:  "list item without name",
		files: map[string]string{"l.yaml": "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {}\n"},
		want:  []string{"l.yaml", "document 1", "item 0", "metadata.name"},
	}, {
		name:  "a scalar document",
		files: map[string]string{"s.yaml": "just a string\n"},
		want:  []string{"s.yaml", "document 1", "not a Kubernetes object"},
	}, {
		name:  "broken yaml",
		files: map[string]string{"b.yaml": "apiVersion: v1\nkind: [unclosed\n"},
		want:  []string{"b.yaml", "document 1"},
	}, {
		name:  "no manifest files",
		files: map[string]string{"README.md": "nothing"},
		want:  []string{"no *.yaml, *.yml or *.json files"},
	}, {
		name:  "only empty documents",
		files: map[string]string{"e.yaml": "---\n# nothing\n---\n"},
		want:  []string{"no Kubernetes objects"},
	}, {
		name:  "a Helm chart folder",
		files: map[string]string{"Chart.yaml": "apiVersion: v2\nname: widget\nversion: 1.0.0\n", "templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"},
		want:  []string{"is a Helm chart (it has Chart.yaml)", "--chart"},
	}, {
		name: "an OLM bundle folder",
		files: map[string]string{"metadata/annotations.yaml": "annotations:\n  operators.operatorframework.io.bundle.package.v1: widget\n",
			"manifests/widget.clusterserviceversion.yaml": "apiVersion: operators.coreos.com/v1alpha1\nkind: ClusterServiceVersion\nmetadata:\n  name: widget.v1.0.0\n"},
		want: []string{"is an OLM bundle", "--bundle"},
	}, {
		name: "missing folder",
		want: []string{"does-not-exist"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "does-not-exist")
			if tc.files != nil {
				dir = t.TempDir()
				writeFiles(t, dir, tc.files)
			}
			_, err := RenderManifests(dir)
			wantErr(t, err, tc.want...)
		})
	}
}
