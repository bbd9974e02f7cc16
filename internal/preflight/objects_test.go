package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
)

// objects decodes YAML documents into custom resources as a client reads them (integers as
// int64).
func objects(t *testing.T, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, d := range docs {
		j, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func widget(name, spec string) string {
	return "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: " + name + ", namespace: shop}\nspec: " + spec + "\n"
}

// objectKey is what a test compares of an object finding: severity, check, object and path.
func objectKey(f Finding) string {
	return strings.Join([]string{string(f.Severity), string(f.Check), f.Object, f.Path}, " ")
}

func objectKeys(fs []Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, objectKey(f))
	}
	sort.Strings(out)
	return out
}

func TestCheckObjects(t *testing.T) {
	live := objects(t,
		widget("small", "{size: 1, mode: fast, name: a, tags: [x]}"),
		widget("slow", "{size: 4, mode: slow, name: bb, tags: [x, 'y', z]}"),
		widget("odd", "{size: 7, name: ccc}"),
	)
	cases := []struct {
		name string
		// change turns widgetCRD into the release's CRD.
		change func(n *apiextensionsv1.CustomResourceDefinition)
		// want is every finding, as "severity check object path".
		want []string
	}{
		{name: "same CRD refuses nothing", change: func(*apiextensionsv1.CustomResourceDefinition) {}},
		{name: "enum narrowed refuses the objects using the value", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Enum = []apiextensionsv1.JSON{*js(`"fast"`), *js(`"safe"`)}
			})
		}, want: []string{"error ObjectRefused shop/slow .spec.mode"}},
		{name: "enum narrowed to exclude the default refuses the objects that get it", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Enum = []apiextensionsv1.JSON{*js(`"fast"`), *js(`"slow"`)}
			})
		}, want: []string{"error ObjectRefused shop/odd .spec.mode"}},
		{name: "maximum lowered and maxItems tightened", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Maximum = ptr.To(5.0) })
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxItems = ptr.To[int64](2) })
		}, want: []string{"error ObjectRefused shop/odd .spec.size", "error ObjectRefused shop/slow .spec.tags"}},
		{name: "new required field", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			s.Required = append(s.Required, "tags")
			setSpec(n, 0, s)
		}, want: []string{"error ObjectRefused shop/odd .spec.tags"}},
		{name: "CEL rule added", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			s.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size % 2 == 0 || self.mode == 'fast'", Message: "odd sizes need mode fast"}}
			setSpec(n, 0, s)
		}, want: []string{"error ObjectRefused shop/odd .spec"}},
		{name: "type changed", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "name", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Type, p.MinLength, p.MaxLength, p.Pattern = "integer", nil, nil, ""
			})
		}, want: []string{"error ObjectRefused shop/odd .spec.name", "error ObjectRefused shop/slow .spec.name", "error ObjectRefused shop/small .spec.name"}},
		{name: "list made a set refuses duplicates", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.XListType = ptr.To("set") })
		}},
		{name: "new storage version with a stricter schema, conversion None", change: func(n *apiextensionsv1.CustomResourceDefinition) {
			v2 := n.Spec.Versions[0].DeepCopy()
			v2.Name = "v2"
			n.Spec.Versions[0].Storage = false
			n.Spec.Versions = append(n.Spec.Versions, *v2)
			p := v2.Schema.OpenAPIV3Schema.Properties["spec"]
			sz := p.Properties["size"]
			sz.Maximum = ptr.To(3.0)
			p.Properties["size"] = sz
			v2.Schema.OpenAPIV3Schema.Properties["spec"] = p
			n.Spec.Versions[1] = *v2
		}, want: []string{"error ObjectRefused shop/odd .spec.size", "error ObjectRefused shop/slow .spec.size"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := loadCRD(t, widgetCRD)
			tc.change(n)
			got, err := CheckObjects(context.Background(), n, live, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if g := objectKeys(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), strings.Join(want, "\n"))
			}
		})
	}

	// A duplicate in a list made a set is refused (the list-type invariant).
	n := loadCRD(t, widgetCRD)
	editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.XListType = ptr.To("set") })
	got, err := CheckObjects(context.Background(), n, objects(t, widget("dup", "{size: 2, tags: [x, x]}")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := objectKeys(got); strings.Join(g, ",") != "error ObjectRefused shop/dup .spec.tags[1]" {
		t.Errorf("duplicate in a set: findings\n%s", findingLines(got))
	}
}

func TestCheckObjectsBadInput(t *testing.T) {
	n := loadCRD(t, widgetCRD)
	other := objects(t, "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g}\n")
	if _, err := CheckObjects(context.Background(), n, other, nil); err == nil || !strings.Contains(err.Error(), "not a Widget") {
		t.Errorf("a Gadget checked against the Widget CRD: err %v, want one naming the kind", err)
	}
	n.Spec.Versions[0].Storage = false
	if _, err := CheckObjects(context.Background(), n, nil, nil); err == nil || !strings.Contains(err.Error(), "storage: true") {
		t.Errorf("a CRD without a storage version: err %v, want one saying how to fix it", err)
	}
	if _, err := NewSchema(n, "v9"); err == nil {
		t.Error("NewSchema of a missing version: no error")
	} else if _, ok := err.(*VersionError); !ok {
		t.Errorf("NewSchema of a missing version: %T, want *VersionError", err)
	}
}

// The sample operator's MySQLClusters as a cluster holds them under a release.
func mysqlObjects(t *testing.T, version string) []*unstructured.Unstructured {
	field := "version"
	if version == "v1" {
		field = "mysqlVersion"
	}
	return objects(t,
		"apiVersion: database.example.com/"+version+"\nkind: MySQLCluster\nmetadata: {name: orders, namespace: shop}\n"+
			"spec: {replicas: 3, "+field+": '8.0.36', config: 'max_connections=500', backup: {schedule: '0 1 * * *'}}\n"+
			"status: {readyReplicas: 3, phase: Ready, observedGeneration: 2}\n",
		"apiVersion: database.example.com/"+version+"\nkind: MySQLCluster\nmetadata: {name: users, namespace: shop}\n"+
			"spec: {replicas: 1, "+field+": '8.4', backup: {schedule: '0 3 * * *'}}\n",
	)
}

// mysqlCRDs are the sample operator's CRDs of releases 1.0.0, 2.0.0 and 3.0.0 (as the bundle
// renders it: conversion through the operator's webhook).
func mysqlCRDs(t *testing.T) (v1, v2, v3 *apiextensionsv1.CustomResourceDefinition) {
	deploy := filepath.Join(repoRoot(t), "examples", "mysql-operator", "deploy")
	v1 = readCRDFile(t, filepath.Join(deploy, "v1", "00-crd.yaml"))
	v2 = readCRDFile(t, filepath.Join(deploy, "v2", "crds", "mysqlclusters.database.example.com.yaml"))
	v3 = readCRDFile(t, filepath.Join(deploy, "v3", "manifests", "mysqlclusters.database.example.com.crd.yaml"))
	v3.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
		ConversionReviewVersions: []string{"v1"},
		ClientConfig:             &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: "mysql-operator", Name: "mysql-operator-webhook"}},
	}}
	return v1, v2, v3
}

