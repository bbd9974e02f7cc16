package preflight

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// CRDs returns the apiextensions.k8s.io/v1 CustomResourceDefinitions among objs (a release's
// rendered manifests, or CRDs read from a cluster), typed, by name.
func CRDs(objs []*unstructured.Unstructured) (map[string]*apiextensionsv1.CustomResourceDefinition, error) {
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, o := range objs {
		if o == nil || o.GetAPIVersion() != apiextensionsv1.SchemeGroupVersion.String() || o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		crd, err := ToCRD(o)
		if err != nil {
			return nil, err
		}
		out[crd.Name] = crd
	}
	return out, nil
}

// ToCRD converts an unstructured CustomResourceDefinition to the typed one.
func ToCRD(o *unstructured.Unstructured) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, crd); err != nil {
		return nil, fmt.Errorf("CustomResourceDefinition %s is not a valid apiextensions.k8s.io/v1 object: %w", o.GetName(), err)
	}
	return crd, nil
}
