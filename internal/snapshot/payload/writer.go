package payload

import (
	"compress/gzip"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
)

const (
	magic         = "RWSP"
	formatVersion = 1

	// FrameSize is the most compressed bytes one frame carries.
	FrameSize = 64 << 10

	dekSize        = 32
	noncePrefixLen = 8
	headerSumLen   = 4
	maxKEKIDLen    = math.MaxUint8
	maxWrappedLen  = 4096
	frameHeaderLen = 5 // kind + length
	tagSize        = 16
	trailerLen     = sha256.Size + 8 // plaintext SHA-256 + plaintext length
	maxFrames      = math.MaxUint32

	kindData  byte = 0
	kindFinal byte = 1
)

var (
	// ErrCorrupted reports a payload that fails authentication or its checksum, or whose
	// header or framing is malformed.
	ErrCorrupted = errors.New("payload corrupted")
	// ErrTruncated reports a payload that ends before its final frame.
	ErrTruncated = errors.New("payload truncated")
	// ErrWrongKey reports a payload that names another key-encryption key than the one given.
	ErrWrongKey = errors.New("payload encrypted under another key")
)

// Writer encrypts the plaintext written to it into a payload. Close must be called to write
// the final frame; the payload is invalid without it.
type Writer struct {
	ctx    context.Context
	dst    io.Writer
	aead   cipher.AEAD
	prefix [noncePrefixLen]byte
	hdrSum [sha256.Size]byte
	frames uint64 // frames written so far (the next frame's counter)

	pending []byte // compressed bytes not yet sealed, cap FrameSize
	sealed  []byte // reused output buffer for one frame
	gz      *gzip.Writer
	hash    hash.Hash

	plain, stored int64
	closed        bool
	err           error
	sum           string
}

// NewWriter starts a payload in dst encrypted under a fresh data key wrapped by kek, and writes
// its header.
func NewWriter(ctx context.Context, dst io.Writer, kek KeyWrapper) (*Writer, error) {
	if kek == nil {
		return nil, errors.New("payload: no key-encryption key")
	}
	id := kek.ID()
	if id == "" || len(id) > maxKEKIDLen {
		return nil, fmt.Errorf("payload: key-encryption key ID must be 1 to %d bytes, is %d", maxKEKIDLen, len(id))
	}
	dek := make([]byte, dekSize)
	if _, err := rand.Read(dek); err != nil {
		return nil, fmt.Errorf("payload: generating data key: %w", err)
	}
	defer clear(dek)
	wrapped, err := kek.Wrap(ctx, dek)
	if err != nil {
		return nil, fmt.Errorf("payload: wrapping data key with KEK %s: %w", id, err)
	}
	if len(wrapped) == 0 || len(wrapped) > maxWrappedLen {
		return nil, fmt.Errorf("payload: wrapped data key from KEK %s is %d bytes, want 1 to %d", id, len(wrapped), maxWrappedLen)
	}
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	w := &Writer{
		ctx: ctx, dst: dst, aead: aead,
		pending: make([]byte, 0, FrameSize),
		sealed:  make([]byte, 0, frameHeaderLen+FrameSize+tagSize),
		hash:    sha256.New(),
	}
	if _, err := rand.Read(w.prefix[:]); err != nil {
		return nil, fmt.Errorf("payload: generating nonce prefix: %w", err)
	}
	hdr := make([]byte, 0, len(magic)+4+len(id)+len(wrapped)+noncePrefixLen+headerSumLen)
	hdr = append(hdr, magic...)
	hdr = append(hdr, formatVersion, byte(len(id)))
	hdr = append(hdr, id...)
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(wrapped)))
	hdr = append(hdr, wrapped...)
	hdr = append(hdr, w.prefix[:]...)
	sum := sha256.Sum256(hdr)
	hdr = append(hdr, sum[:headerSumLen]...)
	w.hdrSum = sha256.Sum256(hdr)
	if err := w.write(hdr); err != nil {
		return nil, err
	}
	// BestSpeed: snapshots are taken before every change, so capture time matters more than
	// the last few percent of size (canonical JSON still compresses about 10x).
	w.gz, _ = gzip.NewWriterLevel(sink{w}, gzip.BestSpeed)
	return w, nil
}

