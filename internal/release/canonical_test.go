package release

import (
	"bytes"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// fixture renders one of the test fixtures.
type fixture struct {
	name   string
	render func() ([]*unstructured.Unstructured, error)
	// golden is the digest of the fixture's canonical manifests. It changes only when the
	// fixture or the canonical form changes, never from one run to the next.
	golden string
}

var fixtures = []fixture{{
	name:   "manifests",
	render: func() ([]*unstructured.Unstructured, error) { return RenderManifests("testdata/manifests") },
	golden: "sha256:ecfd5e09ba13bca01011b864198ba4922ef8e40977227d18d0c8d77f0ad897cf",
}, {
	name: "chart",
	render: func() ([]*unstructured.Unstructured, error) {
		objs, _, err := RenderChart("testdata/chart", "", "widget", "widget-system")
		return objs, err
	},
	golden: "sha256:a0dc4e6b0806458bd2ba305ba9870574aa82f5abc60ddd971cac4aa67a743791",
}, {
	name: "chart with values",
	render: func() ([]*unstructured.Unstructured, error) {
		objs, _, err := RenderChart("testdata/chart", "testdata/chart-values-ha.yaml", "widget", "widget-system")
		return objs, err
	},
	golden: "sha256:688dda7c42d89b2a9aad0a5060e2d83e751b3649dd38a764e2a315df678eb2d4",
}, {
	name: "bundle",
	render: func() ([]*unstructured.Unstructured, error) {
		objs, _, err := RenderBundle("testdata/bundle", "widget-system")
		return objs, err
	},
	golden: "sha256:cc12775cd43145759957cb30758612830b0ed07fde0f914fb9601eae0b42d6e7",
}}

func TestGoldenDigests(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			objs, err := f.render()
			if err != nil {
				t.Fatal(err)
			}
			c, err := Canonical(objs)
			if err != nil {
				t.Fatal(err)
			}
			got := Digest(c)
			if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(got) {
				t.Fatalf("digest %q is not sha256:<64 hex>", got)
			}
			if got != f.golden {
				t.Errorf("digest = %s, want the golden %s (a change here changes every stored release digest)", got, f.golden)
			}
		})
	}
}

// The same objects give the same bytes whatever their order.
func TestCanonicalOrderIndependent(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			objs, err := f.render()
			if err != nil {
				t.Fatal(err)
			}
			want, err := Canonical(objs)
			if err != nil {
				t.Fatal(err)
			}
			for shift := 1; shift < len(objs); shift++ {
				rotated := append(slices.Clone(objs[shift:]), objs[:shift]...)
				got, err := Canonical(rotated)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("rotated by %d: canonical bytes differ", shift)
				}
			}
			reversed := slices.Clone(objs)
			slices.Reverse(reversed)
			if got, _ := Canonical(reversed); !bytes.Equal(got, want) {
				t.Fatal("reversed: canonical bytes differ")
			}
		})
	}
}

// The same objects give the same digest whatever the files they are written in: here the
// fixture's manifests re-written as one file, in reverse order, as YAML and with other key order.
func TestCanonicalFileLayoutIndependent(t *testing.T) {
	objs, err := RenderManifests("testdata/manifests")
	if err != nil {
		t.Fatal(err)
	}
	want, err := Canonical(objs)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for i := len(objs) - 1; i >= 0; i-- {
		y, err := yaml.Marshal(objs[i].Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(y))
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"nested/all-in-one.yml": strings.Join(docs, "---\n")})
	again, err := RenderManifests(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Canonical(again)
	if err != nil {
		t.Fatal(err)
	}
	if Digest(got) != Digest(want) {
		t.Errorf("digest %s of the one-file layout != %s", Digest(got), Digest(want))
	}
}

func TestCanonicalForm(t *testing.T) {
	obj := func(y string) *unstructured.Unstructured {
		t.Helper()
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(y), &m); err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	cases := []struct {
		name string
		in   []*unstructured.Unstructured
		want string // canonical output
	}{{
		name: "status of empty values dropped",
		in:   []*unstructured.Unstructured{obj("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nstatus: {conditions: [], acceptedNames: {kind: ''}, x: null}\n")},
		want: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}` + "\n",
	}, {
		name: "status with false or zero values kept",
		in:   []*unstructured.Unstructured{obj("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\nstatus: {ready: false, count: 0}\n")},
		want: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"},"status":{"count":0,"ready":false}}` + "\n",
	}, {
		name: "null creationTimestamp and empty status dropped, keys sorted",
		in:   []*unstructured.Unstructured{obj("kind: ConfigMap\napiVersion: v1\nmetadata: {name: a, creationTimestamp: null}\nstatus: {}\ndata: {z: '1', a: <&>}\n")},
		want: `{"apiVersion":"v1","data":{"a":"<&>","z":"1"},"kind":"ConfigMap","metadata":{"name":"a"}}` + "\n",
	}, {
		name: "set creationTimestamp and non-empty status kept",
		in:   []*unstructured.Unstructured{obj("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default, creationTimestamp: '2026-01-01T00:00:00Z'}\nstatus: {phase: Running}\n")},
		want: `{"apiVersion":"v1","kind":"Pod","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"p","namespace":"default"},"status":{"phase":"Running"}}` + "\n",
	}, {
		name: "sorted by group, kind, namespace, name",
		in: []*unstructured.Unstructured{
			obj("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: ns-a}"),
			obj("apiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: ns-a}"),
			obj("apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ns-b}"),
			obj("apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ns-a}"),
			obj("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z, namespace: ns-a}"),
		},
		want: strings.Join([]string{
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"z","namespace":"ns-a"}}`,
			`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns-a"}}`,
			`{"apiVersion":"v1","kind":"Service","metadata":{"name":"b","namespace":"ns-a"}}`,
			`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns-b"}}`,
			`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"a","namespace":"ns-a"}}`,
		}, "\n") + "\n",
	}, {
		name: "no objects",
		want: "",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]*unstructured.Unstructured, len(tc.in))
			for i, o := range tc.in {
				before[i] = o.DeepCopy()
			}
			got, err := Canonical(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("canonical:\n got %s\nwant %s", got, tc.want)
			}
			for i := range tc.in {
				if !reflect.DeepEqual(tc.in[i].Object, before[i].Object) {
					t.Errorf("Canonical modified its input %d", i)
				}
			}
		})
	}
}

