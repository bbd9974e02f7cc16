package preflight

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// VersionError says a CRD has no such version, or no schema for it.
type VersionError struct {
	CRD, Version string
	// NoSchema: the version exists but has no schema.openAPIV3Schema.
	NoSchema bool
}

func (e *VersionError) Error() string {
	if e.NoSchema {
		return fmt.Sprintf("CustomResourceDefinition %s: version %s has no schema.openAPIV3Schema; apiextensions.k8s.io/v1 requires one", e.CRD, e.Version)
	}
	return fmt.Sprintf("CustomResourceDefinition %s has no version %s in spec.versions", e.CRD, e.Version)
}

// SchemaError says a CRD version's schema is not one the API server would accept (not
// structural, or a default or CEL rule that does not compile).
type SchemaError struct {
	CRD, Version string
	Err          error
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("CustomResourceDefinition %s version %s: the schema is not one the API server accepts: %v", e.CRD, e.Version, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Schema is one version of a CRD as the API server enforces it on the objects it reads and
// writes: structural pruning, defaulting, OpenAPI validation, list-type invariants, embedded
// object metadata and x-kubernetes-validations (CEL), all from apiextensions-apiserver.
type Schema struct {
	CRD, Version string
	structural   *structuralschema.Structural
	validator    apiservervalidation.SchemaValidator
	cel          *cel.Validator
}

// NewSchema builds the Schema of version of crd.
func NewSchema(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Schema, error) {
	var v *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == version {
			v = &crd.Spec.Versions[i]
		}
	}
	if v == nil {
		return nil, &VersionError{CRD: crd.Name, Version: version}
	}
	if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return nil, &VersionError{CRD: crd.Name, Version: version, NoSchema: true}
	}
	internal := &apiextensions.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
		return nil, &SchemaError{CRD: crd.Name, Version: version, Err: err}
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, &SchemaError{CRD: crd.Name, Version: version, Err: err}
	}
	if errs := structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s); len(errs) > 0 {
		return nil, &SchemaError{CRD: crd.Name, Version: version, Err: errs.ToAggregate()}
	}
	// As the API server serves it (customresource_handler.go): defaults pruned of unknown fields.
	s = s.DeepCopy()
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, &SchemaError{CRD: crd.Name, Version: version, Err: err}
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, &SchemaError{CRD: crd.Name, Version: version, Err: err}
	}
	out := &Schema{CRD: crd.Name, Version: version, structural: s, validator: validator}
	if c := cel.NewValidator(s, true, celconfig.PerCallLimit); c != nil {
		out.cel = c
	}
	return out, nil
}

// Read does to obj what the API server does to an object it decodes at this version (from a
// request or from etcd): prunes the fields the schema does not know and applies its defaults.
// obj is changed in place; the pruned field paths are returned (".spec.foo").
func (s *Schema) Read(obj map[string]any) (pruned []string) {
	paths := structuralpruning.PruneWithOptions(obj, s.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, s.structural)
	structuraldefaulting.Default(obj, s.structural)
	for i, p := range paths {
		paths[i] = "." + p
	}
	return paths
}

// Validate returns what the API server refuses in obj when it is written at this version, as a
// create (no ratcheting: an update that leaves an invalid field unchanged may still pass).
func (s *Schema) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, s.validator)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, obj, s.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, obj)...)
	if s.cel == nil {
		return errs
	}
	for _, e := range errs {
		// As the API server: rules are not evaluated over an object of the wrong shape.
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	celErrs, _ := s.cel.Validate(ctx, nil, s.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// deepCopy copies an object's content.
func deepCopy(obj map[string]any) map[string]any {
	return runtime.DeepCopyJSON(obj)
}

// fieldPath turns an error's field path ("spec.mode") into the form findings use (".spec.mode").
func fieldPath(e *field.Error) string {
	if e.Field == "" || e.Field == "<nil>" {
		return "."
	}
	if strings.HasPrefix(e.Field, ".") || strings.HasPrefix(e.Field, "[") {
		return e.Field
	}
	return "." + e.Field
}
