package snapshot

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// The decoder interns keys and short string values: the objects must be exactly what a plain
// decode gives, and repeated strings must be held once.
func TestDecoderInternsStringsAndDecodesAsBefore(t *testing.T) {
	long := strings.Repeat("x", maxInterned+1)
	lines := []string{
		`{"format":"` + Format + `","clusterID":"c","operator":"op"}`,
		`{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"app":"db"}},"data":{"k":"` + long + `","n":null},"list":["v1",1,2.5,{"app":"v1"}]},"section":"associated"}`,
		`{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"b","labels":{"app":"db"}},"data":{"k":"` + long + `"},"spec":{"replicas":3}},"section":"associated"}`,
	}
	_, entries, err := ReadAll(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2", len(entries))
	}
	for i, e := range entries {
		var want map[string]any
		if err := utiljson.Unmarshal([]byte(lines[i+1][len(`{"object":`):strings.LastIndex(lines[i+1], `,"section"`)]), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(e.Object.Object, want) || e.Section != SectionAssociated {
			t.Errorf("entry %d decodes to %#v, want %#v", i, e.Object.Object, want)
		}
	}
	data := func(s string) *byte { return unsafe.StringData(s) }
	a, b := entries[0].Object, entries[1].Object
	if data(a.GetAPIVersion()) != data(b.GetAPIVersion()) || data(a.GetLabels()["app"]) != data(b.GetLabels()["app"]) {
		t.Error("a repeated value is held twice")
	}
	keyOf := func(m map[string]any, k string) string {
		for x := range m {
			if x == k {
				return x
			}
		}
		t.Fatalf("no key %q", k)
		return ""
	}
	if data(keyOf(a.Object, "metadata")) != data(keyOf(b.Object, "metadata")) {
		t.Error("a repeated key is held twice")
	}
	la, _ := a.Object["data"].(map[string]any)["k"].(string)
	lb, _ := b.Object["data"].(map[string]any)["k"].(string)
	if data(la) == data(lb) {
		t.Error("a long value is interned")
	}
}
