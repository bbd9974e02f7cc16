package snapshot

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// UID-chain discovery needs the UIDs of every CR, and the UID and owner UIDs of every
// candidate child. Held in maps, that state grew with the payload (about 150 bytes per
// object); here it lives on disk, in sorted runs of fixed-size records, and is joined by
// merging sorted streams. What stays in memory per object is 2 bits per candidate child
// (which ones are reached, which ones are duplicates); everything else is bounded by the
// chunk and run sizes below, whatever the number of objects.

// uidKeySize is the size of a UID key: a tag byte, then 16 bytes.
const uidKeySize = 17

// uidKey is a UID in a fixed size. A UID in the canonical lowercase UUID form (the only one
// an API server assigns) is its 16 bytes, tag 0; any other string (possible only in owner
// references, which clients write) is numbered by its keyer, tag 1. Equal keys are equal
// UIDs: no hashing, no collisions.
type uidKey [uidKeySize]byte

// keyer turns UIDs into keys. It is safe for concurrent use.
type keyer struct {
	mu    sync.Mutex
	other map[types.UID]uint64 // the non-canonical UIDs met so far (none on a real API server)
}

func (k *keyer) key(u types.UID) uidKey {
	var out uidKey
	if parseUUID(string(u), out[1:]) {
		return out
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.other == nil {
		k.other = map[types.UID]uint64{}
	}
	id, ok := k.other[u]
	if !ok {
		id = uint64(len(k.other))
		k.other[types.UID(string([]byte(u)))] = id // a copy: never keep a decoded page alive
	}
	out[0] = 1
	binary.BigEndian.PutUint64(out[1:], id)
	return out
}

// lookup returns the key of u if u is canonical or was keyed before (a UID never keyed is
// not numbered).
func (k *keyer) lookup(u types.UID) (uidKey, bool) {
	var out uidKey
	if parseUUID(string(u), out[1:]) {
		return out, true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	id, ok := k.other[u]
	if !ok {
		return out, false
	}
	out[0] = 1
	binary.BigEndian.PutUint64(out[1:], id)
	return out, true
}

// parseUUID decodes s into dst (16 bytes) when s is a UUID in canonical lowercase form
// (8-4-4-4-12 hex digits), so that the key maps back to exactly s.
func parseUUID(s string, dst []byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := lowerHex(s[i])
		lo, ok2 := lowerHex(s[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[j] = hi<<4 | lo
		i, j = i+2, j+1
	}
	return true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

const (
	// sortChunkBytes is the memory of one sorter: records collect in a chunk of this size,
	// which is sorted and written out as a run when full.
	sortChunkBytes = 64 << 10
	// sortFanIn runs of one level are merged into one run of the next level, so a sorter
	// keeps at most (sortFanIn-1) runs per level, and levels grow with the logarithm of
	// the number of records.
	sortFanIn = 8
	// sortReadBuffer is the read buffer of one run while merging.
	sortReadBuffer = 4 << 10
)

// extSorter sorts fixed-size records (compared as bytes) in bounded memory. It can be read
// in order any number of times once records stop being added.
type extSorter struct {
	dir   string
	size  int // bytes per record
	chunk []byte
	runs  []sortRun
	n     int64
	// sorted says the chunk is in order.
	sorted     bool
	chunkBytes int
}

type sortRun struct {
	f     *os.File
	n     int64 // records
	level int
}

// newExtSorter returns a sorter of records of size bytes whose chunk takes chunkBytes (0:
// sortChunkBytes), with its files in dir.
func newExtSorter(dir string, size, chunkBytes int) *extSorter {
	if chunkBytes <= 0 {
		chunkBytes = sortChunkBytes
	}
	return &extSorter{dir: dir, size: size, chunkBytes: chunkBytes}
}

// len is the number of records added.
func (s *extSorter) len() int64 { return s.n }

// add adds a record of s.size bytes (copied).
func (s *extSorter) add(rec []byte) error {
	if s.chunk == nil {
		n := max(s.chunkBytes/s.size, 1)
		s.chunk = make([]byte, 0, n*s.size)
	}
	if len(s.chunk)+s.size > cap(s.chunk) {
		if err := s.spill(); err != nil {
			return err
		}
	}
	s.chunk = append(s.chunk, rec[:s.size]...)
	s.sorted = false
	s.n++
	return nil
}

func (s *extSorter) sortChunk() {
	if !s.sorted {
		sort.Sort(&recSlice{b: s.chunk, size: s.size, tmp: make([]byte, s.size)})
		s.sorted = true
	}
}

// spill writes the chunk out as a run of level 0, then merges full levels.
func (s *extSorter) spill() error {
	s.sortChunk()
	f, err := os.CreateTemp(s.dir, "rewind-snapshot-uids-")
	if err != nil {
		return err
	}
	s.runs = append(s.runs, sortRun{f: f, n: int64(len(s.chunk) / s.size)})
	if _, err := f.Write(s.chunk); err != nil {
		return err
	}
	s.chunk = s.chunk[:0]
	for k := len(s.runs); k >= sortFanIn; k = len(s.runs) {
		lvl := s.runs[k-1].level
		top := s.runs[k-sortFanIn:]
		for _, r := range top {
			if r.level != lvl {
				return nil
			}
		}
		merged, err := s.mergeRuns(top, lvl+1)
		if err != nil {
			return err
		}
		for _, r := range top {
			closeRun(r)
		}
		s.runs = append(s.runs[:k-sortFanIn], merged)
	}
	return nil
}

func (s *extSorter) mergeRuns(runs []sortRun, level int) (sortRun, error) {
	f, err := os.CreateTemp(s.dir, "rewind-snapshot-uids-")
	if err != nil {
		return sortRun{}, err
	}
	out := sortRun{f: f, level: level}
	it := s.iterOver(runs, nil)
	bw := bufio.NewWriterSize(f, sortReadBuffer)
	for {
		rec, ok, err := it.next()
		if err != nil {
			closeRun(out)
			return sortRun{}, err
		}
		if !ok {
			break
		}
		if _, err := bw.Write(rec); err != nil {
			closeRun(out)
			return sortRun{}, err
		}
		out.n++
	}
	if err := bw.Flush(); err != nil {
		closeRun(out)
		return sortRun{}, err
	}
	return out, nil
}

func closeRun(r sortRun) {
	r.f.Close()
	os.Remove(r.f.Name())
}

// close removes the sorter's files.
func (s *extSorter) close() {
	for _, r := range s.runs {
		closeRun(r)
	}
	s.runs, s.chunk = nil, nil
}

// iter reads every record added so far in order. add must not be called while it is used.
func (s *extSorter) iter() *recIter {
	s.sortChunk()
	return s.iterOver(s.runs, s.chunk)
}

func (s *extSorter) iterOver(runs []sortRun, mem []byte) *recIter {
	it := &recIter{size: s.size}
	for _, r := range runs {
		c := &recCursor{r: bufio.NewReaderSize(io.NewSectionReader(r.f, 0, r.n*int64(s.size)), sortReadBuffer), rec: make([]byte, s.size)}
		it.pending = append(it.pending, c)
	}
	if len(mem) > 0 {
		it.pending = append(it.pending, &recCursor{mem: mem})
	}
	return it
}

// recIter merges sorted runs.
type recIter struct {
	size    int
	pending []*recCursor // cursors not yet read
	h       cursorHeap
	last    *recCursor // the cursor whose record was returned last
	started bool
}

type recCursor struct {
	r   *bufio.Reader // a run on disk, or
	mem []byte        // the records left of the in-memory chunk
	rec []byte        // current record
}

// advance moves c to its next record; false at the end.
func (c *recCursor) advance(size int) (bool, error) {
	if c.r == nil {
		if len(c.mem) == 0 {
			return false, nil
		}
		c.rec, c.mem = c.mem[:size], c.mem[size:]
		return true, nil
	}
	if _, err := io.ReadFull(c.r, c.rec); err != nil {
		if err == io.EOF {
			return false, nil
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return false, errors.New("snapshot: a UID run file is truncated")
		}
		return false, err
	}
	return true, nil
}

// next returns the next record in order (valid until the following call), or false at the
// end.
func (it *recIter) next() ([]byte, bool, error) {
	if !it.started {
		it.started = true
		for _, c := range it.pending {
			ok, err := c.advance(it.size)
			if err != nil {
				return nil, false, err
			}
			if ok {
				it.h = append(it.h, c)
			}
		}
		it.pending = nil
		heap.Init(&it.h)
	} else if it.last != nil {
		ok, err := it.last.advance(it.size)
		if err != nil {
			return nil, false, err
		}
		if ok {
			heap.Fix(&it.h, 0)
		} else {
			heap.Pop(&it.h)
		}
	}
	if len(it.h) == 0 {
		it.last = nil
		return nil, false, nil
	}
	it.last = it.h[0]
	return it.last.rec, true, nil
}

type cursorHeap []*recCursor

func (h cursorHeap) Len() int           { return len(h) }
func (h cursorHeap) Less(i, j int) bool { return bytes.Compare(h[i].rec, h[j].rec) < 0 }
func (h cursorHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)        { *h = append(*h, x.(*recCursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// recSlice sorts the fixed-size records of b.
type recSlice struct {
	b    []byte
	size int
	tmp  []byte
}

func (r *recSlice) Len() int { return len(r.b) / r.size }
func (r *recSlice) Less(i, j int) bool {
	return bytes.Compare(r.b[i*r.size:(i+1)*r.size], r.b[j*r.size:(j+1)*r.size]) < 0
}
func (r *recSlice) Swap(i, j int) {
	a, b := r.b[i*r.size:(i+1)*r.size], r.b[j*r.size:(j+1)*r.size]
	copy(r.tmp, a)
	copy(a, b)
	copy(b, r.tmp)
}

// bitset is a set of small integers.
type bitset []uint64

func newBitset(n int) bitset       { return make(bitset, (n+63)/64) }
func (b bitset) set(i uint32)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i uint32) bool { return b[i/64]&(1<<(i%64)) != 0 }
