package payload

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Reader decrypts a payload and yields its plaintext. It verifies every frame as it reads and,
// at the end, the plaintext's checksum and length: it returns io.EOF only for a payload that is
// complete and intact, and otherwise an error wrapping ErrCorrupted or ErrTruncated (or the
// error of the underlying reader). Plaintext already returned before such an error must not be
// trusted.
type Reader struct {
	fr   *frameReader
	gz   *gzip.Reader
	hash hash.Hash
	n    int64
	err  error
	sum  string
}

// NewReader reads the payload header from src and unwraps the data key with kek. It fails
// with ErrWrongKey when the payload names another key than kek.ID().
func NewReader(ctx context.Context, src io.Reader, kek KeyWrapper) (*Reader, error) {
	if kek == nil {
		return nil, errors.New("payload: no key-encryption key")
	}
	src = sourceReader{src}
	id, wrapped, prefix, hdrSum, err := readHeader(src)
	if err != nil {
		return nil, err
	}
	if id != kek.ID() {
		return nil, fmt.Errorf("%w: the payload needs key-encryption key %q, given %q", ErrWrongKey, id, kek.ID())
	}
	dek, err := kek.Unwrap(ctx, wrapped)
	if err != nil {
		return nil, fmt.Errorf("payload: unwrapping data key with KEK %s: %w", id, err)
	}
	defer clear(dek)
	if len(dek) != dekSize {
		return nil, fmt.Errorf("payload header: %w: unwrapped data key is %d bytes, want %d", ErrCorrupted, len(dek), dekSize)
	}
	aead, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	return &Reader{
		fr: &frameReader{
			ctx: ctx, src: src, aead: aead, prefix: prefix, hdrSum: hdrSum,
			buf: make([]byte, FrameSize+tagSize),
		},
		hash: sha256.New(),
	}, nil
}

// SourceError is an error of the payload's source itself, not of the payload: its store's
// connection closed before the length its server announced (net/http's io.ErrUnexpectedEOF).
// It is a fault of the way to the store (fault.IsTransient: it wraps io.ErrUnexpectedEOF), to
// be read again; a payload that ends too early is ErrTruncated.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "payload: reading from its store: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// sourceReader tells a source's own io.ErrUnexpectedEOF (a *SourceError) from the one io.ReadFull
// makes of a stream that ends (io.EOF) short of what it reads: before, a connection to S3 closed
// mid-payload was taken as a truncated payload, and the restore failed for good.
type sourceReader struct{ r io.Reader }

func (s sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF && errors.Is(err, io.ErrUnexpectedEOF) {
		err = &SourceError{Err: err}
	}
	return n, err
}

// readHeader reads the payload's header from src, a sourceReader.
func readHeader(src io.Reader) (id string, wrapped []byte, prefix [noncePrefixLen]byte, hdrSum [sha256.Size]byte, err error) {
	var hdr []byte
	read := func(n int, what string) ([]byte, error) {
		start := len(hdr)
		hdr = append(hdr, make([]byte, n)...)
		if _, err := io.ReadFull(src, hdr[start:]); err != nil {
			// io.ReadFull's own ends of the stream; the source's are *SourceError.
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, fmt.Errorf("payload header: %w: stream ends in the %s", ErrTruncated, what)
			}
			return nil, fmt.Errorf("payload header: reading the %s: %w", what, err)
		}
		return hdr[start:], nil
	}
	b, err := read(len(magic)+2, "magic")
	if err != nil {
		return "", nil, prefix, hdrSum, err
	}
	if string(b[:len(magic)]) != magic {
		return "", nil, prefix, hdrSum, fmt.Errorf("payload header: %w: not a rewind snapshot payload (bad magic)", ErrCorrupted)
	}
	if v := b[len(magic)]; v != formatVersion {
		return "", nil, prefix, hdrSum, fmt.Errorf("payload header: %w: unsupported format version %d (this build reads %d)", ErrCorrupted, v, formatVersion)
	}
	idLen := int(b[len(magic)+1])
	if idLen == 0 {
		return "", nil, prefix, hdrSum, fmt.Errorf("payload header: %w: empty key ID", ErrCorrupted)
	}
	if b, err = read(idLen+2, "key ID"); err != nil {
		return "", nil, prefix, hdrSum, err
	}
	wrappedLen := int(binary.BigEndian.Uint16(b[idLen:]))
	if wrappedLen == 0 || wrappedLen > maxWrappedLen {
		return "", nil, prefix, hdrSum, fmt.Errorf("payload header: %w: wrapped data key length %d out of range", ErrCorrupted, wrappedLen)
	}
	idStart := len(magic) + 2
	if _, err = read(wrappedLen+noncePrefixLen+headerSumLen, "wrapped data key"); err != nil {
		return "", nil, prefix, hdrSum, err
	}
	body := hdr[:len(hdr)-headerSumLen]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:headerSumLen], hdr[len(body):]) {
		return "", nil, prefix, hdrSum, fmt.Errorf("payload header: %w: header checksum mismatch", ErrCorrupted)
	}
	id = string(hdr[idStart : idStart+idLen])
	wStart := idStart + idLen + 2
	wrapped = hdr[wStart : wStart+wrappedLen]
	copy(prefix[:], hdr[wStart+wrappedLen:])
	return id, wrapped, prefix, sha256.Sum256(hdr), nil
}

