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

// The raw decoder yields each entry's section and its object's JSON as the payload holds it
// (decoding it gives what Next gives), and refuses a line that is not JSON or holds no object.
func TestDecoderRawEntries(t *testing.T) {
	header := `{"format":"` + Format + `","clusterID":"c","operator":"op"}`
	good := []string{
		`{"object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","uid":"u1"},"data":{"n":"12345678901234567890"}},"section":"associated"}`,
		`{"object":{"apiVersion":"db.example.com/v1","kind":"DB","metadata":{"name":"b","namespace":"x","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"a","uid":"u1"}]},"spec":{"size":9007199254740993}},"section":"cr"}`,
	}
	payload := header + "\n" + strings.Join(good, "\n") + "\n"
	_, decoded, err := ReadAll(strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDecoder(strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	var raws []RawEntry
	for e, err := range d.AllRaw() {
		if err != nil {
			t.Fatal(err)
		}
		raws = append(raws, e)
	}
	if len(raws) != len(good) {
		t.Fatalf("%d raw entries, want %d", len(raws), len(good))
	}
	for i, e := range raws {
		var got map[string]any
		if err := utiljson.Unmarshal(e.Object, &got); err != nil {
			t.Fatal(err)
		}
		if e.Section != decoded[i].Section || !reflect.DeepEqual(got, decoded[i].Object.Object) {
			t.Errorf("raw entry %d is %s %s, want %s %#v", i, e.Section, e.Object, decoded[i].Section, decoded[i].Object.Object)
		}
	}
	// RawEntriesOf gives the same objects for a decoded snapshot.
	i := 0
	for e, err := range RawEntriesOf(decoded) {
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := utiljson.Unmarshal(e.Object, &got); err != nil {
			t.Fatal(err)
		}
		if e.Section != decoded[i].Section || !reflect.DeepEqual(got, decoded[i].Object.Object) {
			t.Errorf("RawEntriesOf entry %d is %s %s", i, e.Section, e.Object)
		}
		i++
	}

	for _, bad := range []struct{ line, want string }{
		{`{"object":{"kind":"ConfigMap"`, "line 2"},
		{`{"section":"cr"}`, "line 2 has no object"},
		{`{"section":"cr","object":null}`, "line 2 has no object"},
		{`{"section":"cr","object":[1]}`, "line 2 has no object"},
	} {
		d, err := NewDecoder(strings.NewReader(header + "\n" + bad.line + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.NextRaw()
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NextRaw of %s: %v, want an error naming %q", bad.line, err, bad.want)
		}
	}
}
