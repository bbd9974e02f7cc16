package restore

import (
	"maps"
	"reflect"

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
// compared. (kubectl's last-applied-configuration is not one: a person's kubectl apply wrote
// it, and it is restored like any annotation.)
var serverAnnotations = []string{
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

// serverMetadata are the metadata fields the server manages.
var serverMetadata = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// Normalize returns a copy of obj with everything the server manages removed, so that a
// snapshot object and a live object compare equal exactly when a restore would change
// nothing: server metadata (uid, resourceVersion, generation, timestamps, managedFields),
// ownerReference UIDs (remapped on restore), the status of built-in kinds, and fields the
// server allocates (a Service's cluster IPs, unless the Service is headless).
func Normalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
	return (&unstructured.Unstructured{Object: normalizedView(obj.Object)}).DeepCopy()
}

// normalizedView returns obj as Normalize does, without copying what Normalize keeps as it
// is: the result shares spec, status and the rest with obj; only the maps and slices it
// changes (the top level, metadata, its ownerReferences and annotations, a Service's spec)
// are new. Neither obj nor the view may be modified while the other is in use.
func normalizedView(obj map[string]any) map[string]any {
	u := maps.Clone(obj)
	if md, _ := u["metadata"].(map[string]any); md != nil {
		md = maps.Clone(md)
		u["metadata"] = md
		for _, f := range serverMetadata {
			delete(md, f)
		}
		if refs, ok := md["ownerReferences"].([]any); ok {
			out := make([]any, len(refs))
			for i, r := range refs {
				if m, ok := r.(map[string]any); ok {
					m = maps.Clone(m)
					delete(m, "uid")
					r = m
				}
				out[i] = r
			}
			md["ownerReferences"] = out
		}
		if ann, ok := md["annotations"].(map[string]any); ok {
			ann = maps.Clone(ann)
			for _, a := range serverAnnotations {
				delete(ann, a)
			}
			if len(ann) == 0 {
				delete(md, "annotations")
			} else {
				md["annotations"] = ann
			}
		}
		for _, f := range []string{"labels", "finalizers", "ownerReferences"} {
			if v, ok := md[f]; ok && isEmpty(v) {
				delete(md, f)
			}
		}
	}
	gvk := (&unstructured.Unstructured{Object: u}).GroupVersionKind()
	if IsBuiltin(gvk) {
		delete(u, "status")
	}
	if gvk.Group == "" && gvk.Kind == "Service" {
		if ip, _, _ := unstructured.NestedString(u, "spec", "clusterIP"); ip != "None" {
			if spec, ok := u["spec"].(map[string]any); ok {
				spec = maps.Clone(spec)
				delete(spec, "clusterIP")
				delete(spec, "clusterIPs")
				u["spec"] = spec
			}
		}
	}
	if s, ok := u["status"]; ok && isEmpty(s) {
		delete(u, "status")
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

// asFloat returns v as a float64 when it is a number of decoded JSON (float64, int64) or an int.
func asFloat(v any) (float64, bool) {
	switch t := v.(type) {
	case float64:
		return t, true
	case int64:
		return float64(t), true
	case int32:
		return float64(t), true
	case int:
		return float64(t), true
	}
	return 0, false
}

// jsonEqual is reflect.DeepEqual with every integer taken as a float64 (an object decoded from
// JSON holds float64 where one from the API holds int64) and a nil map or slice equal to an
// empty one.
func jsonEqual(x, y any) bool {
	if fx, ok := asFloat(x); ok {
		fy, ok := asFloat(y)
		return ok && fx == fy
	}
	switch tx := x.(type) {
	case map[string]any:
		ty, ok := y.(map[string]any)
		if !ok || len(tx) != len(ty) {
			return false
		}
		for k, vx := range tx {
			vy, ok := ty[k]
			if !ok || !jsonEqual(vx, vy) {
				return false
			}
		}
		return true
	case []any:
		ty, ok := y.([]any)
		if !ok || len(tx) != len(ty) {
			return false
		}
		for i := range tx {
			if !jsonEqual(tx[i], ty[i]) {
				return false
			}
		}
		return true
	}
	if _, ok := asFloat(y); ok {
		return false
	}
	return reflect.DeepEqual(x, y)
}
