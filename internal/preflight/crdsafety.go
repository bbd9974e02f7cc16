package preflight

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// CompareCRDs returns the upgrade-safety findings of replacing the CRD old (what the cluster
// has) by new (what the release ships), sorted by version and path.
//
// old's status.storedVersions says which versions objects are stored in; a CRD read from a
// release rather than a cluster has none, and its storage version stands for them. Both CRDs are
// defaulted as the API server defaults them (conversion None, listKind, singular) so a release's
// sparse manifest compares equal to the live object it produced.
//
// Every difference is classified: the known ones get their own Check and a severity; anything
// else (a subresource, a selectable field, an allOf, x-kubernetes-int-or-string, ...) is reported
// as CheckUnknownChange naming the keys that differ. Descriptions, titles, examples, printer
// columns and deprecation notices are the only differences never reported.
func CompareCRDs(old, new *apiextensionsv1.CustomResourceDefinition) []Finding {
	old, new = defaulted(old), defaulted(new)
	c := &comparison{crd: new.Name}
	c.compareSpec(old, new)
	sortFindings(c.findings)
	return c.findings
}

func defaulted(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	crd = crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	return crd
}

type comparison struct {
	crd      string
	findings []Finding
}

func (c *comparison) add(check Check, sev Severity, version, path, format string, args ...any) {
	c.findings = append(c.findings, Finding{
		CRD: c.crd, Check: check, Severity: sev, Version: version, Path: path,
		Message: fmt.Sprintf(format, args...),
	})
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

func (c *comparison) compareSpec(old, new *apiextensionsv1.CustomResourceDefinition) {
	if old.Spec.Scope != new.Spec.Scope {
		c.add(CheckScopeChanged, SeverityError, "", "", "scope changes from %s to %s: the API server refuses the change while objects exist, and every client addresses the objects differently", old.Spec.Scope, new.Spec.Scope)
	}
	c.compareNames(old.Spec.Names, new.Spec.Names)
	c.compareConversion(old.Spec.Conversion, new.Spec.Conversion)

	oldVersions := map[string]*apiextensionsv1.CustomResourceDefinitionVersion{}
	for i := range old.Spec.Versions {
		oldVersions[old.Spec.Versions[i].Name] = &old.Spec.Versions[i]
	}
	newVersions := map[string]*apiextensionsv1.CustomResourceDefinitionVersion{}
	for i := range new.Spec.Versions {
		newVersions[new.Spec.Versions[i].Name] = &new.Spec.Versions[i]
	}
	for _, stored := range old.Status.StoredVersions {
		if newVersions[stored] == nil {
			c.add(CheckStoredVersionRemoved, SeverityError, stored, "", "version %s is removed while objects are stored in it (status.storedVersions): the API server refuses the CRD until every object is migrated and the stored version trimmed", stored)
		}
	}
	for _, ov := range old.Spec.Versions {
		nv := newVersions[ov.Name]
		switch {
		case nv == nil && ov.Served:
			c.add(CheckServedVersionRemoved, SeverityWarning, ov.Name, "", "served version %s is removed: clients and manifests using %s stop working", ov.Name, apiVersion(old, ov.Name))
		case nv != nil && ov.Served && !nv.Served:
			c.add(CheckServedVersionRemoved, SeverityWarning, ov.Name, "", "version %s is no longer served: clients and manifests using %s stop working", ov.Name, apiVersion(old, ov.Name))
		}
		if nv != nil {
			c.compareVersion(&ov, nv)
		}
	}
	for _, nv := range new.Spec.Versions {
		if oldVersions[nv.Name] == nil {
			c.add(CheckVersionAdded, SeverityInfo, nv.Name, "", "version %s is added (served: %t, storage: %t)", nv.Name, nv.Served, nv.Storage)
		}
	}
	if os, ns := storageVersion(old), storageVersion(new); os != ns {
		c.add(CheckStorageVersionChanged, SeverityInfo, ns, "", "the storage version changes from %s to %s: objects written from now on are stored at %s; a rollback makes %s the storage version again and rewrites every object at it", os, ns, ns, os)
	}

	// Whatever else the spec holds (group, preserveUnknownFields) is unknown.
	os, ns := old.Spec.DeepCopy(), new.Spec.DeepCopy()
	for _, s := range []*apiextensionsv1.CustomResourceDefinitionSpec{os, ns} {
		s.Scope, s.Names, s.Conversion, s.Versions = "", apiextensionsv1.CustomResourceDefinitionNames{}, nil, nil
	}
	c.unknown("", ".spec", os, ns)
}

func apiVersion(crd *apiextensionsv1.CustomResourceDefinition, version string) string {
	return crd.Spec.Group + "/" + version
}

func (c *comparison) compareNames(old, new apiextensionsv1.CustomResourceDefinitionNames) {
	if old.Kind != new.Kind || old.ListKind != new.ListKind || old.Plural != new.Plural {
		c.add(CheckNamesChanged, SeverityError, "", ".spec.names", "kind/listKind/plural change from %s/%s/%s to %s/%s/%s: clients and manifests addressing the old names stop working", old.Kind, old.ListKind, old.Plural, new.Kind, new.ListKind, new.Plural)
	}
	if old.Singular != new.Singular || !sameStrings(old.ShortNames, new.ShortNames) || !sameStrings(old.Categories, new.Categories) {
		c.add(CheckNamesChanged, SeverityInfo, "", ".spec.names", "singular, short names or categories change (kubectl names: %s %v %v -> %s %v %v)", old.Singular, old.ShortNames, old.Categories, new.Singular, new.ShortNames, new.Categories)
	}
}

func sameStrings(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return reflect.DeepEqual(a, b) || (len(a) == 0 && len(b) == 0)
}

func (c *comparison) compareConversion(old, new *apiextensionsv1.CustomResourceConversion) {
	if old == nil || new == nil {
		return // defaulted: never nil
	}
	switch {
	case old.Strategy != new.Strategy && new.Strategy == apiextensionsv1.WebhookConverter:
		c.add(CheckConversionChanged, SeverityWarning, "", ".spec.conversion", "conversion changes from %s to a webhook: every read and write between versions goes through it, and it must be able to convert back", old.Strategy)
	case old.Strategy != new.Strategy:
		c.add(CheckConversionChanged, SeverityInfo, "", ".spec.conversion", "conversion changes from %s to %s: versions convert by rewriting apiVersion only", old.Strategy, new.Strategy)
	case !reflect.DeepEqual(old.Webhook, new.Webhook):
		c.add(CheckConversionChanged, SeverityInfo, "", ".spec.conversion.webhook", "the conversion webhook's client configuration or review versions change")
	}
}

func (c *comparison) compareVersion(old, new *apiextensionsv1.CustomResourceDefinitionVersion) {
	var oldSchema, newSchema *apiextensionsv1.JSONSchemaProps
	if old.Schema != nil {
		oldSchema = old.Schema.OpenAPIV3Schema
	}
	if new.Schema != nil {
		newSchema = new.Schema.OpenAPIV3Schema
	}
	c.compareSchemas(new.Name, oldSchema, newSchema)

	// Known and harmless: served (checked above), storage (checked above), deprecation, printer
	// columns. Anything else (subresources, selectable fields) is unknown.
	ov, nv := old.DeepCopy(), new.DeepCopy()
	for _, v := range []*apiextensionsv1.CustomResourceDefinitionVersion{ov, nv} {
		v.Served, v.Storage, v.Deprecated, v.DeprecationWarning = false, false, false, nil
		v.AdditionalPrinterColumns, v.Schema = nil, nil
	}
	c.unknown(new.Name, "", ov, nv)
}

// schemaNode is a schema at a field path, flattened out of the tree.
type schemaNode struct {
	path   string
	parent string
	props  *apiextensionsv1.JSONSchemaProps
}

// flatten lists every schema node by path: "." is the root, ".spec.replicas" a property,
// ".spec.items[*]" an array's items and ".spec.labels{*}" a map's values.
func flatten(root *apiextensionsv1.JSONSchemaProps) map[string]schemaNode {
	out := map[string]schemaNode{}
	var walk func(path, parent string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path, parent string, s *apiextensionsv1.JSONSchemaProps) {
		if s == nil {
			return
		}
		out[path] = schemaNode{path: path, parent: parent, props: s}
		for name := range s.Properties {
			p := s.Properties[name]
			walk(childPath(path, name), path, &p)
		}
		if s.Items != nil {
			walk(strings.TrimSuffix(path, ".")+"[*]", path, s.Items.Schema)
		}
		if s.AdditionalProperties != nil {
			walk(strings.TrimSuffix(path, ".")+"{*}", path, s.AdditionalProperties.Schema)
		}
	}
	walk(".", "", root)
	return out
}

func childPath(parent, name string) string {
	if strings.ContainsAny(name, ".[]{}' ") {
		return strings.TrimSuffix(parent, ".") + "['" + name + "']"
	}
	return strings.TrimSuffix(parent, ".") + "." + name
}

func (c *comparison) compareSchemas(version string, old, new *apiextensionsv1.JSONSchemaProps) {
	if old == nil && new == nil {
		return
	}
	if old == nil || new == nil {
		c.add(CheckUnknownChange, SeverityWarning, version, ".", "the version's schema is added or removed")
		return
	}
	oldNodes, newNodes := flatten(old), flatten(new)
	for _, path := range sortedKeys(oldNodes) {
		o := oldNodes[path]
		n, ok := newNodes[path]
		if !ok {
			if _, parentKept := newNodes[o.parent]; o.parent != "" && !parentKept {
				continue // reported at the topmost removed field
			}
			c.fieldRemoved(version, path, o, newNodes)
			continue
		}
		c.compareNode(version, path, o.props, n.props)
	}
	for _, path := range sortedKeys(newNodes) {
		n := newNodes[path]
		if _, ok := oldNodes[path]; ok {
			continue
		}
		if _, parentNew := oldNodes[n.parent]; !parentNew {
			continue // reported at the topmost added field
		}
		c.add(CheckFieldAdded, SeverityInfo, version, path, "field added (type %s)", typeOf(n.props))
	}
}

func typeOf(s *apiextensionsv1.JSONSchemaProps) string {
	if s.Type == "" {
		return "any"
	}
	return s.Type
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// fieldRemoved reports a field the new schema no longer has: pruned from every object written
// at this version (an error), unless the nearest ancestor the new schema keeps preserves unknown
// fields (then kept but no longer validated: a warning).
func (c *comparison) fieldRemoved(version, path string, old schemaNode, newNodes map[string]schemaNode) {
	ancestor := old.parent
	for ancestor != "" {
		if _, ok := newNodes[ancestor]; ok {
			break
		}
		ancestor = parentOf(ancestor)
	}
	if a, ok := newNodes[ancestor]; ok && preservesUnknown(a.props) {
		c.add(CheckFieldRemoved, SeverityWarning, version, path, "field removed from the schema; %s preserves unknown fields, so values are kept but no longer validated", ancestor)
		return
	}
	c.add(CheckFieldRemoved, SeverityError, version, path, "field removed from the schema: the API server prunes it from every object read or written at %s, and it is lost for good once written", version)
}

func preservesUnknown(s *apiextensionsv1.JSONSchemaProps) bool {
	return s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields
}

// parentOf is the path of a flattened path's parent ("" above the root).
func parentOf(path string) string {
	if path == "." || path == "" {
		return ""
	}
	i := strings.LastIndexAny(path, ".[{")
	if i <= 0 {
		return "."
	}
	return path[:i]
}

func (c *comparison) compareNode(version, path string, old, new *apiextensionsv1.JSONSchemaProps) {
	if old.Type != new.Type {
		c.add(CheckTypeChanged, SeverityError, version, path, "type changes from %s to %s: existing values are refused", typeOf(old), typeOf(new))
	}
	c.compareEnum(version, path, old.Enum, new.Enum)
	c.compareDefault(version, path, old.Default, new.Default)
	c.compareRequired(version, path, old, new)
	c.compareBounds(version, path, old, new)
	if old.Pattern != new.Pattern {
		if new.Pattern == "" {
			c.add(CheckPatternChanged, SeverityInfo, version, path, "pattern %q removed", old.Pattern)
		} else {
			c.add(CheckPatternChanged, SeverityWarning, version, path, "pattern changes from %q to %q: existing values may be refused", old.Pattern, new.Pattern)
		}
	}
	if old.Format != new.Format {
		if new.Format == "" {
			c.add(CheckFormatChanged, SeverityInfo, version, path, "format %q removed", old.Format)
		} else {
			c.add(CheckFormatChanged, SeverityWarning, version, path, "format changes from %q to %q: existing values may be refused", old.Format, new.Format)
		}
	}
	if old.Nullable && !new.Nullable {
		c.add(CheckNullableRemoved, SeverityWarning, version, path, "no longer nullable: a null value is refused (or dropped where a default applies)")
	}
	if op, np := preservesUnknown(old), preservesUnknown(new); op != np {
		if op {
			c.add(CheckPreserveUnknownFields, SeverityWarning, version, path, "no longer preserves unknown fields: fields the schema does not list are pruned when an object is read or written at %s", version)
		} else {
			c.add(CheckPreserveUnknownFields, SeverityInfo, version, path, "now preserves unknown fields")
		}
	}
	if !reflect.DeepEqual(old.XListType, new.XListType) || !reflect.DeepEqual(old.XListMapKeys, new.XListMapKeys) || !reflect.DeepEqual(old.XMapType, new.XMapType) {
		c.add(CheckListTypeChanged, SeverityWarning, version, path, "x-kubernetes-list-type, list-map-keys or map-type change: existing lists may be refused (duplicates) and server-side apply merges them differently")
	}
	c.compareRules(version, path, old.XValidations, new.XValidations)

	// Whatever else differs at this node is unknown.
	on, nn := residue(old), residue(new)
	c.unknown(version, path, on, nn)
}

// residue is a schema node without what compareNode checks, its children (compared at their
// own paths) and its documentation.
func residue(s *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
	r := *s // shallow: only fields are cleared
	r.Type, r.Enum, r.Default, r.Required = "", nil, nil, nil
	r.Minimum, r.Maximum, r.ExclusiveMinimum, r.ExclusiveMaximum, r.MultipleOf = nil, nil, false, false, nil
	r.MinLength, r.MaxLength, r.MinItems, r.MaxItems, r.MinProperties, r.MaxProperties = nil, nil, nil, nil, nil, nil
	r.Pattern, r.Format, r.Nullable, r.XPreserveUnknownFields = "", "", false, nil
	r.XListType, r.XListMapKeys, r.XMapType, r.XValidations = nil, nil, nil, nil
	r.Description, r.Title, r.Example, r.ExternalDocs = "", "", nil, nil
	r.Properties = nil
	if r.Items != nil {
		items := *r.Items
		items.Schema = nil
		r.Items = &items
	}
	if r.AdditionalProperties != nil {
		ap := *r.AdditionalProperties
		ap.Schema = nil
		r.AdditionalProperties = &ap
	}
	return &r
}

// unknown reports a difference between two residues, naming the JSON keys that differ.
func (c *comparison) unknown(version, path string, old, new any) {
	if reflect.DeepEqual(old, new) {
		return
	}
	om, nm := asMap(old), asMap(new)
	var keys []string
	for k := range om {
		if !reflect.DeepEqual(om[k], nm[k]) {
			keys = append(keys, k)
		}
	}
	for k := range nm {
		if _, ok := om[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return // equal once serialized (e.g. nil and empty)
	}
	c.add(CheckUnknownChange, SeverityWarning, version, path, "%s changed; rewind does not classify this change, review it", strings.Join(keys, ", "))
}

func asMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"<unserializable>": err.Error()}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return map[string]any{"<unserializable>": err.Error()}
	}
	return m
}

