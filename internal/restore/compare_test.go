package restore

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const compareCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: mysqlclusters.database.example.com}
spec:
  group: database.example.com
  names: {kind: MySQLCluster, plural: mysqlclusters}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
              backup:
                type: object
                default: {}
                properties:
                  schedule: {type: string, default: "0 3 * * *"}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
`

func obj(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestComparerAppliesSchemaDefaultsAndRelativeObservedGeneration(t *testing.T) {
	cmp := NewComparer([]*unstructured.Unstructured{obj(t, compareCRD)})
	// Captured while stored at an older version: no spec.backup; observed generation 1 of 1.
	snap := obj(t, `{apiVersion: database.example.com/v1beta1, kind: MySQLCluster,
metadata: {name: a, namespace: ns1, generation: 1},
spec: {replicas: 2},
status: {observedGeneration: 1, conditions: [{type: Ready, status: "True", observedGeneration: 1}]}}`)
	// Restored: the write defaulted spec.backup and moved the generation; the status observes it.
	live := obj(t, `{apiVersion: database.example.com/v1beta1, kind: MySQLCluster,
metadata: {name: a, namespace: ns1, generation: 2},
spec: {replicas: 2, backup: {schedule: "0 3 * * *"}},
status: {observedGeneration: 2, conditions: [{type: Ready, status: "True", observedGeneration: 2}]}}`)
	if !cmp.Equal(snap, live) {
		a, b := cmp.Prepare(snap, live)
		t.Fatalf("a restored object equal up to defaults and generation is reported different:\n%v\n%v", a.Object, b.Object)
	}
	if Equal(snap, live) {
		t.Fatal("without the schema, the defaulted field must count as a difference")
	}
	// Restored as written (the operator has not reconciled yet): observedGeneration 1 of
	// generation 2 is the snapshot's status too.
	asWritten := live.DeepCopy()
	_ = unstructured.SetNestedField(asWritten.Object, int64(1), "status", "observedGeneration")
	_ = unstructured.SetNestedSlice(asWritten.Object, []any{map[string]any{"type": "Ready", "status": "True", "observedGeneration": int64(1)}}, "status", "conditions")
	if !cmp.Equal(snap, asWritten) {
		t.Fatal("the snapshot's status written as it is must compare equal")
	}
	// Neither as written nor relative: a different status.
	drifted := live.DeepCopy()
	_ = unstructured.SetNestedField(drifted.Object, int64(5), "metadata", "generation")
	_ = unstructured.SetNestedField(drifted.Object, int64(3), "status", "observedGeneration")
	if cmp.Equal(snap, drifted) {
		t.Fatal("status.observedGeneration 3 of generation 5 must differ from 1 of 1")
	}
	// A default with another value is a real difference.
	other := live.DeepCopy()
	_ = unstructured.SetNestedField(other.Object, "@hourly", "spec", "backup", "schedule")
	if cmp.Equal(snap, other) {
		t.Fatal("a changed defaulted field must differ")
	}
	// Without generations on both sides, observedGeneration compares as it is.
	noGen := snap.DeepCopy()
	unstructured.RemoveNestedField(noGen.Object, "metadata", "generation")
	if cmp.Equal(noGen, live) {
		t.Fatal("observedGeneration 1 vs 2 without a generation to relate them must differ")
	}
}
