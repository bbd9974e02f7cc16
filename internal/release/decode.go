package release

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// decodeDocuments decodes every document of one YAML (multi-document) or JSON stream into
// objects. Empty documents (only whitespace or comments) are skipped, List kinds are flattened
// into their items, and a document that is not a Kubernetes object (no apiVersion, kind or
// metadata.name) is an error naming source and the 1-based document index.
func decodeDocuments(source string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for index := 1; ; index++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", source, index, err)
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			continue
		}
		if raw[0] != '{' {
			return nil, fmt.Errorf("%s: document %d: not a Kubernetes object (a YAML/JSON map with apiVersion, kind and metadata.name)", source, index)
		}
		var m map[string]interface{}
		if err := utiljson.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, index, err)
		}
		items, err := flatten(m)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, index, err)
		}
		for i, item := range items {
			if err := checkObject(item); err != nil {
				if isList(m) {
					return nil, fmt.Errorf("%s: document %d: item %d: %w", source, index, i, err)
				}
				return nil, fmt.Errorf("%s: document %d: %w", source, index, err)
			}
			objs = append(objs, &unstructured.Unstructured{Object: item})
		}
	}
}

// isList reports whether m is a List kind: v1 List or any <Kind>List with an items array.
func isList(m map[string]interface{}) bool {
	kind, _ := m["kind"].(string)
	if kind != "List" && !strings.HasSuffix(kind, "List") {
		return false
	}
	_, ok := m["items"].([]interface{})
	return ok || kind == "List"
}

// flatten returns m itself, or the items of a List kind. Items of a typed list (FooList) that
// carry no apiVersion/kind inherit the list's apiVersion and the kind without the List suffix.
func flatten(m map[string]interface{}) ([]map[string]interface{}, error) {
	if !isList(m) {
		return []map[string]interface{}{m}, nil
	}
	kind, _ := m["kind"].(string)
	apiVersion, _ := m["apiVersion"].(string)
	rawItems, _ := m["items"].([]interface{})
	items := make([]map[string]interface{}, 0, len(rawItems))
	for i, raw := range rawItems {
		item, ok := raw.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("item %d of the %s is not an object", i, kind)
		}
		if kind != "List" {
			if _, ok := item["apiVersion"]; !ok {
				item["apiVersion"] = apiVersion
			}
			if _, ok := item["kind"]; !ok {
				item["kind"] = strings.TrimSuffix(kind, "List")
			}
		}
		nested, err := flatten(item)
		if err != nil {
			return nil, err
		}
		items = append(items, nested...)
	}
	return items, nil
}

// checkObject makes sure m names a Kubernetes object: apiVersion, kind and metadata.name.
func checkObject(m map[string]interface{}) error {
	var missing []string
	if s, _ := m["apiVersion"].(string); s == "" {
		missing = append(missing, "apiVersion")
	}
	if s, _ := m["kind"].(string); s == "" {
		missing = append(missing, "kind")
	}
	meta, _ := m["metadata"].(map[string]interface{})
	if s, _ := meta["name"].(string); s == "" {
		missing = append(missing, "metadata.name")
	}
	if len(missing) > 0 {
		return fmt.Errorf("not a Kubernetes object: missing %s", strings.Join(missing, ", "))
	}
	return nil
}
