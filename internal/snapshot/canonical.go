// Package snapshot captures one operator's state on one member cluster (its CRDs, every
// custom resource with status, and the associated resources) as a canonical, deterministic
// stream of entries, and reads it back.
package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"iter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Sections of a snapshot, in payload order.
const (
	SectionCRD        = "crd"
	SectionCR         = "cr"
	SectionAssociated = "associated"
)

// Format names the payload format, on the header line.
const Format = "rewind.dev/snapshot/v1"

// Header is the first line of a payload. It holds only what does not change between two
// captures of an unchanged cluster, so those captures are byte-identical.
type Header struct {
	Format    string `json:"format"`
	ClusterID string `json:"clusterID"`
	Operator  string `json:"operator"`
	Release   string `json:"release,omitempty"`
	Version   string `json:"version,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// Entry is one captured object.
type Entry struct {
	Section string                     `json:"section"`
	Object  *unstructured.Unstructured `json:"object"`
}

// Key identifies an object in a snapshot.
type Key struct {
	Section   string
	Group     string
	Kind      string
	Namespace string
	Name      string
}

// KeyOf returns the key of an entry.
func KeyOf(e Entry) Key {
	gvk := e.Object.GroupVersionKind()
	return Key{Section: e.Section, Group: gvk.Group, Kind: gvk.Kind, Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()}
}

// String prints the key as kind.group namespace/name.
func (k Key) String() string {
	gk := schema.GroupKind{Group: k.Group, Kind: k.Kind}.String()
	if k.Namespace == "" {
		return gk + " " + k.Name
	}
	return gk + " " + k.Namespace + "/" + k.Name
}

// serverFields are metadata fields the API server sets; they are stripped from captures.
// UIDs and ownerReferences are kept (restore remaps them), and so is the generation: a
// status.observedGeneration means nothing without it (restore compares and writes
// observedGeneration relative to it). It does not change while the spec does not, so two
// captures of an unchanged cluster stay byte-identical.
var serverFields = []string{"managedFields", "resourceVersion", "creationTimestamp", "selfLink", "deletionGracePeriodSeconds"}

// Canonicalize strips server-populated fields from obj in place. Annotations are kept, the
// kubectl.kubernetes.io/last-applied-configuration one too: it is the state kubectl apply
// merges against, and a restore that dropped it would change how the next apply behaves.
func Canonicalize(obj *unstructured.Unstructured) {
	md, ok := obj.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, f := range serverFields {
		delete(md, f)
	}
}

// encoder writes canonical lines: compact JSON with sorted keys, no HTML escaping.
type encoder struct {
	w   *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

func newEncoder(w io.Writer) *encoder {
	e := &encoder{w: bufio.NewWriterSize(w, 256<<10)}
	e.enc = newLineEncoder(&e.buf)
	return e
}

// newLineEncoder encodes values as canonical lines (every writer of lines uses it).
func newLineEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc
}

// line writes v as one line.
func (e *encoder) line(v any) error {
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil { // Encode appends '\n'
		return err
	}
	_, err := e.w.Write(e.buf.Bytes())
	return err
}

// raw writes b, which holds lines encoded as line does.
func (e *encoder) raw(b []byte) error {
	_, err := e.w.Write(b)
	return err
}

func (e *encoder) flush() error { return e.w.Flush() }

// Decoder reads a payload's plaintext entry by entry.
type Decoder struct {
	sc     *bufio.Scanner
	header Header
	line   int
	// strings interns the keys and short string values of the decoded objects: the
	// objects of a snapshot repeat the same keys and many values ("apiVersion", "v1",
	// label keys...), and a snapshot held for a restore holds each of them once.
	strings map[string]string
}

// NewDecoder reads the header line of a payload.
func NewDecoder(r io.Reader) (*Decoder, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	d := &Decoder{sc: sc, strings: map[string]string{}}
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("snapshot payload is empty")
	}
	d.line = 1
	if err := json.Unmarshal(sc.Bytes(), &d.header); err != nil {
		return nil, fmt.Errorf("snapshot payload header: %w", err)
	}
	if d.header.Format != Format {
		return nil, fmt.Errorf("snapshot payload format %q is not supported (want %s)", d.header.Format, Format)
	}
	return d, nil
}

// scan reads the next line (d.sc.Bytes), or returns io.EOF after the last.
func (d *Decoder) scan() error {
	if !d.sc.Scan() {
		if err := d.sc.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	d.line++
	return nil
}

// Header returns the payload's header.
func (d *Decoder) Header() Header { return d.header }

// Next returns the next entry, or io.EOF after the last.
func (d *Decoder) Next() (Entry, error) {
	if err := d.scan(); err != nil {
		return Entry{}, err
	}
	var raw struct {
		Section string         `json:"section"`
		Object  map[string]any `json:"object"`
	}
	// utiljson keeps integers as int64, as the API machinery expects.
	if err := utiljson.Unmarshal(d.sc.Bytes(), &raw); err != nil {
		return Entry{}, fmt.Errorf("snapshot payload line %d: %w", d.line, err)
	}
	if raw.Object == nil {
		return Entry{}, fmt.Errorf("snapshot payload line %d has no object", d.line)
	}
	d.internAll(raw.Object)
	return Entry{Section: raw.Section, Object: &unstructured.Unstructured{Object: raw.Object}}, nil
}

// maxInterned bounds the string values the decoder interns: longer ones (payloads,
// certificates) rarely repeat.
const maxInterned = 64

func (d *Decoder) intern(s string) string {
	if is, ok := d.strings[s]; ok {
		return is
	}
	d.strings[s] = s
	return s
}

// internAll replaces the keys and short string values of v, in place, by interned ones.
func (d *Decoder) internAll(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok && len(s) <= maxInterned {
				x = d.intern(s)
			} else {
				d.internAll(x)
			}
			// Storing under the equal interned key replaces the key map holds (string keys
			// are updated on assignment), so the decoded copy of the key can be collected.
			t[d.intern(k)] = x
		}
	case []any:
		for i, x := range t {
			if s, ok := x.(string); ok && len(s) <= maxInterned {
				t[i] = d.intern(s)
			} else {
				d.internAll(x)
			}
		}
	}
}

// All yields the decoder's remaining entries in order, decoded one at a time; an error ends
// it.
func (d *Decoder) All() iter.Seq2[Entry, error] { return entries(d, (*Decoder).Next) }

// AllRaw is All with the objects left as their JSON (see NextRaw).
func (d *Decoder) AllRaw() iter.Seq2[RawEntry, error] { return entries(d, (*Decoder).NextRaw) }

func entries[E any](d *Decoder, next func(*Decoder) (E, error)) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		for {
			e, err := next(d)
			if err == io.EOF {
				return
			}
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

// RawEntry is one captured object as its payload line holds it: the object's JSON, not
// decoded, for readers that keep objects compact (a restore decodes an object only when it
// compares or writes it).
type RawEntry struct {
	Section string
	Object  json.RawMessage
}

// NextRaw returns the next entry without decoding its object, or io.EOF after the last. The
// line is checked to be valid JSON holding an object.
func (d *Decoder) NextRaw() (RawEntry, error) {
	if err := d.scan(); err != nil {
		return RawEntry{}, err
	}
	var raw struct {
		Section string          `json:"section"`
		Object  json.RawMessage `json:"object"` // a copy: the scanner reuses its buffer
	}
	if err := json.Unmarshal(d.sc.Bytes(), &raw); err != nil {
		return RawEntry{}, fmt.Errorf("snapshot payload line %d: %w", d.line, err)
	}
	if len(raw.Object) == 0 || raw.Object[0] != '{' {
		return RawEntry{}, fmt.Errorf("snapshot payload line %d has no object", d.line)
	}
	return RawEntry{Section: raw.Section, Object: raw.Object}, nil
}

// RawEntriesOf yields the entries of a decoded snapshot as raw entries, for what reads them
// one at a time (restore.Options.Entries).
func RawEntriesOf(entries []Entry) iter.Seq2[RawEntry, error] {
	return func(yield func(RawEntry, error) bool) {
		for _, e := range entries {
			b, err := json.Marshal(e.Object)
			if err != nil {
				err = fmt.Errorf("snapshot entry %s/%s %s: %w", e.Object.GetNamespace(), e.Object.GetName(), e.Object.GroupVersionKind().Kind, err)
			}
			if !yield(RawEntry{Section: e.Section, Object: b}, err) || err != nil {
				return
			}
		}
	}
}

// ReadAll decodes every entry of a payload.
func ReadAll(r io.Reader) (Header, []Entry, error) {
	d, err := NewDecoder(r)
	if err != nil {
		return Header{}, nil, err
	}
	var out []Entry
	for e, err := range d.All() {
		if err != nil {
			return d.Header(), nil, err
		}
		out = append(out, e)
	}
	return d.Header(), out, nil
}

// ChecksumOf returns "sha256:<hex>" of a canonical payload.
func ChecksumOf(payload []byte) string {
	sum := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(sum[:])
}