func newAEAD(dek []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(dek)
	if err != nil {
		return nil, fmt.Errorf("payload: data key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("payload: data key: %w", err)
	}
	return aead, nil
}

// Write compresses and encrypts p.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed {
		return 0, errors.New("payload: write after Close")
	}
	n, err := w.gz.Write(p)
	w.hash.Write(p[:n])
	w.plain += int64(n)
	if err != nil {
		w.fail(err)
		return n, w.err
	}
	return n, nil
}

// Close flushes the compressed stream and writes the final frame with the plaintext's
// checksum. It does not close dst. Calling it again returns the first result.
func (w *Writer) Close() error {
	if w.closed || w.err != nil {
		return w.err
	}
	w.closed = true
	if err := w.gz.Close(); err != nil {
		return w.fail(err)
	}
	if err := w.flush(); err != nil {
		return w.fail(err)
	}
	sum := w.hash.Sum(nil)
	trailer := make([]byte, 0, trailerLen)
	trailer = append(trailer, sum...)
	trailer = binary.BigEndian.AppendUint64(trailer, uint64(w.plain))
	if err := w.seal(kindFinal, trailer); err != nil {
		return w.fail(err)
	}
	w.sum = "sha256:" + hex.EncodeToString(sum)
	return nil
}

// Checksum is "sha256:<hex>" of the plaintext, or "" before a successful Close.
func (w *Writer) Checksum() string { return w.sum }

// PlaintextBytes is the number of plaintext bytes written so far.
func (w *Writer) PlaintextBytes() int64 { return w.plain }

// StoredBytes is the number of payload bytes written to dst so far.
func (w *Writer) StoredBytes() int64 { return w.stored }

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}

// sink receives the compressed stream and seals it into frames.
type sink struct{ w *Writer }

func (s sink) Write(p []byte) (int, error) {
	w := s.w
	n := 0
	for len(p) > 0 {
		k := min(len(p), FrameSize-len(w.pending))
		w.pending = append(w.pending, p[:k]...)
		p, n = p[k:], n+k
		if len(w.pending) == FrameSize {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (w *Writer) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	err := w.seal(kindData, w.pending)
	w.pending = w.pending[:0]
	return err
}

func (w *Writer) seal(kind byte, plain []byte) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if w.frames >= maxFrames {
		return errors.New("payload: too many frames")
	}
	var nonce [12]byte
	var ad [sha256.Size + 5]byte
	frameNonceAD(&nonce, &ad, w.prefix, w.hdrSum, uint32(w.frames), kind)
	out := append(w.sealed[:0], kind, 0, 0, 0, 0)
	out = w.aead.Seal(out, nonce[:], plain, ad[:])
	binary.BigEndian.PutUint32(out[1:frameHeaderLen], uint32(len(out)-frameHeaderLen))
	w.sealed = out
	w.frames++
	return w.write(out)
}

func frameNonceAD(nonce *[12]byte, ad *[sha256.Size + 5]byte, prefix [noncePrefixLen]byte, hdrSum [sha256.Size]byte, counter uint32, kind byte) {
	copy(nonce[:], prefix[:])
	binary.BigEndian.PutUint32(nonce[noncePrefixLen:], counter)
	copy(ad[:], hdrSum[:])
	binary.BigEndian.PutUint32(ad[sha256.Size:], counter)
	ad[sha256.Size+4] = kind
}

func (w *Writer) write(b []byte) error {
	n, err := w.dst.Write(b)
	w.stored += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return w.fail(fmt.Errorf("payload: writing: %w", err))
	}
	return nil
}