// canonicalJSON is a JSON value serialized with sorted keys ("" for none).
func canonicalJSON(j *apiextensionsv1.JSON) string {
	if j == nil || len(j.Raw) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(j.Raw, &v); err != nil {
		return string(j.Raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(j.Raw)
	}
	return string(b)
}

func (c *comparison) compareEnum(version, path string, old, new []apiextensionsv1.JSON) {
	if len(old) == 0 && len(new) == 0 {
		return
	}
	oldSet, newSet := map[string]bool{}, map[string]bool{}
	for i := range old {
		oldSet[canonicalJSON(&old[i])] = true
	}
	for i := range new {
		newSet[canonicalJSON(&new[i])] = true
	}
	if len(old) == 0 {
		c.add(CheckEnumNarrowed, SeverityError, version, path, "enum added (%s): existing values outside it are refused", strings.Join(sortedKeys(newSet), ", "))
		return
	}
	if len(new) == 0 {
		c.add(CheckEnumWidened, SeverityInfo, version, path, "enum removed: any value is accepted")
		return
	}
	var removed, added []string
	for v := range oldSet {
		if !newSet[v] {
			removed = append(removed, v)
		}
	}
	for v := range newSet {
		if !oldSet[v] {
			added = append(added, v)
		}
	}
	sort.Strings(removed)
	sort.Strings(added)
	if len(removed) > 0 {
		c.add(CheckEnumNarrowed, SeverityError, version, path, "enum narrowed: %s no longer allowed; objects using them are refused", strings.Join(removed, ", "))
	}
	if len(added) > 0 {
		c.add(CheckEnumWidened, SeverityInfo, version, path, "enum widened: %s added", strings.Join(added, ", "))
	}
}

func (c *comparison) compareDefault(version, path string, old, new *apiextensionsv1.JSON) {
	o, n := canonicalJSON(old), canonicalJSON(new)
	switch {
	case o == n:
	case o == "":
		c.add(CheckDefaultAdded, SeverityWarning, version, path, "default %s added: objects without the field get it when they are read or written", n)
	case n == "":
		c.add(CheckDefaultRemoved, SeverityWarning, version, path, "default %s removed: new objects without the field no longer get it", o)
	default:
		c.add(CheckDefaultChanged, SeverityError, version, path, "default changes from %s to %s: objects that relied on the old default change meaning when read or written", o, n)
	}
}

func (c *comparison) compareRequired(version, path string, old, new *apiextensionsv1.JSONSchemaProps) {
	had := map[string]bool{}
	for _, r := range old.Required {
		had[r] = true
	}
	for _, r := range new.Required {
		if had[r] {
			continue
		}
		field := childPath(path, r)
		if p, ok := new.Properties[r]; ok && p.Default != nil {
			c.add(CheckRequiredFieldAdded, SeverityWarning, version, field, "field is now required; its default %s fills it where objects lack it", canonicalJSON(p.Default))
			continue
		}
		c.add(CheckRequiredFieldAdded, SeverityError, version, field, "field is now required: objects without it are refused")
	}
}

// bound is one numeric limit of a schema.
type bound struct {
	name      string
	old, new  *float64
	oldExcl   bool
	newExcl   bool
	isMinimum bool // a lower limit: raising it tightens
}

func intBound(v *int64) *float64 {
	if v == nil {
		return nil
	}
	f := float64(*v)
	return &f
}

func (c *comparison) compareBounds(version, path string, old, new *apiextensionsv1.JSONSchemaProps) {
	bounds := []bound{
		{name: "minimum", old: old.Minimum, new: new.Minimum, oldExcl: old.ExclusiveMinimum, newExcl: new.ExclusiveMinimum, isMinimum: true},
		{name: "maximum", old: old.Maximum, new: new.Maximum, oldExcl: old.ExclusiveMaximum, newExcl: new.ExclusiveMaximum},
		{name: "minLength", old: intBound(old.MinLength), new: intBound(new.MinLength), isMinimum: true},
		{name: "maxLength", old: intBound(old.MaxLength), new: intBound(new.MaxLength)},
		{name: "minItems", old: intBound(old.MinItems), new: intBound(new.MinItems), isMinimum: true},
		{name: "maxItems", old: intBound(old.MaxItems), new: intBound(new.MaxItems)},
		{name: "minProperties", old: intBound(old.MinProperties), new: intBound(new.MinProperties), isMinimum: true},
		{name: "maxProperties", old: intBound(old.MaxProperties), new: intBound(new.MaxProperties)},
	}
	for _, b := range bounds {
		tightened, loosened := b.compare()
		switch {
		case tightened:
			c.add(CheckBoundTightened, SeverityError, version, path, "%s tightened from %s to %s: existing values outside it are refused", b.name, b.describe(b.old, b.oldExcl), b.describe(b.new, b.newExcl))
		case loosened:
			c.add(CheckBoundLoosened, SeverityInfo, version, path, "%s loosened from %s to %s", b.name, b.describe(b.old, b.oldExcl), b.describe(b.new, b.newExcl))
		}
	}
	o, n := old.MultipleOf, new.MultipleOf
	switch {
	case o == nil && n == nil:
	case n == nil:
		c.add(CheckBoundLoosened, SeverityInfo, version, path, "multipleOf %v removed", *o)
	case o == nil || *o != *n:
		c.add(CheckBoundTightened, SeverityError, version, path, "multipleOf set to %v: existing values that are not multiples are refused", *n)
	}
}

func (b bound) describe(v *float64, exclusive bool) string {
	if v == nil {
		return "none"
	}
	if exclusive {
		return fmt.Sprintf("%v (exclusive)", *v)
	}
	return fmt.Sprintf("%v", *v)
}

// compare says whether the new limit admits fewer values than the old one, or more.
func (b bound) compare() (tightened, loosened bool) {
	switch {
	case b.old == nil && b.new == nil:
		return false, false
	case b.old == nil:
		return true, false
	case b.new == nil:
		return false, true
	}
	o, n := *b.old, *b.new
	if o == n {
		return !b.oldExcl && b.newExcl, b.oldExcl && !b.newExcl
	}
	if b.isMinimum {
		return n > o, n < o
	}
	return n < o, n > o
}

func (c *comparison) compareRules(version, path string, old, new apiextensionsv1.ValidationRules) {
	had := map[string]bool{}
	for _, r := range old {
		had[r.Rule] = true
	}
	has := map[string]bool{}
	for _, r := range new {
		has[r.Rule] = true
		if !had[r.Rule] {
			c.add(CheckValidationRuleAdded, SeverityWarning, version, path, "x-kubernetes-validations rule added: %s; existing objects may fail it (the object check says which)", r.Rule)
		}
	}
	for _, r := range old {
		if !has[r.Rule] {
			c.add(CheckValidationRuleRemoved, SeverityInfo, version, path, "x-kubernetes-validations rule removed: %s", r.Rule)
		}
	}
}
