package payload

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// brokenReader yields n bytes of data, then fails.
type brokenReader struct {
	r io.Reader
}

func newBrokenReader(data []byte) *brokenReader { return &brokenReader{r: bytes.NewReader(data)} }

func (b *brokenReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, errors.New("source failed")
	}
	return n, err
}

func readAll(t *testing.T, s Store, name string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testStoreContract checks what every Store promises.
func testStoreContract(t *testing.T, s Store, wantLocation string) {
	ctx := context.Background()
	kek := testKEK(t)
	plain := randomBytes(1200<<10, 30) // two Secret chunks
	payload, w := encrypt(t, kek, plain)

	loc, size, err := s.Put(ctx, "snap-1", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(payload)) || !strings.HasPrefix(loc, wantLocation) || !strings.HasSuffix(loc, "snap-1") {
		t.Errorf("Put: location %q size %d, want %q...snap-1 and %d", loc, size, wantLocation, len(payload))
	}
	if got := readAll(t, s, "snap-1"); !bytes.Equal(got, payload) {
		t.Fatalf("Get returned %d bytes that differ from the %d put", len(got), len(payload))
	}
	rc, err := s.Get(ctx, "snap-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, rc, kek, w.Checksum()); err != nil {
		t.Errorf("Verify through Get: %v", err)
	}
	rc.Close()

	// Put again: identical bytes, then a shorter payload.
	if _, _, err := s.Put(ctx, "snap-1", bytes.NewReader(payload)); err != nil {
		t.Fatalf("Put of identical bytes again: %v", err)
	}
	if got := readAll(t, s, "snap-1"); !bytes.Equal(got, payload) {
		t.Fatal("Get after a repeated Put differs")
	}
	short, _ := encrypt(t, kek, []byte("small"))
	if _, _, err := s.Put(ctx, "snap-1", bytes.NewReader(short)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "snap-1"); !bytes.Equal(got, short) {
		t.Fatal("Get after an overwrite does not return the new payload")
	}

	// A Put whose source fails stores nothing.
	if _, _, err := s.Put(ctx, "snap-broken", newBrokenReader(payload)); err == nil {
		t.Error("Put from a failing reader succeeded")
	}
	if _, err := s.Get(ctx, "snap-broken"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after a failed Put: %v, want ErrNotFound", err)
	}

	if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a missing payload: %v, want ErrNotFound", err)
	}
	for range 2 {
		if err := s.Delete(ctx, "snap-1"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if _, err := s.Get(ctx, "snap-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "snap-broken"); err != nil {
		t.Errorf("Delete after a failed Put: %v", err)
	}
	for _, bad := range []string{"", "../escape", "a/b", ".hidden"} {
		if _, _, err := s.Put(ctx, bad, bytes.NewReader(short)); err == nil {
			t.Errorf("Put accepted the name %q", bad)
		}
	}
}

func TestStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fileDir := t.TempDir()
	cases := []struct {
		name     string
		url      string // the store URL given to OpenStore
		location string // the prefix of the locations it returns
	}{
		{"dir", "dir://" + dir, "dir://" + dir + "/"},
		{"mem", "mem://", "mem:///"},
		{"file", "file://" + fileDir, "file://" + fileDir + "/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenStore(ctx, tc.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := s.(io.Closer); ok {
				defer c.Close()
			}
			testStoreContract(t, s, tc.location)
		})
	}
	// DirStore leaves no temporary files behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left in the dir store: %s", filepath.Join(dir, e.Name()))
	}
}

func TestOpenStore(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		url     string // the store URL
		wantErr string // part of the error, "" for success
		want    string // the store type on success
	}{
		{"dir://" + t.TempDir(), "", "*payload.DirStore"},
		{"mem://", "", "*payload.BlobStore"},
		{"s3://bucket?region=us-east-1", "", "*payload.BlobStore"},
		{"secrets://rewind-system", "needs a hub client", ""},
		{"secrets://Not_A_Namespace", "namespace", ""},
		{"secrets://ns/extra", "want secrets://<namespace>", ""},
		{"dir://relative/path", "absolute", ""},
		{"gs://bucket", "supported: secrets, dir, file, mem, s3", ""},
		{"ftp://host/x", "supported: secrets, dir, file, mem, s3", ""},
		{"/just/a/path", "supported: secrets, dir, file, mem, s3", ""},
	}
	for _, tc := range cases {
		s, err := OpenStore(ctx, tc.url, nil)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("OpenStore(%s): %v, want an error with %q", tc.url, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("OpenStore(%s): %v", tc.url, err)
			continue
		}
		if got := typeName(s); got != tc.want {
			t.Errorf("OpenStore(%s) is %s, want %s", tc.url, got, tc.want)
		}
		if c, ok := s.(io.Closer); ok {
			c.Close()
		}
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *DirStore:
		return "*payload.DirStore"
	case *BlobStore:
		return "*payload.BlobStore"
	case *SecretStore:
		return "*payload.SecretStore"
	}
	return "?"
}
