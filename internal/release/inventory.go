package release

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// CRDInventory describes every apiextensions.k8s.io/v1 CustomResourceDefinition in objs: name,
// group, kind, scope, served versions (in spec order), storage version and conversion strategy
// ("None" unless set), sorted by name.
func CRDInventory(objs []*unstructured.Unstructured) []v1alpha1.CRDInfo {
	var crds []v1alpha1.CRDInfo
	for _, o := range objs {
		if o == nil || o.GetAPIVersion() != "apiextensions.k8s.io/v1" || o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		info := v1alpha1.CRDInfo{Name: o.GetName(), ConversionStrategy: "None"}
		info.Group, _, _ = unstructured.NestedString(o.Object, "spec", "group")
		info.Kind, _, _ = unstructured.NestedString(o.Object, "spec", "names", "kind")
		info.Scope, _, _ = unstructured.NestedString(o.Object, "spec", "scope")
		if s, _, _ := unstructured.NestedString(o.Object, "spec", "conversion", "strategy"); s != "" {
			info.ConversionStrategy = s
		}
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, raw := range versions {
			v, ok := raw.(map[string]interface{})
			if !ok {
				continue
			}
			name, _ := v["name"].(string)
			if served, _ := v["served"].(bool); served {
				info.ServedVersions = append(info.ServedVersions, name)
			}
			if storage, _ := v["storage"].(bool); storage {
				info.StorageVersion = name
			}
		}
		crds = append(crds, info)
	}
	sort.SliceStable(crds, func(i, j int) bool { return crds[i].Name < crds[j].Name })
	return crds
}
