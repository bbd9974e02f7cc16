package release

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Canonical serializes objs deterministically: one compact JSON object per line (keys sorted,
// no HTML escaping), objects sorted by API group, kind, namespace and name (then version).
// A null metadata.creationTimestamp and a status holding only empty values are dropped, as
// rendering tools add them without meaning anything. The same objects give the same bytes whatever their order or
// the files they came from. Two objects with the same group, kind, namespace and name are an
// error: which one would win depends on the order they are applied in. objs are not modified.
func Canonical(objs []*unstructured.Unstructured) ([]byte, error) {
	type entry struct {
		key  objectKey
		line []byte
	}
	entries := make([]entry, 0, len(objs))
	for i, o := range objs {
		if o == nil || o.Object == nil {
			return nil, fmt.Errorf("object %d is empty", i)
		}
		m := normalize(o.Object)
		line, err := marshalLine(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(o), err)
		}
		entries = append(entries, entry{key: keyOf(o), line: line})
	}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i].key, entries[j].key
		if a != b {
			return a.less(b)
		}
		return bytes.Compare(entries[i].line, entries[j].line) < 0
	})
	var buf bytes.Buffer
	for i, e := range entries {
		if i > 0 && entries[i-1].key.sameObject(e.key) {
			return nil, fmt.Errorf("the manifests hold %s twice; every object must appear once", e.key)
		}
		buf.Write(e.line)
	}
	return buf.Bytes(), nil
}

// Digest returns the content digest of canonical bytes: "sha256:<64 lowercase hex>".
func Digest(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Parse reads objects back from the output of Canonical, in order.
func Parse(canonical []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	scanner := bufio.NewScanner(bytes.NewReader(canonical))
	scanner.Buffer(make([]byte, 0, 64*1024), len(canonical)+1)
	for line := 1; scanner.Scan(); line++ {
		text := bytes.TrimSpace(scanner.Bytes())
		if len(text) == 0 {
			continue
		}
		var m map[string]interface{}
		if err := utiljson.Unmarshal(text, &m); err != nil {
			return nil, fmt.Errorf("canonical manifests, line %d: %w", line, err)
		}
		if m == nil {
			return nil, fmt.Errorf("canonical manifests, line %d: not an object", line)
		}
		if err := checkObject(m); err != nil {
			return nil, fmt.Errorf("canonical manifests, line %d: %w", line, err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("canonical manifests: %w", err)
	}
	return objs, nil
}

// normalize returns a shallow copy of obj without the fields that carry no meaning in a
// manifest: a null metadata.creationTimestamp and an empty status (see isEmpty).
func normalize(obj map[string]interface{}) map[string]interface{} {
	m := make(map[string]interface{}, len(obj))
	for k, v := range obj {
		m[k] = v
	}
	if status, ok := m["status"]; ok && isEmpty(status) {
		delete(m, "status")
	}
	if meta, ok := m["metadata"].(map[string]interface{}); ok {
		if ts, ok := meta["creationTimestamp"]; ok && ts == nil {
			copied := make(map[string]interface{}, len(meta))
			for k, v := range meta {
				if k != "creationTimestamp" {
					copied[k] = v
				}
			}
			m["metadata"] = copied
		}
	}
	return m
}

// isEmpty reports whether v holds nothing: null, "", or maps and lists of only empty values
// (such as the status {acceptedNames: {kind: ""}, conditions: []} older tools write into CRDs).
// false and 0 are values.
func isEmpty(v interface{}) bool {
	switch t := v.(type) {
	case nil:
		return true
	case string:
		return t == ""
	case map[string]interface{}:
		for _, e := range t {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	case []interface{}:
		for _, e := range t {
			if !isEmpty(e) {
				return false
			}
		}
		return true
	}
	return false
}

// marshalLine encodes m as one line of compact JSON with sorted keys.
func marshalLine(m map[string]interface{}) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil // Encode ends the line with '\n'
}

// objectKey orders objects in canonical output.
type objectKey struct {
	group, kind, namespace, name, version string
}

func keyOf(o *unstructured.Unstructured) objectKey {
	gvk := o.GroupVersionKind()
	return objectKey{group: gvk.Group, kind: gvk.Kind, namespace: o.GetNamespace(), name: o.GetName(), version: gvk.Version}
}

func (a objectKey) less(b objectKey) bool {
	for _, p := range [][2]string{{a.group, b.group}, {a.kind, b.kind}, {a.namespace, b.namespace}, {a.name, b.name}, {a.version, b.version}} {
		if p[0] != p[1] {
			return p[0] < p[1]
		}
	}
	return false
}

// sameObject reports whether a and b name the same object (the version does not matter).
func (a objectKey) sameObject(b objectKey) bool {
	return a.group == b.group && a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

func (a objectKey) String() string {
	gk := a.kind
	if a.group != "" {
		gk += "." + a.group
	}
	if a.namespace != "" {
		return fmt.Sprintf("%s %s/%s", gk, a.namespace, a.name)
	}
	return fmt.Sprintf("%s %s", gk, a.name)
}

func describe(o *unstructured.Unstructured) string {
	return strings.TrimSpace(keyOf(o).String())
}
