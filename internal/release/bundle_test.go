package release

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestRenderBundle(t *testing.T) {
	objs, info, err := RenderBundle("testdata/bundle", "widget-system")
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := v1alpha1.BundleInfo{Package: "widget-operator", Channel: "stable", OperatorVersion: "3.0.0"}
	if *info != wantInfo {
		t.Errorf("bundle info = %+v, want %+v", *info, wantInfo)
	}
	want := []string{
		"ClusterRole widget-operator-widget-operator",
		"ClusterRoleBinding widget-operator-widget-operator",
		"CustomResourceDefinition widgets.example.com",
		"Deployment widget-system/widget-operator-controller",
		"Role widget-system/widget-operator-widget-operator",
		"RoleBinding widget-system/widget-operator-widget-operator",
		"Service widget-system/widget-operator-controller-service",
		"Service widget-system/widget-operator-metrics", // from manifests/, namespace added
		"ServiceAccount widget-system/widget-operator",  // once, though named in both permission lists
		"ValidatingWebhookConfiguration vwidget.example.com",
	}
	if got := ids(objs); !slices.Equal(got, want) {
		t.Fatalf("objects:\n got %q\nwant %q", got, want)
	}

	dep := find(t, objs, "Deployment", "widget-operator-controller")
	if dep.GetAPIVersion() != "apps/v1" {
		t.Errorf("deployment apiVersion %s", dep.GetAPIVersion())
	}
	if got := images(t, dep); !slices.Equal(got, []string{imageV3}) {
		t.Errorf("images = %q, want %q", got, imageV3)
	}
	if got := dep.GetLabels(); !reflect.DeepEqual(got, map[string]string{"app.kubernetes.io/name": "widget-operator"}) {
		t.Errorf("deployment labels = %v, want the CSV label", got)
	}

	cases := []struct {
		kind, name string
		path       []string    // field of the object
		want       interface{} // its value
	}{
		{"Role", "widget-operator-widget-operator", []string{"rules"}, []interface{}{
			map[string]interface{}{"apiGroups": []interface{}{""}, "resources": []interface{}{"configmaps"}, "verbs": []interface{}{"get", "list", "watch", "create", "update", "patch", "delete"}},
			map[string]interface{}{"apiGroups": []interface{}{"coordination.k8s.io"}, "resources": []interface{}{"leases"}, "verbs": []interface{}{"get", "list", "watch", "create", "update", "patch", "delete"}},
		}},
		{"RoleBinding", "widget-operator-widget-operator", []string{"roleRef"}, map[string]interface{}{
			"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widget-operator-widget-operator",
		}},
		{"ClusterRoleBinding", "widget-operator-widget-operator", []string{"subjects"}, []interface{}{
			map[string]interface{}{"kind": "ServiceAccount", "name": "widget-operator", "namespace": "widget-system"},
		}},
		{"ClusterRoleBinding", "widget-operator-widget-operator", []string{"roleRef", "kind"}, "ClusterRole"},
		{"ClusterRole", "widget-operator-widget-operator", []string{"rules"}, []interface{}{
			map[string]interface{}{"apiGroups": []interface{}{"example.com"}, "resources": []interface{}{"widgets", "widgets/status"}, "verbs": []interface{}{"get", "list", "watch", "update", "patch"}},
		}},
	}
	for _, tc := range cases {
		o := find(t, objs, tc.kind, tc.name)
		got, _, err := unstructured.NestedFieldNoCopy(o.Object, tc.path...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s .%s = %#v, want %#v", tc.kind, tc.name, strings.Join(tc.path, "."), got, tc.want)
		}
	}
}

func TestRenderBundleWebhooks(t *testing.T) {
	objs, _, err := RenderBundle("testdata/bundle", "widget-system")
	if err != nil {
		t.Fatal(err)
	}
	service := func(path string) map[string]interface{} {
		return map[string]interface{}{
			"namespace": "widget-system",
			"name":      "widget-operator-controller-service",
			"path":      path,
			"port":      int64(443),
		}
	}
	cases := []struct {
		kind, name string
		path       []string    // field of the object
		want       interface{} // its value
	}{{
		kind: "CustomResourceDefinition", name: "widgets.example.com",
		path: []string{"spec", "conversion"},
		want: map[string]interface{}{
			"strategy": "Webhook",
			"webhook": map[string]interface{}{
				"clientConfig":             map[string]interface{}{"service": service("/convert")},
				"conversionReviewVersions": []interface{}{"v1", "v1beta1"},
			},
		},
	}, {
		kind: "ValidatingWebhookConfiguration", name: "vwidget.example.com",
		path: []string{"webhooks"},
		want: []interface{}{map[string]interface{}{
			"name":                    "vwidget.example.com",
			"clientConfig":            map[string]interface{}{"service": service("/validate-example-com-v3-widget")},
			"admissionReviewVersions": []interface{}{"v1"},
			"sideEffects":             "None",
			"failurePolicy":           "Fail",
			"timeoutSeconds":          int64(10),
			"rules": []interface{}{map[string]interface{}{
				"apiGroups":   []interface{}{"example.com"},
				"apiVersions": []interface{}{"v3"},
				"operations":  []interface{}{"CREATE", "UPDATE"},
				"resources":   []interface{}{"widgets"},
			}},
		}},
	}, {
		kind: "Service", name: "widget-operator-controller-service",
		path: []string{"spec"},
		want: map[string]interface{}{
			"selector": map[string]interface{}{"app.kubernetes.io/name": "widget-operator", "control-plane": "controller-manager"},
			"ports": []interface{}{map[string]interface{}{
				"name": "https", "port": int64(443), "protocol": "TCP", "targetPort": int64(9443),
			}},
		},
	}}
	for _, tc := range cases {
		o := find(t, objs, tc.kind, tc.name)
		got, _, err := unstructured.NestedFieldNoCopy(o.Object, tc.path...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %s .%s:\n got %#v\nwant %#v", tc.kind, tc.name, strings.Join(tc.path, "."), got, tc.want)
		}
	}
	inv := CRDInventory(objs)
	if len(inv) != 1 || inv[0].ConversionStrategy != "Webhook" {
		t.Errorf("inventory = %+v, want the CRD with conversion strategy Webhook", inv)
	}
}

