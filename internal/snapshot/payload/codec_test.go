package payload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/internal/fault"
)

func testKEK(t testing.TB) *LocalKEK {
	t.Helper()
	k, err := GenerateLocalKEK()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// randomBytes returns n deterministic pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}

func encrypt(t testing.TB, kek KeyWrapper, plain []byte) ([]byte, *Writer) {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(context.Background(), &out, kek)
	if err != nil {
		t.Fatal(err)
	}
	// Odd-sized writes exercise the frame buffering.
	for p := plain; len(p) > 0; {
		n := min(len(p), 7777)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), w
}

// decrypt reads the whole payload; the error is NewReader's or Read's.
func decrypt(kek KeyWrapper, payload []byte) ([]byte, string, error) {
	r, err := NewReader(context.Background(), bytes.NewReader(payload), kek)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(r)
	return b, r.Checksum(), err
}

func checksumOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func TestRoundTrip(t *testing.T) {
	kek := testKEK(t)
	cases := []struct {
		name  string
		plain []byte // the plaintext
	}{
		{"empty", nil},
		{"one byte", []byte{42}},
		{"frame-1 random", randomBytes(FrameSize-1, 1)},
		{"frame random", randomBytes(FrameSize, 2)},
		{"frame+1 random", randomBytes(FrameSize+1, 3)},
		{"two frames random", randomBytes(2*FrameSize, 4)},
		{"5 MiB random", randomBytes(5<<20, 5)},
		{"5 MiB text", bytes.Repeat([]byte(`{"kind":"Secret","data":{"password":"aGVsbG8="}}`+"\n"), (5<<20)/49)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			payload, w := encrypt(t, kek, tc.plain)
			if w.PlaintextBytes() != int64(len(tc.plain)) || w.StoredBytes() != int64(len(payload)) {
				t.Errorf("counters: plaintext %d stored %d, want %d and %d", w.PlaintextBytes(), w.StoredBytes(), len(tc.plain), len(payload))
			}
			if w.Checksum() != checksumOf(tc.plain) {
				t.Errorf("writer checksum %s, want %s", w.Checksum(), checksumOf(tc.plain))
			}
			got, sum, err := decrypt(kek, payload)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.plain) {
				t.Fatalf("round trip changed the plaintext (%d bytes, want %d)", len(got), len(tc.plain))
			}
			if sum != w.Checksum() {
				t.Errorf("reader checksum %s, writer %s", sum, w.Checksum())
			}
			if err := Verify(context.Background(), bytes.NewReader(payload), kek, w.Checksum()); err != nil {
				t.Errorf("Verify: %v", err)
			}
			if err := Verify(context.Background(), bytes.NewReader(payload), kek, checksumOf([]byte("other"))); !errors.Is(err, ErrCorrupted) {
				t.Errorf("Verify with another checksum: %v, want ErrCorrupted", err)
			}
		})
	}
}

func TestChecksumIsOfPlaintext(t *testing.T) {
	kek := testKEK(t)
	plain := randomBytes(300<<10, 9)
	p1, w1 := encrypt(t, kek, plain)
	p2, w2 := encrypt(t, kek, plain)
	if w1.Checksum() != w2.Checksum() {
		t.Errorf("identical plaintext, checksums %s and %s", w1.Checksum(), w2.Checksum())
	}
	if bytes.Equal(p1, p2) {
		t.Error("two payloads of the same plaintext are identical: the data key or nonce is not fresh")
	}
	_, w3 := encrypt(t, kek, append(plain, 0))
	if w3.Checksum() == w1.Checksum() {
		t.Error("different plaintext, same checksum")
	}
}

func TestNoPlaintextInPayload(t *testing.T) {
	kek := testKEK(t)
	const marker = "TOP-SECRET-MARKER-do-not-leak"
	var b strings.Builder
	for i := range 20000 {
		b.WriteString(marker)
		b.WriteString(strings.Repeat("x", i%50))
	}
	payload, _ := encrypt(t, kek, []byte(b.String()))
	for _, s := range []string{marker, "TOP-SECRET", "xxxxxxxxxxxxxxxx"} {
		if bytes.Contains(payload, []byte(s)) {
			t.Errorf("payload contains %q", s)
		}
	}
}

