package restore

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

// entry is a snapshot object as a restore holds it: what identifies it, decoded, and its
// content as JSON, decoded each time a step needs it. A decoded object takes several times
// the memory of its JSON, a restore holds its whole snapshot while it runs, and a fleet's
// rollback runs many restores at once.
type entry struct {
	section   string
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	uid       types.UID
	owners    []metav1.OwnerReference
	raw       []byte
}

func newEntry(e snapshot.RawEntry) (*entry, error) {
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name            string                  `json:"name"`
			Namespace       string                  `json:"namespace"`
			UID             types.UID               `json:"uid"`
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	// Case-sensitive, as the API machinery reads objects.
	if err := utiljson.Unmarshal(e.Object, &m); err != nil {
		return nil, fmt.Errorf("snapshot entry in section %s: %w", e.Section, err)
	}
	return &entry{
		section: e.Section, gvk: schema.FromAPIVersionAndKind(m.APIVersion, m.Kind), namespace: m.Metadata.Namespace, name: m.Metadata.Name,
		uid: m.Metadata.UID, owners: m.Metadata.OwnerReferences, raw: e.Object,
	}, nil
}

// object decodes the entry: a new object each time, the caller's to change. Integers decode
// as int64, as the snapshot decoder and the API machinery decode them.
func (e *entry) object() (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(e.raw, &m); err != nil {
		return nil, fmt.Errorf("snapshot entry %s: %w", e.key(), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// key is keyOf the entry's object.
func (e *entry) key() string { return keyFor(e.gvk.GroupKind(), e.namespace, e.name) }

// nsName is nsName of the entry's object.
func (e *entry) nsName() string { return e.namespace + "/" + e.name }

// keyOf names an object for reports and the held set.
func keyOf(u *unstructured.Unstructured) string {
	return keyFor(u.GroupVersionKind().GroupKind(), u.GetNamespace(), u.GetName())
}

// keyFor is keyOf for an object of kind gk named namespace/name.
func keyFor(gk schema.GroupKind, namespace, name string) string {
	if namespace == "" {
		return gk.String() + " " + name
	}
	return gk.String() + " " + namespace + "/" + name
}

func nsName(u *unstructured.Unstructured) string { return u.GetNamespace() + "/" + u.GetName() }
