package restore

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The comparison used to normalize deep copies of both objects and compare their
// numbersAsFloat copies with reflect.DeepEqual. refNormalize and refEqual are that
// implementation, kept here to check that the copy-free one decides every case the same.

func refNormalize(obj *unstructured.Unstructured) *unstructured.Unstructured {
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

func refEqual(c *Comparer, snap, live *unstructured.Unstructured) bool {
	a, b := c.withDefaults(snap), c.withDefaults(live)
	var ga, gb int64
	var ok bool
	if !IsBuiltin(snap.GroupVersionKind()) {
		var aok, bok bool
		ga, aok = generation(snap)
		gb, bok = generation(live)
		ok = aok && bok
	}
	a, b = refNormalize(a), refNormalize(b)
	if reflect.DeepEqual(numbersAsFloat(a.Object), numbersAsFloat(b.Object)) {
		return true
	}
	if !ok || ga == gb {
		return false
	}
	shiftObservedGeneration(a.Object, -ga)
	shiftObservedGeneration(b.Object, -gb)
	return reflect.DeepEqual(numbersAsFloat(a.Object), numbersAsFloat(b.Object))
}

func TestEqualDecidesAsTheCopyingComparison(t *testing.T) {
	cmp := NewComparer([]*unstructured.Unstructured{obj(t, compareCRD)})
	cr := func(extra map[string]any) *unstructured.Unstructured {
		u := obj(t, `{apiVersion: database.example.com/v1beta1, kind: MySQLCluster,
metadata: {name: a, namespace: ns1, generation: 1, uid: u1, resourceVersion: "5", labels: {app: db},
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: o, uid: o1}]},
spec: {replicas: 2, list: [1, "x", {size: 3}]},
status: {observedGeneration: 1, conditions: [{type: Ready, status: "True", observedGeneration: 1}]}}`)
		for k, v := range extra {
			u.Object[k] = v
		}
		return u
	}
	set := func(u *unstructured.Unstructured, v any, path ...string) *unstructured.Unstructured {
		u = u.DeepCopy()
		m := u.Object
		for _, p := range path[:len(path)-1] {
			if m[p] == nil {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[path[len(path)-1]] = v
		return u
	}
	del := func(u *unstructured.Unstructured, path ...string) *unstructured.Unstructured {
		u = u.DeepCopy()
		unstructured.RemoveNestedField(u.Object, path...)
		return u
	}
	svc := obj(t, `{apiVersion: v1, kind: Service, metadata: {name: s, namespace: ns1, annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}},
spec: {clusterIP: 10.0.0.1, clusterIPs: [10.0.0.1], ports: [{port: 3306}]}, status: {loadBalancer: {}}}`)
	dep := obj(t, `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, namespace: ns1, generation: 3},
spec: {replicas: 1}, status: {readyReplicas: 1}}`)
	base := cr(nil)
	// fromAPI is base as the API returns it: integers as int64.
	fromAPI := set(set(set(base, int64(2), "spec", "replicas"), []any{int64(1), "x", map[string]any{"size": int64(3)}}, "spec", "list"), int64(1), "metadata", "generation")
	cases := []struct {
		name       string
		snap, live *unstructured.Unstructured
		// want is the expected decision (both implementations must make it).
		want bool
	}{
		{"same object", base, base.DeepCopy(), true},
		{"float64 and int64 numbers", base, fromAPI, true},
		{"another number", base, set(fromAPI, int64(3), "spec", "replicas"), false},
		{"a number and a string", base, set(base, "2", "spec", "replicas"), false},
		{"server metadata", base, set(set(set(base, "u2", "metadata", "uid"), "9", "metadata", "resourceVersion"), []any{map[string]any{"manager": "x"}}, "metadata", "managedFields"), true},
		{"owner UID only", base, set(base, []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "o2"}}, "metadata", "ownerReferences"), true},
		{"owner name", base, set(base, []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "p", "uid": "o1"}}, "metadata", "ownerReferences"), false},
		{"no owners and empty owners", del(base, "metadata", "ownerReferences"), set(base, []any{}, "metadata", "ownerReferences"), true},
		{"empty labels", del(base, "metadata", "labels"), set(base, map[string]any{}, "metadata", "labels"), true},
		{"null labels", del(base, "metadata", "labels"), set(base, nil, "metadata", "labels"), true},
		{"other labels", base, set(base, map[string]any{"app": "x"}, "metadata", "labels"), false},
		{"empty finalizers", base, set(base, []any{}, "metadata", "finalizers"), true},
		{"server annotations only", base, set(base, map[string]any{"deployment.kubernetes.io/revision": "3"}, "metadata", "annotations"), true},
		{"an annotation", base, set(base, map[string]any{"a": "b"}, "metadata", "annotations"), false},
		{"kubectl's last applied configuration", base, set(base, map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"MySQLCluster"}`}, "metadata", "annotations"), false},
		{"null annotations", base, set(base, nil, "metadata", "annotations"), false},
		{"nil and empty list", set(base, []any(nil), "spec", "list"), set(base, []any{}, "spec", "list"), true},
		{"null and empty list", set(base, nil, "spec", "list"), set(base, []any{}, "spec", "list"), false},
		{"nil and empty map", set(base, map[string]any(nil), "spec", "m"), set(base, map[string]any{}, "spec", "m"), true},
		{"empty status", del(base, "status"), set(base, map[string]any{}, "status"), true},
		{"another status", base, set(base, "Failed", "status", "phase"), false},
		{"observedGeneration relative", base, set(set(set(base, int64(2), "metadata", "generation"), int64(2), "status", "observedGeneration"),
			[]any{map[string]any{"type": "Ready", "status": "True", "observedGeneration": int64(2)}}, "status", "conditions"), true},
		{"observedGeneration behind", base, set(set(base, int64(5), "metadata", "generation"), int64(3), "status", "observedGeneration"), false},
		{"schema default", base, set(base, map[string]any{"schedule": "0 3 * * *"}, "spec", "backup"), true},
		{"other than the default", base, set(base, map[string]any{"schedule": "@hourly"}, "spec", "backup"), false},
		{"built-in status", dep, set(set(dep, int64(0), "status", "readyReplicas"), int64(4), "metadata", "generation"), true},
		{"built-in spec", dep, set(dep, int64(2), "spec", "replicas"), false},
		{"allocated cluster IP", svc, set(set(svc, "10.0.0.2", "spec", "clusterIP"), []any{"10.0.0.2"}, "spec", "clusterIPs"), true},
		{"headless", set(svc, "None", "spec", "clusterIP"), svc, false},
		{"Service ports", svc, set(svc, []any{map[string]any{"port": int64(3307)}}, "spec", "ports"), false},
		{"other kind", base, set(base, "Other", "kind"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, pair := range [][2]*unstructured.Unstructured{{c.snap, c.live}, {c.live, c.snap}} {
				a, b := pair[0].DeepCopy(), pair[1].DeepCopy()
				ref := refEqual(cmp, pair[0], pair[1])
				if got := cmp.Equal(a, b); got != ref || got != c.want {
					t.Errorf("Equal = %v, the copying comparison says %v, want %v", got, ref, c.want)
				}
				if !reflect.DeepEqual(a, pair[0]) || !reflect.DeepEqual(b, pair[1]) {
					t.Error("Equal modified its arguments")
				}
				for _, u := range pair {
					if got, want := Normalize(u), refNormalize(u); !reflect.DeepEqual(got, want) {
						t.Errorf("Normalize:\n%v\nwant\n%v", got.Object, want.Object)
					}
				}
			}
		})
	}
}