// layout parses a payload into the offsets of its header fields and frames.
type layout struct {
	headerLen   int
	lengthBytes map[int]bool // offsets of length fields (a flip may give ErrTruncated)
	frames      []int        // start offset of each frame (kind byte)
}

func parseLayout(t *testing.T, p []byte) layout {
	t.Helper()
	l := layout{lengthBytes: map[int]bool{}}
	off := len(magic) + 1
	l.lengthBytes[off] = true
	idLen := int(p[off])
	off += 1 + idLen
	l.lengthBytes[off], l.lengthBytes[off+1] = true, true
	wl := int(binary.BigEndian.Uint16(p[off:]))
	off += 2 + wl + noncePrefixLen + headerSumLen
	l.headerLen = off
	for off < len(p) {
		l.frames = append(l.frames, off)
		for i := 1; i < frameHeaderLen; i++ {
			l.lengthBytes[off+i] = true
		}
		off += frameHeaderLen + int(binary.BigEndian.Uint32(p[off+1:]))
	}
	if off != len(p) {
		t.Fatalf("layout: frames end at %d, payload is %d bytes", off, len(p))
	}
	return l
}

func TestTamperedByteFails(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(3*FrameSize+1000, 11))
	l := parseLayout(t, payload)
	if len(l.frames) != 5 { // 4 data frames (the gzip overhead spills into a 4th) + final
		t.Fatalf("want 5 frames, got %d", len(l.frames))
	}
	positions := map[int]bool{}
	for i := range l.headerLen { // every header byte
		positions[i] = true
	}
	for _, f := range l.frames { // every frame header byte, and samples of the sealed bytes
		end := len(payload)
		for _, g := range l.frames {
			if g > f {
				end = g
				break
			}
		}
		for i := f; i < f+frameHeaderLen+3; i++ {
			positions[i] = true
		}
		positions[(f+end)/2] = true
		positions[end-1] = true
	}
	for i := l.frames[len(l.frames)-1]; i < len(payload); i++ { // every byte of the final frame
		positions[i] = true
	}
	for pos := range positions {
		for _, mask := range []byte{0x01, 0x80, 0xff} {
			bad := bytes.Clone(payload)
			bad[pos] ^= mask
			_, _, err := decrypt(kek, bad)
			switch {
			case err == nil:
				t.Fatalf("byte %d ^ %#x: read succeeded", pos, mask)
			case errors.Is(err, ErrCorrupted):
			case errors.Is(err, ErrTruncated) && l.lengthBytes[pos]:
			default:
				t.Fatalf("byte %d ^ %#x: %v, want ErrCorrupted", pos, mask, err)
			}
		}
	}
}

func TestTruncatedFails(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(2*FrameSize+500, 12))
	l := parseLayout(t, payload)
	final := l.frames[len(l.frames)-1]
	cuts := []int{0, 1, 4, l.headerLen - 1, l.headerLen, l.headerLen + 3, l.headerLen + frameHeaderLen + 100,
		l.frames[1], l.frames[1] + 1, final, final + 1, final + frameHeaderLen, len(payload) - 1}
	for _, cut := range cuts {
		_, _, err := decrypt(kek, payload[:cut])
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("cut at %d of %d: %v, want ErrTruncated", cut, len(payload), err)
		}
	}
}

// cutSource gives b, then the source's own io.ErrUnexpectedEOF, as net/http's body does when
// its connection closes short of its Content-Length.
type cutSource struct{ b []byte }

func (c *cutSource) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, c.b)
	c.b = c.b[n:]
	return n, nil
}

// A source that ends with its own io.ErrUnexpectedEOF (a connection closed mid-answer) is a
// *SourceError, a fault to read again, wherever it ends: in the header or in a frame. A
// payload that ends (io.EOF) is ErrTruncated (TestTruncatedFails).
func TestSourceCutIsNotTruncation(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(2*FrameSize+500, 13))
	l := parseLayout(t, payload)
	for _, cut := range []int{0, 4, l.headerLen - 1, l.headerLen, l.headerLen + frameHeaderLen + 100, l.frames[1] + 1, len(payload) - 1} {
		var err error
		r, err := NewReader(context.Background(), &cutSource{b: payload[:cut]}, kek)
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		var se *SourceError
		if errors.Is(err, ErrTruncated) || !errors.As(err, &se) || !fault.IsTransient(err) {
			t.Errorf("source cut at %d of %d: %v; want a *SourceError, transient, not ErrTruncated", cut, len(payload), err)
		}
	}
}

