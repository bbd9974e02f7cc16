package restore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Which refused updates a restore makes by deleting the object and creating it again: only
// a built-in kind's, and only when every cause of the typed Invalid error is a field that
// only a create may set. The errors are made as the API server makes them
// (apierrors.NewInvalid of field errors, ValidateImmutableField for most kinds).
func TestRecreatable(t *testing.T) {
	var (
		deployment  = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
		statefulSet = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
		service     = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
		pvc         = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
		cr          = schema.GroupVersionKind{Group: "database.example.com", Version: "v1alpha1", Kind: "MySQLCluster"}
	)
	invalid := func(gvk schema.GroupVersionKind, errs ...*field.Error) error {
		return apierrors.NewInvalid(gvk.GroupKind(), "x", field.ErrorList(errs))
	}
	immutable := func(path string) *field.Error {
		return validation.ValidateImmutableField("new", "old", field.NewPath(path))[0]
	}
	for _, tc := range []struct {
		name string
		gvk  schema.GroupVersionKind
		err  error
		// want says whether the object is recreated; why is then part of the reason given.
		want bool
		why  string
	}{
		{"a Deployment's selector", deployment, invalid(deployment, immutable("spec.selector")), true, "spec.selector: Invalid value"},
		{"declarative validation's immutable", statefulSet,
			invalid(statefulSet, field.Invalid(field.NewPath("spec", "serviceName"), nil, validation.FieldImmutableErrorMsg).WithOrigin("immutable")), true, "spec.serviceName"},
		{"a Service's cluster IPs", service,
			invalid(service, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), []string{"None"}, "may not change once set")), true, "spec.clusterIPs[0]"},
		{"an older StatefulSet's spec", statefulSet,
			invalid(statefulSet, field.Forbidden(field.NewPath("spec"), "updates to statefulset spec for fields other than 'replicas' are forbidden")), true, "spec: Forbidden"},
		{"an immutable field and a real error", deployment,
			invalid(deployment, immutable("spec.selector"), field.Required(field.NewPath("spec", "template", "spec", "containers"), "")), false, ""},
		{"a real error alone", deployment, invalid(deployment, field.Invalid(field.NewPath("spec", "replicas"), -1, "must be greater than or equal to 0")), false, ""},
		{"a message that merely says immutable", service,
			invalid(service, field.Invalid(field.NewPath("spec", "ports"), "x", "ports are immutable around here")), false, ""},
		{"a create-only field's words at another field", service,
			invalid(service, field.Invalid(field.NewPath("spec", "clusterIPsX"), "x", "may not change once set")), false, ""},
		{"a custom resource, whatever its causes say", cr, invalid(cr, immutable("spec.key")), false, ""},
		{"a custom resource's CEL message", cr, invalid(cr, field.Invalid(field.NewPath("spec"), "object", "key is immutable")), false, ""},
		{"a claim holds a volume", pvc, invalid(pvc, immutable("spec.volumeName")), false, ""},
		{"Invalid without causes", deployment, apierrors.NewInvalid(deployment.GroupKind(), "x", nil), false, ""},
		{"not Invalid, though its text says immutable", deployment, apierrors.NewBadRequest("spec.selector: field is immutable"), false, ""},
		{"wrapped", deployment, fmt.Errorf("updating: %w", invalid(deployment, immutable("spec.selector"))), true, "spec.selector"},
		{"a plain error", deployment, errors.New("field is immutable"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, ok := recreatable(tc.gvk, tc.err)
			if ok != tc.want {
				t.Fatalf("recreatable(%s, %v) = %t, want %t", tc.gvk.Kind, tc.err, ok, tc.want)
			}
			if ok && !strings.Contains(why, tc.why) {
				t.Errorf("reason %q, want it to contain %q", why, tc.why)
			}
		})
	}
}

// A refused update names its fields.
func TestRefusalNamesTheFields(t *testing.T) {
	gk := schema.GroupKind{Group: "cel.example.com", Kind: "Lock"}
	err := apierrors.NewInvalid(gk, "lock-a", field.ErrorList{
		field.Invalid(field.NewPath("spec"), "object", "key is immutable"),
		field.Required(field.NewPath("spec", "size"), ""),
	})
	got := refusal(err)
	if !strings.HasPrefix(got.Error(), "refused at spec, spec.size: ") || !apierrors.IsInvalid(got) {
		t.Errorf("refusal: %v (invalid %t)", got, apierrors.IsInvalid(got))
	}
	other := apierrors.NewServiceUnavailable("busy")
	if refusal(other) != other {
		t.Error("a refusal other than Invalid is returned as it is")
	}
}
