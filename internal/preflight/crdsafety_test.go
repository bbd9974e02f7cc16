package preflight

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/release"
)

// widgetCRD has one version of every kind of schema node the checks look at.
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size:
                type: integer
                minimum: 1
                maximum: 10
              mode:
                type: string
                enum: [fast, safe, slow]
                default: safe
              name:
                type: string
                minLength: 1
                maxLength: 63
                pattern: '^[a-z]+$'
              tags:
                type: array
                maxItems: 5
                items: {type: string}
              labels:
                type: object
                additionalProperties: {type: string}
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
                properties:
                  note: {type: string}
              retired:
                type: object
                properties:
                  reason: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
`

func loadCRD(t *testing.T, y string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(y), crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// spec of version i of crd.
func specOf(crd *apiextensionsv1.CustomResourceDefinition, i int) *apiextensionsv1.JSONSchemaProps {
	p := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
	return &p
}

// setSpec writes a changed spec schema back.
func setSpec(crd *apiextensionsv1.CustomResourceDefinition, i int, s *apiextensionsv1.JSONSchemaProps) {
	crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = *s
}

// editProp changes the property name of version 0's spec.
func editProp(crd *apiextensionsv1.CustomResourceDefinition, name string, f func(*apiextensionsv1.JSONSchemaProps)) {
	s := specOf(crd, 0)
	p := s.Properties[name]
	f(&p)
	s.Properties[name] = p
	setSpec(crd, 0, s)
}

func js(s string) *apiextensionsv1.JSON { return &apiextensionsv1.JSON{Raw: []byte(s)} }

// key is what a test compares of a finding: everything but the message.
func key(f Finding) string {
	return fmt.Sprintf("%s %s %s %s", f.Severity, f.Check, f.Version, f.Path)
}

func keys(fs []Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		out = append(out, key(f))
	}
	sort.Strings(out)
	return out
}

func TestCompareCRDs(t *testing.T) {
	cases := []struct {
		name string
		// change turns a copy of widgetCRD (old) into the release's CRD (new); old may be
		// changed too (e.g. its status).
		change func(old, new *apiextensionsv1.CustomResourceDefinition)
		// want is every finding, as "severity check version path".
		want []string
	}{
		{name: "identical", change: func(_, _ *apiextensionsv1.CustomResourceDefinition) {}},
		{name: "documentation and printer columns only", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Description = "how many" })
			n.Spec.Versions[0].AdditionalPrinterColumns = []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Size", Type: "integer", JSONPath: ".spec.size"}}
			n.Spec.Versions[0].Deprecated = true
		}},
		{name: "scope change", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Scope = apiextensionsv1.ClusterScoped
		}, want: []string{"error ScopeChanged  "}},
		{name: "kind renamed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Names.Kind = "Gadget"
		}, want: []string{"error NamesChanged  .spec.names", "info NamesChanged  .spec.names"}},
		{name: "stored version removed", change: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			// Objects were stored at v1 and v2; the release drops v1.
			v2 := o.Spec.Versions[0].DeepCopy()
			v2.Name = "v2"
			o.Spec.Versions[0].Storage = false
			o.Spec.Versions = append(o.Spec.Versions, *v2)
			o.Status.StoredVersions = []string{"v1", "v2"}
			n.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{*v2}
		}, want: []string{"warning ServedVersionRemoved v1 ", "error StoredVersionRemoved v1 "}},
		{name: "served version removed, nothing stored in it", change: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			v2 := o.Spec.Versions[0].DeepCopy()
			v2.Name, v2.Storage = "v2", false
			o.Spec.Versions = append(o.Spec.Versions, *v2)
			n.Spec.Versions = append(n.Spec.Versions, *v2)
			n.Spec.Versions[1].Served = false
		}, want: []string{"warning ServedVersionRemoved v2 "}},
		{name: "version added and made storage", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			v2 := n.Spec.Versions[0].DeepCopy()
			v2.Name = "v2"
			n.Spec.Versions[0].Storage = false
			n.Spec.Versions = append(n.Spec.Versions, *v2)
		}, want: []string{"info StorageVersionChanged v2 ", "info VersionAdded v2 "}},
		{name: "conversion webhook added", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{
				ConversionReviewVersions: []string{"v1"},
				ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://convert.example.com")},
			}}
		}, want: []string{"warning ConversionChanged  .spec.conversion"}},
		{name: "new required field", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			s.Required = append(s.Required, "name")
			setSpec(n, 0, s)
		}, want: []string{"error RequiredFieldAdded v1 .spec.name"}},
		{name: "new required field with a default", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			s.Required = append(s.Required, "mode")
			setSpec(n, 0, s)
		}, want: []string{"warning RequiredFieldAdded v1 .spec.mode"}},
		{name: "field removed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			delete(s.Properties, "retired")
			setSpec(n, 0, s)
		}, want: []string{"error FieldRemoved v1 .spec.retired"}},
		{name: "field removed under preserve-unknown-fields", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "extra", func(p *apiextensionsv1.JSONSchemaProps) { delete(p.Properties, "note") })
		}, want: []string{"warning FieldRemoved v1 .spec.extra.note"}},
		{name: "field added", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(n, 0)
			s.Properties["color"] = apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"hue": {Type: "string"}}}
			setSpec(n, 0, s)
		}, want: []string{"info FieldAdded v1 .spec.color"}},
		{name: "type changed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Type, p.Minimum, p.Maximum = "string", nil, nil })
		}, want: []string{"error TypeChanged v1 .spec.size", "info BoundLoosened v1 .spec.size", "info BoundLoosened v1 .spec.size"}},
		{name: "items type changed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.Items.Schema.Type = "integer" })
		}, want: []string{"error TypeChanged v1 .spec.tags[*]"}},
		{name: "map value type changed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.AdditionalProperties.Schema.Type = "integer" })
		}, want: []string{"error TypeChanged v1 .spec.labels{*}"}},
		{name: "default added", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = js("3") })
		}, want: []string{"warning DefaultAdded v1 .spec.size"}},
		{name: "default changed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = js(`"fast"`) })
		}, want: []string{"error DefaultChanged v1 .spec.mode"}},
		{name: "default removed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = nil })
		}, want: []string{"warning DefaultRemoved v1 .spec.mode"}},
		{name: "default reformatted is no change", change: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(o, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = js(`{"a":"1","b":"2"}`) })
			editProp(n, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.Default = js(`{ "b": "2", "a": "1" }`) })
		}},
		{name: "enum narrowed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) {
				p.Enum = []apiextensionsv1.JSON{*js(`"fast"`), *js(`"safe"`)}
			})
		}, want: []string{"error EnumNarrowed v1 .spec.mode"}},
		{name: "enum added", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = []apiextensionsv1.JSON{*js(`"a"`)} })
		}, want: []string{"error EnumNarrowed v1 .spec.name"}},
		{name: "enum widened", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "mode", func(p *apiextensionsv1.JSONSchemaProps) { p.Enum = append(p.Enum, *js(`"eco"`)) })
		}, want: []string{"info EnumWidened v1 .spec.mode"}},
		{name: "minimum raised, maximum lowered", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Minimum, p.Maximum = ptr.To(2.0), ptr.To(9.0) })
		}, want: []string{"error BoundTightened v1 .spec.size", "error BoundTightened v1 .spec.size"}},
		{name: "maximum made exclusive", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.ExclusiveMaximum = true })
		}, want: []string{"error BoundTightened v1 .spec.size"}},
		{name: "lengths and items tightened", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "name", func(p *apiextensionsv1.JSONSchemaProps) {
				p.MinLength, p.MaxLength = ptr.To[int64](2), ptr.To[int64](32)
			})
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxItems, p.MinItems = ptr.To[int64](3), ptr.To[int64](1) })
			editProp(n, "labels", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxProperties = ptr.To[int64](8) })
		}, want: []string{
			"error BoundTightened v1 .spec.labels",
			"error BoundTightened v1 .spec.name", "error BoundTightened v1 .spec.name",
			"error BoundTightened v1 .spec.tags", "error BoundTightened v1 .spec.tags",
		}},
		{name: "bounds loosened", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.Maximum = ptr.To(100.0) })
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.MaxItems = nil })
		}, want: []string{"info BoundLoosened v1 .spec.size", "info BoundLoosened v1 .spec.tags"}},
		{name: "multipleOf added", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.MultipleOf = ptr.To(2.0) })
		}, want: []string{"error BoundTightened v1 .spec.size"}},
		{name: "pattern and format changed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.Pattern, p.Format = "^[a-z]{2,}$", "hostname" })
		}, want: []string{"warning FormatChanged v1 .spec.name", "warning PatternChanged v1 .spec.name"}},
		{name: "nullable removed", change: func(o, _ *apiextensionsv1.CustomResourceDefinition) {
			editProp(o, "name", func(p *apiextensionsv1.JSONSchemaProps) { p.Nullable = true })
		}, want: []string{"warning NullableRemoved v1 .spec.name"}},
		{name: "preserve unknown fields removed", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "extra", func(p *apiextensionsv1.JSONSchemaProps) { p.XPreserveUnknownFields = nil })
		}, want: []string{"warning PreserveUnknownFieldsChanged v1 .spec.extra"}},
		{name: "list type set", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "tags", func(p *apiextensionsv1.JSONSchemaProps) { p.XListType = ptr.To("set") })
		}, want: []string{"warning ListTypeChanged v1 .spec.tags"}},
		{name: "validation rule added and removed", change: func(o, n *apiextensionsv1.CustomResourceDefinition) {
			s := specOf(o, 0)
			s.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size > 0"}}
			setSpec(o, 0, s)
			s = specOf(n, 0)
			s.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size % 2 == 0", Message: "even"}}
			setSpec(n, 0, s)
		}, want: []string{"info ValidationRuleRemoved v1 .spec", "warning ValidationRuleAdded v1 .spec"}},
		{name: "unknown change in a schema node", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			editProp(n, "size", func(p *apiextensionsv1.JSONSchemaProps) { p.XIntOrString = true })
		}, want: []string{"warning UnknownChange v1 .spec.size"}},
		{name: "unknown change in a version", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.Versions[0].Subresources = nil
		}, want: []string{"warning UnknownChange v1 "}},
		{name: "unknown change in the spec", change: func(_, n *apiextensionsv1.CustomResourceDefinition) {
			n.Spec.PreserveUnknownFields = true
		}, want: []string{"warning UnknownChange  .spec"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old, new := loadCRD(t, widgetCRD), loadCRD(t, widgetCRD)
			tc.change(old, new)
			got := CompareCRDs(old, new)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if g := keys(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), strings.Join(want, "\n"))
			}
			for _, f := range got {
				if f.CRD != "widgets.example.com" || f.Message == "" {
					t.Errorf("finding without its CRD or message: %+v", f)
				}
			}
		})
	}
}

func findingLines(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

// repoRoot is the repository's top folder (tests run in their package's folder).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readCRDFile(t *testing.T, path string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return loadCRD(t, string(b))
}

// The sample operator's releases: 1.0.0 (v1alpha1), 2.0.0 (v1beta1 stored, adds spec.backup,
// preserves unknown spec fields), 3.0.0 (v1 stored, spec.version renamed spec.mysqlVersion,
// conversion through a webhook the OLM bundle wires in).
func TestCompareCRDsSampleOperator(t *testing.T) {
	deploy := filepath.Join(repoRoot(t), "examples", "mysql-operator", "deploy")
	v1 := readCRDFile(t, filepath.Join(deploy, "v1", "00-crd.yaml"))
	v2 := readCRDFile(t, filepath.Join(deploy, "v2", "crds", "mysqlclusters.database.example.com.yaml"))
	v3 := readCRDFile(t, filepath.Join(deploy, "v3", "manifests", "mysqlclusters.database.example.com.crd.yaml"))
	// The OLM bundle wires the conversion webhook in when it is rendered.
	bundle, _, err := release.RenderBundle(filepath.Join(deploy, "v3"), "mysql-operator")
	if err != nil {
		t.Fatal(err)
	}
	crds, err := CRDs(bundle)
	if err != nil {
		t.Fatal(err)
	}
	v3rendered := crds["mysqlclusters.database.example.com"]
	if v3rendered == nil {
		t.Fatal("the 3.0.0 bundle renders no MySQLCluster CRD")
	}

	cases := []struct {
		name     string
		old, new *apiextensionsv1.CustomResourceDefinition
		// want is every finding, as "severity check version path".
		want []string
	}{
		{name: "1.0.0 to 2.0.0", old: v1, new: v2, want: []string{
			"info PreserveUnknownFieldsChanged v1alpha1 .spec",
			"info StorageVersionChanged v1beta1 ",
			"info VersionAdded v1beta1 ",
		}},
		{name: "2.0.0 to 1.0.0: the way back", old: v2, new: v1, want: []string{
			"warning ServedVersionRemoved v1beta1 ",
			"error StoredVersionRemoved v1beta1 ",
			"info StorageVersionChanged v1alpha1 ",
			"warning PreserveUnknownFieldsChanged v1alpha1 .spec",
		}},
		{name: "2.0.0 to 3.0.0, the CRD file alone", old: v2, new: v3, want: []string{
			"info PreserveUnknownFieldsChanged v1beta1 .spec",
			"info StorageVersionChanged v1 ",
			"info VersionAdded v1 ",
		}},
		{name: "2.0.0 to 3.0.0 as the bundle renders it", old: v2, new: v3rendered, want: []string{
			"info PreserveUnknownFieldsChanged v1beta1 .spec",
			"info StorageVersionChanged v1 ",
			"info VersionAdded v1 ",
			"warning ConversionChanged  .spec.conversion",
		}},
		{name: "1.0.0 to 3.0.0: a version jump", old: v1, new: v3rendered, want: []string{
			"info PreserveUnknownFieldsChanged v1alpha1 .spec",
			"info StorageVersionChanged v1 ",
			"info VersionAdded v1 ",
			"info VersionAdded v1beta1 ",
			"warning ConversionChanged  .spec.conversion",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CompareCRDs(tc.old, tc.new)
			want := append([]string(nil), tc.want...)
			sort.Strings(want)
			if g := keys(got); strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), strings.Join(want, "\n"))
			}
		})
	}
}

// renderESO renders the External Secrets Operator chart at version (CRDs included, as the chart
// installs them by default) and returns its CRDs.
func renderESO(t *testing.T, version string) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	objs, _, err := release.RenderChart(filepath.Join(repoRoot(t), "test", "fixtures", "charts", "external-secrets-"+version), "", "eso", "external-secrets")
	if err != nil {
		t.Fatal(err)
	}
	crds, err := CRDs(objs)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) == 0 {
		t.Fatalf("ESO %s renders no CRDs", version)
	}
	return crds
}

// ESO 0.15.1 -> 0.16.2: v1 becomes the storage version, v1alpha1 is no longer served, template
// engine v1 is gone, the fake provider's valueMap is removed and its value required, and the
// conversion webhook is dropped (v1beta1 and v1 have the same schema).
func TestCompareCRDsESO(t *testing.T) {
	old, new := renderESO(t, "0.15.1"), renderESO(t, "0.16.2")
	want := map[string][]string{
		"externalsecrets.external-secrets.io": {
			"error EnumNarrowed v1beta1 .spec.target.template.engineVersion",
			"warning ServedVersionRemoved v1alpha1 ",
			"info ConversionChanged  .spec.conversion",
			"info FieldAdded v1beta1 .spec.refreshPolicy",
			"info StorageVersionChanged v1 ",
			"info VersionAdded v1 ",
		},
		"secretstores.external-secrets.io": {
			"error FieldRemoved v1beta1 .spec.provider.fake.data[*].valueMap",
			"error RequiredFieldAdded v1beta1 .spec.provider.fake.data[*].value",
			"warning ServedVersionRemoved v1alpha1 ",
			"info ConversionChanged  .spec.conversion",
			"info FieldAdded v1beta1 .spec.provider.webhook.auth",
			"info StorageVersionChanged v1 ",
			"info VersionAdded v1 ",
		},
		"passwords.generators.external-secrets.io": {
			"info ConversionChanged  .spec.conversion",
		},
	}
	if len(old) != 20 || len(new) != 20 {
		t.Fatalf("ESO renders %d and %d CRDs, want 20 each", len(old), len(new))
	}
	errors := 0
	for _, name := range sortedKeys(old) {
		if new[name] == nil {
			t.Fatalf("%s: not in 0.16.2", name)
		}
		got := CompareCRDs(old[name], new[name])
		errors += len(Errors(got))
		w, ok := want[name]
		if !ok {
			continue
		}
		sort.Strings(w)
		if g := keys(got); strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s findings:\n%s\nwant:\n%s", name, findingLines(got), strings.Join(w, "\n"))
		}
	}
	// externalsecrets 1, secretstores 2, clustersecretstores 2, clusterexternalsecrets 1,
	// pushsecrets 1, clusterpushsecrets 1.
	if errors != 8 {
		t.Errorf("%d error findings over the 20 CRDs, want 8", errors)
	}
	if n := len(Errors(CompareCRDs(old["externalsecrets.external-secrets.io"], new["externalsecrets.external-secrets.io"]), CheckEnumNarrowed)); n != 0 {
		t.Errorf("%d error findings once EnumNarrowed is ignored, want 0", n)
	}
}

// Every check that can stop a release (error or warning severity) can be named in a Rollout's
// spec.preflight.ignore, and nothing else: the CRD's enum is the list below.
func TestIgnorableChecksMatchTheRolloutCRD(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "crd", "bases", "rewind.dev_rollouts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := loadCRD(t, string(b))
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["preflight"].Properties["ignore"]
	var enum []string
	for _, e := range props.Items.Schema.Enum {
		enum = append(enum, strings.Trim(string(e.Raw), `"`))
	}
	sort.Strings(enum)
	ignorable := []Check{
		CheckStoredVersionRemoved, CheckScopeChanged, CheckServedVersionRemoved, CheckNamesChanged, CheckRequiredFieldAdded,
		CheckFieldRemoved, CheckTypeChanged, CheckDefaultAdded, CheckDefaultChanged, CheckDefaultRemoved, CheckEnumNarrowed,
		CheckBoundTightened, CheckPatternChanged, CheckFormatChanged, CheckNullableRemoved, CheckPreserveUnknownFields,
		CheckListTypeChanged, CheckValidationRuleAdded, CheckConversionChanged, CheckUnknownChange,
		CheckObjectRefused, CheckFieldLost, CheckFieldChanged, CheckRoundTripRefused, CheckConversionNotVerified,
	}
	var want []string
	for _, c := range ignorable {
		want = append(want, string(c))
	}
	sort.Strings(want)
	if strings.Join(enum, ",") != strings.Join(want, ",") {
		t.Errorf("spec.preflight.ignore allows\n%v\nthe checks that can stop a release are\n%v", enum, want)
	}
}
