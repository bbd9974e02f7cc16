package snapshot

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Change kinds.
const (
	Added   = "Added"
	Removed = "Removed"
	Changed = "Changed"
)

// FieldChange is one field that differs.
type FieldChange struct {
	Path string `json:"path"`
	Old  string `json:"old,omitempty"`
	New  string `json:"new,omitempty"`
}

// Change is one object that differs between two snapshots.
type Change struct {
	Key    Key           `json:"-"`
	Object string        `json:"object"`
	Type   string        `json:"type"`
	Fields []FieldChange `json:"fields,omitempty"`
}

// Diff compares two sets of entries (from, to) object by object and field by field. Values of
// Secrets are never shown, only their paths.
func Diff(from, to []Entry) []Change {
	a, b := index(from), index(to)
	var out []Change
	for k, ea := range a {
		eb, ok := b[k]
		if !ok {
			out = append(out, Change{Key: k, Object: k.String(), Type: Removed})
			continue
		}
		var fields []FieldChange
		diffValues("", ea.Object.Object, eb.Object.Object, IsSecret(ea.Object), &fields)
		if len(fields) > 0 {
			sort.Slice(fields, func(i, j int) bool { return fields[i].Path < fields[j].Path })
			out = append(out, Change{Key: k, Object: k.String(), Type: Changed, Fields: fields})
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, Change{Key: k, Object: k.String(), Type: Added})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out
}

func index(es []Entry) map[Key]Entry {
	m := make(map[Key]Entry, len(es))
	for _, e := range es {
		m[KeyOf(e)] = e
	}
	return m
}

func diffValues(path string, a, b any, secret bool, out *[]FieldChange) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]struct{}{}
		for k := range am {
			keys[k] = struct{}{}
		}
		for k := range bm {
			keys[k] = struct{}{}
		}
		for k := range keys {
			if path == "metadata" && k == "generation" {
				continue // follows every spec change; the spec change itself is shown
			}
			p := k
			if path != "" {
				p = path + "." + k
			}
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case ain && !bin:
				*out = append(*out, FieldChange{Path: p, Old: show(av, secret, p)})
			case !ain && bin:
				*out = append(*out, FieldChange{Path: p, New: show(bv, secret, p)})
			default:
				diffValues(p, av, bv, secret, out)
			}
		}
		return
	}
	if !reflect.DeepEqual(normalizeNumber(a), normalizeNumber(b)) {
		*out = append(*out, FieldChange{Path: path, Old: show(a, secret, path), New: show(b, secret, path)})
	}
}

func normalizeNumber(v any) any {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case json.Number:
		f, _ := n.Float64()
		return f
	}
	return v
}

func show(v any, secret bool, path string) string {
	if v == nil {
		return "null"
	}
	if secret && (strings.HasPrefix(path, "data") || strings.HasPrefix(path, "stringData")) {
		return "<redacted>"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