// Read yields plaintext. See Reader for the errors.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.gz == nil {
		gz, err := gzip.NewReader(r.fr)
		if err != nil {
			r.err = r.classify(err)
			return 0, r.err
		}
		gz.Multistream(false)
		r.gz = gz
	}
	n, err := r.gz.Read(p)
	r.hash.Write(p[:n])
	r.n += int64(n)
	switch {
	case err == io.EOF:
		err = r.finish()
	case err != nil:
		err = r.classify(err)
	}
	r.err = err
	return n, err
}

// Checksum is "sha256:<hex>" of the plaintext once the whole payload has been read and
// verified, and "" before.
func (r *Reader) Checksum() string { return r.sum }

// PlaintextBytes is the number of plaintext bytes read so far.
func (r *Reader) PlaintextBytes() int64 { return r.n }

// classify prefers the frame reader's own error (it says which frame failed) over what the
// decompressor made of it.
func (r *Reader) classify(err error) error {
	if fe := r.fr.err; fe != nil && fe != io.EOF {
		return fe
	}
	if errors.Is(err, ErrCorrupted) || errors.Is(err, ErrTruncated) {
		return err
	}
	if ce := r.fr.ctx.Err(); ce != nil && errors.Is(err, ce) {
		return err
	}
	return fmt.Errorf("payload: %w: decompressing: %v", ErrCorrupted, err)
}

// finish runs when the compressed stream ends: the final frame must follow it directly and
// the plaintext must match the checksum and length the final frame carries.
func (r *Reader) finish() error {
	var b [1]byte
	for {
		n, err := r.fr.Read(b[:])
		if n > 0 {
			return fmt.Errorf("payload frame %d: %w: data after the end of the compressed stream", r.fr.frames-1, ErrCorrupted)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if uint64(r.n) != r.fr.plainLen {
		return fmt.Errorf("payload: %w: plaintext is %d bytes, the final frame says %d", ErrCorrupted, r.n, r.fr.plainLen)
	}
	sum := r.hash.Sum(nil)
	if !bytes.Equal(sum, r.fr.plainSum[:]) {
		return fmt.Errorf("payload: %w: plaintext checksum mismatch", ErrCorrupted)
	}
	r.sum = "sha256:" + hex.EncodeToString(sum)
	return io.EOF
}

// frameReader yields the compressed stream, one authenticated frame at a time. It returns
// io.EOF only after the final frame, and only if nothing follows it.
type frameReader struct {
	ctx    context.Context
	src    io.Reader
	aead   cipher.AEAD
	prefix [noncePrefixLen]byte
	hdrSum [sha256.Size]byte
	frames uint64 // frames read so far (the next frame's counter)

	buf   []byte
	plain []byte // unread part of the current frame's plaintext
	err   error  // sticky; io.EOF after the final frame

	plainSum [sha256.Size]byte
	plainLen uint64
}

func (f *frameReader) Read(p []byte) (int, error) {
	for len(f.plain) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.err = f.next()
	}
	n := copy(p, f.plain)
	f.plain = f.plain[n:]
	return n, nil
}

// ReadByte makes frameReader a flate.Reader, so the decompressor reads no further than it
// needs.
func (f *frameReader) ReadByte() (byte, error) {
	for len(f.plain) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.err = f.next()
	}
	c := f.plain[0]
	f.plain = f.plain[1:]
	return c, nil
}

