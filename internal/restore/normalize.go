// Package restore brings a member cluster back to a snapshot: a plan of idempotent steps
// (quiesce, CRDs, custom resources, associated resources, objects created since, resume),
// journaled so that a crashed restore resumes where it stopped. Every object is fully
// replaced from the snapshot, never merged.
package restore

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// builtinGroups are API groups whose objects' status is written by Kubernetes controllers,
// not by the operator: their status is server-managed and neither restored nor compared.
var builtinGroups = map[string]bool{
	"": true, "apps": true, "batch": true, "rbac.authorization.k8s.io": true, "admissionregistration.k8s.io": true,
	"policy": true, "networking.k8s.io": true, "coordination.k8s.io": true, "scheduling.k8s.io": true,
	"apiextensions.k8s.io": true, "autoscaling": true, "storage.k8s.io": true,
}

// serverAnnotations are annotations Kubernetes components write; they are not restored or
// compared.
var serverAnnotations = []string{
	"kubectl.kubernetes.io/last-applied-configuration",
	"deployment.kubernetes.io/revision",
	// The API server counts a DaemonSet's template changes here itself.
	"deprecated.daemonset.template.generation",
	// The PV controller and provisioners record a claim's binding and provisioner.
	"pv.kubernetes.io/bind-completed",
	"pv.kubernetes.io/bound-by-controller",
	"volume.kubernetes.io/storage-provisioner",
	"volume.beta.kubernetes.io/storage-provisioner",
	"volume.kubernetes.io/selected-node",
}

// IsBuiltin says whether a kind is built into Kubernetes (its status is server-managed).
func IsBuiltin(gvk schema.GroupVersionKind) bool { return builtinGroups[gvk.Group] }

// Normalize returns a copy of obj with everything the server manages removed, so that a
// snapshot object and a live object compare equal exactly when a restore would change
// nothing: server metadata (uid, resourceVersion, generation, timestamps, managedFields),
// ownerReference UIDs (remapped on restore), the status of built-in kinds, and fields the
// server allocates (a Service's cluster IPs, unless the Service is headless).
func Normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	u := obj.DeepCopy()
	md, _ := u.Object["metadata"].(map[string]any)
	if md != nil {
		for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"} {
			delete(md, f)
		}
		if refs, ok := md["ownerReferences"].([]any); ok {
			for _, r := range refs {
				if m, ok := r.(map[string]any); ok {
					delete(m, "uid")
				}
			}
		}
		if ann, ok := md["annotations"].(map[string]any); ok {
			for _, a := range serverAnnotations {
				delete(ann, a)
			}
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
		for _, f := range []string{"labels", "finalizers", "ownerReferences"} {
			if v, ok := md[f]; ok && isEmpty(v) {
				delete(md, f)
			}
		}
	}
	gvk := u.GroupVersionKind()
	if IsBuiltin(gvk) {
		delete(u.Object, "status")
	}
	if gvk.Group == "" && gvk.Kind == "Service" {
		if ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP"); ip != "None" {
			unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
			unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
		}
	}
	if s, ok := u.Object["status"]; ok && isEmpty(s) {
		delete(u.Object, "status")
	}
	return u
}

func isEmpty(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return false
}

// Equal says whether two objects are equal once normalized, with observedGeneration taken
// relative to the generation (see Comparer; no schema defaults).
func Equal(a, b *unstructured.Unstructured) bool {
	return (*Comparer)(nil).Equal(a, b)
}

func numbersAsFloat(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = numbersAsFloat(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = numbersAsFloat(x)
		}
		return out
	case int64:
		return float64(t)
	case int32:
		return float64(t)
	case int:
		return float64(t)
	}
	return v
}
