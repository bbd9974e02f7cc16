package snapshot

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// decodeList must give what the dynamic client's List gives: the same objects (integers as
// int64, kind and apiVersion filled in from the list where an object has neither) and the
// same continue token.
func TestDecodeListDecodesAsTheDynamicClient(t *testing.T) {
	for _, doc := range []string{
		// A typed list: the list's fields first, objects without kind.
		`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"abc"},"items":[{"metadata":{"name":"a","uid":"u1"},"data":{"k":"v"}},{"metadata":{"name":"b"},"data":{"n":"1"}}]}`,
		// An unstructured list: keys sorted, metadata last.
		`{"apiVersion":"database.example.com/v1alpha1","items":[{"apiVersion":"database.example.com/v1alpha1","kind":"MySQLCluster","metadata":{"name":"db"},"spec":{"replicas":3,"ratio":0.5,"big":12345678901234567890,"html":"<a&b>"}}],"kind":"MySQLClusterList","metadata":{"continue":""}}`,
		// Objects needing the list's kind before it is read: held, then filled in.
		`{"items":[{"metadata":{"name":"x"}},{"kind":"K","metadata":{"name":"y"}},{"metadata":{"name":"z"}}],"apiVersion":"v9","kind":"ThingList","metadata":{"continue":"next"}}`,
		`{"kind":"ThingList","apiVersion":"v1","items":null,"metadata":{}}`,
		`{"kind":"ThingList","apiVersion":"v1","items":[],"extra":[1,{"a":2}],"metadata":{"continue":7}}`,
		` {"kind":"ThingList","items":[{"a":1}]} `,
	} {
		var want unstructured.UnstructuredList
		if _, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(doc), nil, &want); err != nil {
			t.Fatalf("%s: the dynamic client's decoder fails: %v", doc, err)
		}
		var got []unstructured.Unstructured
		cont, err := decodeList(strings.NewReader(doc), func(u *unstructured.Unstructured) error {
			got = append(got, *u)
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if cont != want.GetContinue() {
			t.Errorf("%s: continue %q, want %q", doc, cont, want.GetContinue())
		}
		if len(got) != len(want.Items) {
			t.Fatalf("%s: %d objects, want %d", doc, len(got), len(want.Items))
		}
		for i := range got {
			if !reflect.DeepEqual(got[i].Object, want.Items[i].Object) {
				t.Errorf("%s: object %d is\n%#v\nwant\n%#v", doc, i, got[i].Object, want.Items[i].Object)
			}
		}
	}
	for _, bad := range []string{``, `[]`, `{"kind":"L","items":{}}`, `{"items":[]}`, `{"kind":"L","items":[1]}`, `{"kind":"L","items":[{"a":}]}`, `{"kind":"L"} {}`, `{"kind":"L","items":[{}]`} {
		if _, err := decodeList(strings.NewReader(bad), func(*unstructured.Unstructured) error { return nil }); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}