func (f *frameReader) next() error {
	if err := f.ctx.Err(); err != nil {
		return err
	}
	i := f.frames
	if i >= maxFrames {
		return fmt.Errorf("payload frame %d: %w: too many frames", i, ErrCorrupted)
	}
	var fh [frameHeaderLen]byte
	if _, err := io.ReadFull(f.src, fh[:]); err != nil {
		switch {
		case err == io.EOF:
			return fmt.Errorf("payload: %w: stream ends after %d frames without the final frame", ErrTruncated, i)
		case err == io.ErrUnexpectedEOF:
			return fmt.Errorf("payload frame %d: %w: stream ends in the frame header", i, ErrTruncated)
		default:
			return fmt.Errorf("payload frame %d: reading: %w", i, err)
		}
	}
	kind, size := fh[0], int(binary.BigEndian.Uint32(fh[1:]))
	switch {
	case kind == kindData && (size < tagSize || size > FrameSize+tagSize):
		return fmt.Errorf("payload frame %d: %w: data frame length %d out of range", i, ErrCorrupted, size)
	case kind == kindFinal && size != trailerLen+tagSize:
		return fmt.Errorf("payload frame %d: %w: final frame length %d, want %d", i, ErrCorrupted, size, trailerLen+tagSize)
	case kind != kindData && kind != kindFinal:
		return fmt.Errorf("payload frame %d: %w: unknown frame kind %d", i, ErrCorrupted, kind)
	}
	sealed := f.buf[:size]
	if _, err := io.ReadFull(f.src, sealed); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("payload frame %d: %w: stream ends inside the frame", i, ErrTruncated)
		}
		return fmt.Errorf("payload frame %d: reading: %w", i, err)
	}
	var nonce [12]byte
	var ad [sha256.Size + 5]byte
	frameNonceAD(&nonce, &ad, f.prefix, f.hdrSum, uint32(i), kind)
	plain, err := f.aead.Open(sealed[:0], nonce[:], sealed, ad[:])
	if err != nil {
		return fmt.Errorf("payload frame %d: %w: authentication failed", i, ErrCorrupted)
	}
	f.frames++
	if kind == kindData {
		f.plain = plain
		return nil
	}
	copy(f.plainSum[:], plain)
	f.plainLen = binary.BigEndian.Uint64(plain[sha256.Size:])
	var extra [1]byte
	n, err := io.ReadFull(f.src, extra[:])
	switch {
	case n > 0:
		return fmt.Errorf("payload: %w: data after the final frame (frame %d)", ErrCorrupted, i)
	case err != io.EOF:
		return fmt.Errorf("payload: reading after the final frame: %w", err)
	}
	return io.EOF
}

// Verify reads the whole payload from src and checks that it decrypts with kek, is complete
// and, if want is not "", that its plaintext checksum is want ("sha256:<hex>").
func Verify(ctx context.Context, src io.Reader, kek KeyWrapper, want string) error {
	r, err := NewReader(ctx, src, kek)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if want != "" && r.Checksum() != want {
		return fmt.Errorf("payload: %w: checksum is %s, want %s", ErrCorrupted, r.Checksum(), want)
	}
	return nil
}

// KeyIDOf reads the header of a payload and returns the ID of the key-encryption key that
// wrapped its data key (as the payload records it), without decrypting anything.
func KeyIDOf(src io.Reader) (string, error) {
	id, _, _, _, err := readHeader(sourceReader{src})
	return id, err
}