func TestRenderBundleErrors(t *testing.T) {
	const csvFile = "manifests/widget-operator.clusterserviceversion.yaml"
	const annotationsFile = "metadata/annotations.yaml"
	cases := []struct {
		name string
		edit func(t *testing.T, dir string) // breaks a copy of testdata/bundle
		want []string                       // parts of the error
	}{{
		name: "no annotations.yaml",
		edit: func(t *testing.T, dir string) { remove(t, dir, annotationsFile) },
		want: []string{"no metadata/annotations.yaml"},
	}, {
		name: "media type not registry+v1",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, annotationsFile, "registry+v1", "plain+v0")
		},
		want: []string{`media type "plain+v0"`, "registry+v1"},
	}, {
		name: "media type missing",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, annotationsFile, "  operators.operatorframework.io.bundle.mediatype.v1: registry+v1\n", "")
		},
		want: []string{"no operators.operatorframework.io.bundle.mediatype.v1 annotation"},
	}, {
		name: "no CSV",
		edit: func(t *testing.T, dir string) { remove(t, dir, csvFile) },
		want: []string{"no ClusterServiceVersion"},
	}, {
		name: "CSV without version",
		edit: func(t *testing.T, dir string) { replace(t, dir, csvFile, "  version: 3.0.0\n", "") },
		want: []string{"widget-operator.v3.0.0 has no spec.version"},
	}, {
		name: "conversion CRD not in the manifests",
		edit: func(t *testing.T, dir string) { remove(t, dir, "manifests/widgets.example.com.crd.yaml") },
		want: []string{"conversionCRDs names widgets.example.com", "no such CustomResourceDefinition"},
	}, {
		name: "conversion CRD not owned",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, csvFile, "        - widgets.example.com\n", "        - gadgets.example.com\n")
		},
		want: []string{`conversionCRDs names "gadgets.example.com"`, "owned"},
	}, {
		name: "webhook on an unknown deployment",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, csvFile, "      deploymentName: widget-operator-controller\n      containerPort: 443\n      targetPort: 9443\n      webhookPath: /convert", "      deploymentName: nope\n      webhookPath: /convert")
		},
		want: []string{"spec.webhookdefinitions[1]", "deploymentName nope"},
	}, {
		name: "webhooks of one deployment on different ports",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, csvFile, "      targetPort: 9443\n      webhookPath: /convert", "      targetPort: 9444\n      webhookPath: /convert")
		},
		want: []string{"different ports"},
	}, {
		name: "unknown webhook type",
		edit: func(t *testing.T, dir string) {
			replace(t, dir, csvFile, "type: ValidatingAdmissionWebhook", "type: SomethingElse")
		},
		want: []string{`type "SomethingElse"`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, "testdata/bundle")
			tc.edit(t, dir)
			_, _, err := RenderBundle(dir, "widget-system")
			wantErr(t, err, tc.want...)
		})
	}
}

func TestRenderBundleNeedsNamespace(t *testing.T) {
	_, _, err := RenderBundle("testdata/bundle", "")
	wantErr(t, err, "namespace is required")
}

func TestDefaultChannel(t *testing.T) {
	cases := []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{AnnotationDefaultChannel: "fast", AnnotationChannels: "stable,fast"}, "fast"},
		{map[string]string{AnnotationChannels: " candidate , stable"}, "candidate"},
		{map[string]string{}, ""},
	}
	for _, tc := range cases {
		if got := defaultChannel(tc.annotations); got != tc.want {
			t.Errorf("defaultChannel(%v) = %q, want %q", tc.annotations, got, tc.want)
		}
	}
}

func TestRoleBase(t *testing.T) {
	cases := []struct{ pkg, csv, version, want string }{
		{"widget-operator", "widget-operator.v3.0.0", "3.0.0", "widget-operator"},
		{"", "widget-operator.v3.0.0", "3.0.0", "widget-operator"},
		{"", "widget-operator.3.0.0", "v3.0.0", "widget-operator"},
		{"", "custom-name", "3.0.0", "custom-name"},
	}
	for _, tc := range cases {
		if got := roleBase(tc.pkg, tc.csv, tc.version); got != tc.want {
			t.Errorf("roleBase(%q, %q, %q) = %q, want %q", tc.pkg, tc.csv, tc.version, got, tc.want)
		}
	}
}

func remove(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// replace replaces old (which must occur) with repl in the file name under dir.
func replace(t *testing.T, dir, name, old, repl string) {
	t.Helper()
	p := filepath.Join(dir, name)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", name, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(data), old, repl, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