func TestFramesRearrangedFail(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(3*FrameSize, 13))
	l := parseLayout(t, payload)
	frame := func(i int) []byte {
		end := len(payload)
		if i+1 < len(l.frames) {
			end = l.frames[i+1]
		}
		return payload[l.frames[i]:end]
	}
	join := func(idx ...int) []byte {
		out := bytes.Clone(payload[:l.headerLen])
		for _, i := range idx {
			out = append(out, frame(i)...)
		}
		return out
	}
	n := len(l.frames) // data frames 0..n-2, final n-1
	other, _ := encrypt(t, kek, randomBytes(3*FrameSize, 13))
	cases := []struct {
		name    string
		payload []byte // the modified payload
	}{
		{"swapped", join(1, 0, 2, 3, n-1)},
		{"dropped", join(0, 2, 3, n-1)},
		{"duplicated", join(0, 1, 1, 2, 3, n-1)},
		{"final only", join(n - 1)},
		{"final twice", join(0, 1, 2, 3, n-1, n-1)},
		{"appended byte", append(bytes.Clone(payload), 0)},
		{"appended garbage", append(bytes.Clone(payload), randomBytes(1000, 14)...)},
		{"payload twice", append(bytes.Clone(payload), payload...)},
		{"frame from another payload", append(join(0), other[parseLayout(t, other).frames[1]:]...)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decrypt(kek, tc.payload)
			if !errors.Is(err, ErrCorrupted) {
				t.Errorf("%v, want ErrCorrupted", err)
			}
		})
	}
}

// sameIDKEK claims another key's ID.
type sameIDKEK struct {
	*LocalKEK
	id string
}

func (k sameIDKEK) ID() string { return k.id }

func TestWrongKey(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, []byte("state"))
	other := testKEK(t)
	if _, _, err := decrypt(other, payload); !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), kek.ID()) {
		t.Errorf("other key: %v, want ErrWrongKey naming %s", err, kek.ID())
	}
	if _, _, err := decrypt(sameIDKEK{other, kek.ID()}, payload); !errors.Is(err, ErrCorrupted) {
		t.Errorf("other key under the same ID: %v, want ErrCorrupted", err)
	}
}

func TestReaderNeverEndsCleanlyEarly(t *testing.T) {
	// Reading a truncated payload in small pieces yields an error, never io.EOF.
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(100<<10, 15))
	r, err := NewReader(context.Background(), bytes.NewReader(payload[:len(payload)-10]), kek)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 333)
	for {
		_, err := r.Read(buf)
		if err == io.EOF {
			t.Fatal("truncated payload read to io.EOF")
		}
		if err != nil {
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("%v, want ErrTruncated", err)
			}
			break
		}
	}
	if r.Checksum() != "" {
		t.Error("Checksum set after a failed read")
	}
}

func TestContextCancelled(t *testing.T) {
	kek := testKEK(t)
	payload, _ := encrypt(t, kek, randomBytes(300<<10, 16))
	ctx, cancel := context.WithCancel(context.Background())
	r, err := NewReader(ctx, bytes.NewReader(payload), kek)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Errorf("%v, want context.Canceled", err)
	}
}

func TestWriterAfterClose(t *testing.T) {
	w, err := NewWriter(context.Background(), io.Discard, testKEK(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("Write after Close succeeded")
	}
}

// failingWriter fails after n bytes.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterReportsWriteErrors(t *testing.T) {
	w, err := NewWriter(context.Background(), &failingWriter{n: 1000}, testKEK(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Write(randomBytes(1<<20, 17))
	if err == nil {
		err = w.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("%v, want the write error", err)
	}
	if w.Checksum() != "" {
		t.Error("Checksum set after a failed write")
	}
}