// lossyWebhook is the operator's conversion webhook with a bug: converting to v1beta1 drops
// spec.config.
func lossyWebhook(t *testing.T) http.Handler {
	real := operator.ConversionHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		real.ServeHTTP(rec, r)
		review := apiextensionsv1.ConversionReview{}
		if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
			t.Errorf("the operator's webhook answers %d %q", rec.Code, rec.Body.String())
			http.Error(w, "bad answer", http.StatusInternalServerError)
			return
		}
		for i, o := range review.Response.ConvertedObjects {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(o.Raw); err != nil {
				t.Error(err)
				continue
			}
			if u.GetAPIVersion() == "database.example.com/v1beta1" {
				unstructured.RemoveNestedField(u.Object, "spec", "config")
			}
			b, _ := u.MarshalJSON()
			review.Response.ConvertedObjects[i].Raw = b
		}
		var buf bytes.Buffer
		_ = json.NewEncoder(&buf).Encode(review)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(buf.Bytes())
	})
}

func TestRoundTripSampleOperator(t *testing.T) {
	v1, v2, v3 := mysqlCRDs(t)
	webhook := httptest.NewServer(operator.ConversionHandler())
	defer webhook.Close()
	lossy := httptest.NewServer(lossyWebhook(t))
	defer lossy.Close()

	cases := []struct {
		name     string
		old, new *apiextensionsv1.CustomResourceDefinition
		// live is the objects' version.
		live string
		conv Converter
		// want is every finding, as "severity check object path".
		want []string
	}{
		{name: "1.0.0 to 2.0.0: the backup default is added forward and pruned back", old: v1, new: v2, live: "v1alpha1", want: nil},
		{name: "2.0.0 to 3.0.0 without the webhook: not verified", old: v2, new: v3, live: "v1beta1", want: []string{
			"warning ConversionNotVerified shop/orders ",
		}},
		{name: "2.0.0 to 3.0.0 through the operator's webhook: exact", old: v2, new: v3, live: "v1beta1",
			conv: Conversion{Webhook: WebhookClient{URL: webhook.URL}}},
		{name: "2.0.0 to 3.0.0 through a webhook that drops spec.config on the way back", old: v2, new: v3, live: "v1beta1",
			conv: Conversion{Webhook: WebhookClient{URL: lossy.URL}}, want: []string{
				"warning FieldLost shop/orders .spec.config",
			}},
		{name: "1.0.0 to 3.0.0: a version jump through the webhook", old: v1, new: v3, live: "v1alpha1",
			conv: Conversion{Webhook: WebhookClient{URL: webhook.URL}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			live := mysqlObjects(t, tc.live)
			if tc.live == "v1alpha1" { // 1.0.0 has no spec.backup: the API server pruned it
				for _, o := range live {
					unstructured.RemoveNestedField(o.Object, "spec", "backup")
				}
			}
			got, err := RoundTrip(context.Background(), tc.old, tc.new, live, tc.conv)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if g := objectKeys(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), strings.Join(want, "\n"))
			}
			for _, f := range got {
				if f.Check == CheckFieldLost && !strings.Contains(f.Message, "converted back from v1 to v1beta1") {
					t.Errorf("lost field without the step that lost it: %s", f)
				}
				if f.Check == CheckConversionNotVerified && !strings.Contains(f.Message, "2 objects") {
					t.Errorf("not-verified finding without its object count: %s", f)
				}
			}
		})
	}
}

