package restore

import (
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Comparer compares a snapshot object with a live one as the API server sees them:
//
//   - both normalized (Normalize: server-managed fields dropped);
//   - custom resources with the defaults of their CRD's schema applied. The API server applies
//     them to every write, so a restored object carries a defaulted field even where the
//     snapshot did not (an object stored at an older version is read without the defaults of
//     the newer one, and a restore necessarily writes it at the current version);
//   - observedGeneration (status.observedGeneration and each condition's) compared either as
//     written or relative to metadata.generation (where both objects have a generation): the
//     generation is the server's counter, and a restore's writes may move it even when the
//     spec ends up as in the snapshot. A restore writes the snapshot's status as it is (so it
//     may say "n behind" until the operator reconciles), and once the operator has reconciled,
//     the status says again what the snapshot's said ("observed the current spec"). Both are
//     the snapshot's status.
type Comparer struct {
	schemas map[schema.GroupVersionKind]*structuralschema.Structural
}

// hasDefaults says whether s or any schema below it has a default (otherwise defaulting
// changes nothing).
func hasDefaults(s *structuralschema.Structural) bool {
	if s == nil {
		return false
	}
	if s.Default.Object != nil {
		return true
	}
	for _, p := range s.Properties {
		if hasDefaults(&p) {
			return true
		}
	}
	if s.AdditionalProperties != nil && hasDefaults(s.AdditionalProperties.Structural) {
		return true
	}
	return hasDefaults(s.Items)
}

// NewComparer knows the schemas of crds (CustomResourceDefinition objects, apiextensions.k8s.io/v1).
// A version whose schema cannot be read gets no defaults.
func NewComparer(crds []*unstructured.Unstructured) *Comparer {
	c := &Comparer{schemas: map[schema.GroupVersionKind]*structuralschema.Structural{}}
	for _, u := range crds {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				continue
			}
			s, err := structuralschema.NewStructural(internal)
			if err != nil || !hasDefaults(s) {
				continue // no defaults to apply
			}
			c.schemas[schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}] = s
		}
	}
	return c
}

// Prepare returns the forms of snap and live that Equal compares, with observedGeneration
// relative to the generation (for showing differences).
func (c *Comparer) Prepare(snap, live *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	a, b, ga, gb, ok := c.prepare(snap, live)
	if ok {
		shiftObservedGeneration(a.Object, -ga)
		shiftObservedGeneration(b.Object, -gb)
	}
	return a, b
}

// prepare returns normalized copies of snap and live with the schema defaults applied, and the
// generations to relate observedGeneration to (ok: both objects are custom resources with one).
func (c *Comparer) prepare(snap, live *unstructured.Unstructured) (a, b *unstructured.Unstructured, ga, gb int64, ok bool) {
	a, b = c.withDefaults(snap), c.withDefaults(live)
	if !IsBuiltin(snap.GroupVersionKind()) {
		var aok, bok bool
		ga, aok = generation(snap)
		gb, bok = generation(live)
		ok = aok && bok
	}
	return Normalize(a), Normalize(b), ga, gb, ok
}

// withDefaults returns u with its CRD schema's defaults applied (a copy), or u itself when no
// schema is known for it.
func (c *Comparer) withDefaults(u *unstructured.Unstructured) *unstructured.Unstructured {
	if c == nil {
		return u
	}
	s := c.schemas[u.GroupVersionKind()]
	if s == nil {
		return u
	}
	d := u.DeepCopy()
	structuraldefaulting.Default(d.Object, s)
	return d
}

// Equal says whether live equals snap in the sense of Comparer. It copies neither object
// unless defaults must be applied or observedGeneration related to the generation: it
// compares normalized views that share everything but the metadata with the objects.
func (c *Comparer) Equal(snap, live *unstructured.Unstructured) bool {
	a, b := c.withDefaults(snap), c.withDefaults(live)
	if jsonEqual(normalizedView(a.Object), normalizedView(b.Object)) {
		return true // as written
	}
	if IsBuiltin(snap.GroupVersionKind()) {
		return false
	}
	ga, aok := generation(snap)
	gb, bok := generation(live)
	if !aok || !bok || ga == gb {
		return false
	}
	na, nb := Normalize(a), Normalize(b)
	shiftObservedGeneration(na.Object, -ga)
	shiftObservedGeneration(nb.Object, -gb)
	return jsonEqual(na.Object, nb.Object) // relative
}

// shiftObservedGeneration adds by to status.observedGeneration and to the observedGeneration of
// every status condition, where present.
func shiftObservedGeneration(obj map[string]any, by int64) {
	status, ok := obj["status"].(map[string]any)
	if !ok {
		return
	}
	shift := func(m map[string]any) {
		switch v := m["observedGeneration"].(type) {
		case int64:
			m["observedGeneration"] = v + by
		case float64:
			m["observedGeneration"] = v + float64(by)
		}
	}
	shift(status)
	if conds, ok := status["conditions"].([]any); ok {
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok {
				shift(m)
			}
		}
	}
}

// generation reads metadata.generation (int64 from the API, float64 from decoded JSON).
func generation(u *unstructured.Unstructured) (int64, bool) {
	md, _ := u.Object["metadata"].(map[string]any)
	switch v := md["generation"].(type) {
	case int64:
		return v, true
	case float64:
		return int64(v), true
	}
	return 0, false
}