func TestCanonicalDuplicate(t *testing.T) {
	a := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]interface{}{"name": "a", "namespace": "n"}}}
	b := a.DeepCopy()
	b.Object["data"] = map[string]interface{}{"k": "v"}
	_, err := Canonical([]*unstructured.Unstructured{a, b})
	wantErr(t, err, "ConfigMap n/a twice")
}

// Parse reads back exactly what Canonical wrote.
func TestParseRoundTrip(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			objs, err := f.render()
			if err != nil {
				t.Fatal(err)
			}
			c, err := Canonical(objs)
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := Parse(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(parsed) != len(objs) {
				t.Fatalf("parsed %d objects, want %d", len(parsed), len(objs))
			}
			again, err := Canonical(parsed)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, c) {
				t.Error("Canonical(Parse(c)) != c")
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string // parts of the error
	}{
		{"broken json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}` + "\n{broken\n", []string{"line 2"}},
		{"not an object", "null\n", []string{"line 1", "not an object"}},
		{"no kind", `{"apiVersion":"v1","metadata":{"name":"a"}}` + "\n", []string{"line 1", "kind"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			wantErr(t, err, tc.want...)
		})
	}
}

func TestDigest(t *testing.T) {
	// sha256 of the empty input.
	if got, want := Digest(nil), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Errorf("Digest(nil) = %s, want %s", got, want)
	}
}

func TestCRDInventory(t *testing.T) {
	cases := []struct {
		name string
		fx   string // fixture name
		want []v1alpha1.CRDInfo
	}{{
		name: "manifests: v1 only",
		fx:   "manifests",
		want: []v1alpha1.CRDInfo{{Name: "widgets.example.com", Group: "example.com", Kind: "Widget", Scope: "Namespaced", ServedVersions: []string{"v1"}, StorageVersion: "v1", ConversionStrategy: "None"}},
	}, {
		name: "chart: crds/ folder, v2 stored",
		fx:   "chart",
		want: []v1alpha1.CRDInfo{{Name: "widgets.example.com", Group: "example.com", Kind: "Widget", Scope: "Namespaced", ServedVersions: []string{"v1", "v2"}, StorageVersion: "v2", ConversionStrategy: "None"}},
	}, {
		name: "bundle: v3 stored, conversion webhook",
		fx:   "bundle",
		want: []v1alpha1.CRDInfo{{Name: "widgets.example.com", Group: "example.com", Kind: "Widget", Scope: "Namespaced", ServedVersions: []string{"v1", "v2", "v3"}, StorageVersion: "v3", ConversionStrategy: "Webhook"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			i := slices.IndexFunc(fixtures, func(f fixture) bool { return f.name == tc.fx })
			objs, err := fixtures[i].render()
			if err != nil {
				t.Fatal(err)
			}
			if got := CRDInventory(objs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("inventory:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestCRDInventorySortsAndSkips(t *testing.T) {
	crd := func(name, apiVersion string, versions ...interface{}) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": apiVersion, "kind": "CustomResourceDefinition",
			"metadata": map[string]interface{}{"name": name},
			"spec": map[string]interface{}{
				"group": strings.SplitN(name, ".", 2)[1], "scope": "Cluster",
				"names":    map[string]interface{}{"kind": "K"},
				"versions": versions,
			},
		}}
	}
	v := func(name string, served, storage bool) interface{} {
		return map[string]interface{}{"name": name, "served": served, "storage": storage}
	}
	objs := []*unstructured.Unstructured{
		crd("zs.b.io", "apiextensions.k8s.io/v1", v("v2", true, true), v("v1", false, false)),
		crd("old.c.io", "apiextensions.k8s.io/v1beta1", v("v1", true, true)),
		crd("as.a.io", "apiextensions.k8s.io/v1", v("v1beta1", true, false), v("v1", true, true)),
	}
	got := CRDInventory(objs)
	want := []v1alpha1.CRDInfo{
		{Name: "as.a.io", Group: "a.io", Kind: "K", Scope: "Cluster", ServedVersions: []string{"v1beta1", "v1"}, StorageVersion: "v1", ConversionStrategy: "None"},
		{Name: "zs.b.io", Group: "b.io", Kind: "K", Scope: "Cluster", ServedVersions: []string{"v2"}, StorageVersion: "v2", ConversionStrategy: "None"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("inventory:\n got %+v\nwant %+v", got, want)
	}
}