// A release that drops a field from the schema: the objects lose it once written at the new
// version, and the report says so.
func TestRoundTripPrunedField(t *testing.T) {
	old := loadCRD(t, widgetCRD)
	new := loadCRD(t, widgetCRD)
	s := specOf(new, 0)
	delete(s.Properties, "retired")
	setSpec(new, 0, s)
	live := objects(t,
		widget("a", "{size: 1, mode: safe, retired: {reason: old}}"),
		widget("b", "{size: 2, mode: safe, retired: {reason: older}}"),
		widget("c", "{size: 3, mode: fast}"),
	)
	got, err := RoundTrip(context.Background(), old, new, live, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "warning FieldLost shop/a .spec.retired.reason"
	if g := objectKeys(got); strings.Join(g, ",") != want {
		t.Fatalf("findings:\n%s\nwant %s", findingLines(got), want)
	}
	msg := got[0].Message
	for _, part := range []string{"read at v1 under the release's CRD", "2 objects: shop/a, shop/b", "restore brings it back"} {
		if !strings.Contains(msg, part) {
			t.Errorf("message %q does not say %q", msg, part)
		}
	}
}

// ESO 0.15.1 -> 0.16.2 with real objects: an ExternalSecret on template engine v1 (removed), a
// SecretStore with the fake provider's valueMap (removed; value now required), and objects
// that move to v1 untouched.
func TestESOObjects(t *testing.T) {
	old, new := renderESO(t, "0.15.1"), renderESO(t, "0.16.2")
	es, ss := "externalsecrets.external-secrets.io", "secretstores.external-secrets.io"
	externalSecrets := objects(t, `apiVersion: external-secrets.io/v1beta1
kind: ExternalSecret
metadata: {name: db-password, namespace: shop}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: vault, kind: SecretStore}
  target:
    name: db-password
    template: {engineVersion: v1, data: {password: "{{ .password | toString }}"}}
  data:
  - secretKey: password
    remoteRef: {key: db, property: password}
`, `apiVersion: external-secrets.io/v1beta1
kind: ExternalSecret
metadata: {name: api-token, namespace: shop}
spec:
  refreshInterval: 15m
  secretStoreRef: {name: vault, kind: SecretStore}
  target: {name: api-token}
  data:
  - secretKey: token
    remoteRef: {key: api, property: token}
`)
	secretStores := objects(t, `apiVersion: external-secrets.io/v1beta1
kind: SecretStore
metadata: {name: fake, namespace: shop}
spec:
  provider:
    fake:
      data:
      - key: /db
        valueMap: {password: hunter2}
`, `apiVersion: external-secrets.io/v1beta1
kind: SecretStore
metadata: {name: vault, namespace: shop}
spec:
  provider:
    vault:
      server: https://vault.example.com
      path: secret
      version: v2
      auth: {tokenSecretRef: {name: vault-token, key: token}}
`)
	ctx := context.Background()

	got, err := CheckObjects(ctx, new[es], externalSecrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(objectKeys(got), "\n"); g != "error ObjectRefused shop/db-password .spec.target.template.engineVersion" {
		t.Errorf("ExternalSecrets refused:\n%s", findingLines(got))
	}

	got, err = RoundTrip(ctx, old[ss], new[ss], secretStores, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"error ObjectRefused shop/fake .spec.provider.fake.data[0].value",
	}
	if g := strings.Join(objectKeys(got), "\n"); g != strings.Join(want, "\n") {
		t.Errorf("SecretStores round trip:\n%s\nwant:\n%s", findingLines(got), strings.Join(want, "\n"))
	}

	// The store that is not refused loses nothing on the way to v1 and back.
	got, err = RoundTrip(ctx, old[ss], new[ss], secretStores[1:], nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("the vault SecretStore's round trip:\n%s", findingLines(got))
	}
}

func TestPlanCluster(t *testing.T) {
	v1, v2, _ := mysqlCRDs(t)
	widgets := loadCRD(t, widgetCRD)
	narrowed := loadCRD(t, widgetCRD)
	editProp(narrowed, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
		p.Enum = []apiextensionsv1.JSON{*js(`"fast"`), *js(`"safe"`)}
	})
	live := v1.DeepCopy()
	live.Status.StoredVersions = []string{"v1alpha1"}
	other := loadCRD(t, strings.ReplaceAll(widgetCRD, "widgets", "gadgets"))
	other.Spec.Names.Kind = "Gadget"

	in := ClusterInput{
		Release: map[string]*apiextensionsv1.CustomResourceDefinition{
			v2.Name: v2, narrowed.Name: narrowed, "gadgets.example.com": other,
		},
		Live: map[string]*apiextensionsv1.CustomResourceDefinition{v1.Name: live, widgets.Name: widgets},
		Objects: map[string][]*unstructured.Unstructured{
			v1.Name:                 objects(t, "apiVersion: database.example.com/v1alpha1\nkind: MySQLCluster\nmetadata: {name: orders, namespace: shop}\nspec: {replicas: 3, version: '8.0'}\n"),
			widgets.Name:            objects(t, widget("slow", "{size: 4, mode: slow}"), widget("fast", "{size: 1, mode: fast}")),
			"leftovers.example.com": objects(t, "apiVersion: example.com/v1\nkind: Leftover\nmetadata: {name: x}\n"),
		},
	}
	plan, err := PlanCluster(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range plan.CRDs {
		got = append(got, c.Name+" "+c.Action+" "+c.From+"->"+c.To)
	}
	want := []string{
		"gadgets.example.com Create ->v1",
		"mysqlclusters.database.example.com Update v1alpha1->v1beta1",
		"widgets.example.com Update v1->v1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("CRD plans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if plan.Objects != 4 || plan.Bytes == 0 {
		t.Errorf("snapshot: %d objects, %d bytes; want 4 objects and their bytes", plan.Objects, plan.Bytes)
	}
	errs := Errors(plan.Findings())
	if g := objectKeys(errs); strings.Join(g, "\n") != "error EnumNarrowed  .spec.mode\nerror ObjectRefused shop/slow .spec.mode" {
		t.Errorf("error findings:\n%s", findingLines(errs))
	}
	if n := len(Errors(plan.Findings(), CheckEnumNarrowed, CheckObjectRefused)); n != 0 {
		t.Errorf("%d error findings left once EnumNarrowed and ObjectRefused are ignored, want 0", n)
	}

	// A narrowed enum no live object uses: every object was read, none is refused, so the
	// finding is a warning; when the objects were cut at a bound it stays an error.
	for _, truncated := range []bool{false, true} {
		plan, err = PlanCluster(context.Background(), ClusterInput{
			Release:   map[string]*apiextensionsv1.CustomResourceDefinition{narrowed.Name: narrowed},
			Live:      map[string]*apiextensionsv1.CustomResourceDefinition{widgets.Name: widgets},
			Objects:   map[string][]*unstructured.Unstructured{widgets.Name: objects(t, widget("fast", "{size: 1, mode: fast}"))},
			Truncated: map[string]bool{widgets.Name: truncated},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := "warning EnumNarrowed  .spec.mode"
		if truncated {
			want = "error EnumNarrowed  .spec.mode"
		}
		if g := strings.Join(objectKeys(plan.Findings()), "\n"); g != want {
			t.Errorf("truncated %t: findings\n%s\nwant %s", truncated, findingLines(plan.Findings()), want)
		}
	}

	// The same CRD is unchanged and not checked.
	plan, err = PlanCluster(context.Background(), ClusterInput{
		Release: map[string]*apiextensionsv1.CustomResourceDefinition{widgets.Name: widgets},
		Live:    map[string]*apiextensionsv1.CustomResourceDefinition{widgets.Name: widgets},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.CRDs) != 1 || plan.CRDs[0].Action != ActionUnchanged || len(plan.Findings()) != 0 {
		t.Errorf("same CRD: %+v", plan)
	}
}
