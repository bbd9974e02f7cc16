package payload

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// FuzzReader feeds mutated payloads to the Reader: it must never panic, and whatever it
// accepts must be a plaintext that was really encrypted (no forgery through framing bugs).
func FuzzReader(f *testing.F) {
	kek, err := NewLocalKEK(randomBytes(KEKSize, 99))
	if err != nil {
		f.Fatal(err)
	}
	plains := [][]byte{nil, []byte("x"), []byte(`{"kind":"Secret"}`), randomBytes(FrameSize+10, 98)}
	for _, p := range plains {
		payload, _ := encrypt(f, kek, p)
		f.Add(payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := NewReader(context.Background(), bytes.NewReader(payload), kek)
		if err != nil {
			return
		}
		got, err := io.ReadAll(r)
		if err != nil {
			if r.Checksum() != "" {
				t.Fatal("Checksum set after a failed read")
			}
			return
		}
		if r.Checksum() != checksumOf(got) {
			t.Fatalf("Checksum %s does not match the plaintext", r.Checksum())
		}
		for _, p := range plains {
			if bytes.Equal(got, p) {
				return
			}
		}
		t.Fatalf("accepted a payload whose %d-byte plaintext was never encrypted", len(got))
	})
}
