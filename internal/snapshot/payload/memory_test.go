package payload

import (
	"context"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
)

// textSource yields n bytes of JSON-like lines with random values, so that gzip works as on a
// real snapshot (neither incompressible nor trivially repetitive).
type textSource struct {
	n    int64
	rng  *rand.ChaCha8
	line []byte // reused
	buf  []byte // unread part of line
}

func newTextSource(n int64) *textSource {
	return &textSource{n: n, rng: rand.NewChaCha8([32]byte{7})}
}

func (s *textSource) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	if len(s.buf) == 0 {
		var raw [24]byte
		_, _ = s.rng.Read(raw[:])
		const hexd = "0123456789abcdef"
		line := append(s.line[:0], `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db-`...)
		for _, b := range raw[:8] {
			line = append(line, hexd[b>>4], hexd[b&15])
		}
		line = append(line, `"},"data":{"password":"`...)
		for _, b := range raw[8:] {
			line = append(line, hexd[b>>4], hexd[b&15])
		}
		s.line = append(line, "\"}}\n"...)
		s.buf = s.line
	}
	n := copy(p, s.buf)
	n = int(min(int64(n), s.n))
	s.buf, s.n = s.buf[n:], s.n-int64(n)
	return n, nil
}

// streamThrough pipes n plaintext bytes through Writer -> io.Pipe -> Reader and returns the
// bytes allocated meanwhile.
func streamThrough(t *testing.T, kek KeyWrapper, n int64) uint64 {
	t.Helper()
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		w, err := NewWriter(ctx, pw, kek)
		if err == nil {
			_, err = io.CopyBuffer(w, newTextSource(n), make([]byte, 32<<10))
			if err == nil {
				err = w.Close()
			}
		}
		pw.CloseWithError(err)
		done <- err
	}()
	r, err := NewReader(ctx, pr, kek)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.CopyBuffer(io.Discard, r, make([]byte, 32<<10))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("read %d bytes, wrote %d", got, n)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestBoundedMemory(t *testing.T) {
	kek := testKEK(t)
	small := streamThrough(t, kek, 4<<20)
	large := streamThrough(t, kek, 64<<20)
	t.Logf("allocated %d KiB for 4 MiB, %d KiB for 64 MiB", small>>10, large>>10)
	// Everything allocated is fixed-size state (gzip tables, one frame buffer per side): it
	// does not grow with the payload. The slack covers allocations elsewhere in the process.
	if large > 4<<20 {
		t.Errorf("streaming 64 MiB allocated %d MiB in all, want < 4 MiB", large>>20)
	}
	if large > small+1<<20 {
		t.Errorf("allocations grow with the payload: %d KiB for 4 MiB, %d KiB for 64 MiB", small>>10, large>>10)
	}
}

func BenchmarkWriterReader(b *testing.B) {
	kek, err := GenerateLocalKEK()
	if err != nil {
		b.Fatal(err)
	}
	const n = 8 << 20
	b.SetBytes(n)
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		pr, pw := io.Pipe()
		go func() {
			w, err := NewWriter(ctx, pw, kek)
			if err == nil {
				_, err = io.Copy(w, newTextSource(n))
				if err == nil {
					err = w.Close()
				}
			}
			pw.CloseWithError(err)
		}()
		r, err := NewReader(ctx, pr, kek)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}
