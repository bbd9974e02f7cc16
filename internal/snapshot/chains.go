package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Record layouts of the chain index's sorters.
const (
	// candNumSize: a candidate's number, its owned kind's index then its place among that
	// kind's candidates (big-endian, so records of one UID sort in spool order).
	candNumSize = 8
	// candRecSize: candidate UID key, candidate number.
	candRecSize = uidKeySize + candNumSize
	// edgeRecSize: owner UID key, candidate UID key, candidate number.
	edgeRecSize = 2*uidKeySize + candNumSize
)

// chainIndex holds, on disk, what finding CR children by ownerReference UID chains needs: the
// UIDs of the CRs, and the UID and owner UIDs of each candidate child. Candidates are
// numbered by owned kind, in order within a kind; spool order is kind by kind. CRs are added
// from one goroutine; candidates from any.
type chainIndex struct {
	dir   string
	chunk int // bytes of each sorter's chunk (0: sortChunkBytes)
	keys  keyer
	crs   *extSorter // CR UID keys

	mu     sync.Mutex
	cands  *extSorter // candRecSize records
	edges  *extSorter // edgeRecSize records, one per ownerReference of a candidate
	counts []uint32   // candidates added, by owned kind
	m      uint32     // candidates added in all
}

func newChainIndex(dir string, chunkBytes int) *chainIndex {
	return &chainIndex{
		dir:   dir,
		chunk: chunkBytes,
		crs:   newExtSorter(dir, uidKeySize, chunkBytes),
		cands: newExtSorter(dir, candRecSize, chunkBytes),
		edges: newExtSorter(dir, edgeRecSize, chunkBytes),
	}
}

func (x *chainIndex) close() {
	x.crs.close()
	x.cands.close()
	x.edges.close()
}

// addCR records the UID key (from x.keys) of a captured CR.
func (x *chainIndex) addCR(k uidKey) error {
	return x.crs.add(k[:])
}

// addCandidate records the next candidate child of the owned kind with index kind (the next
// line of that kind's spool) by the keys (from x.keys) of its UID and of its owners' UIDs.
func (x *chainIndex) addCandidate(kind int, k uidKey, owners []uidKey) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == math.MaxUint32 || kind < 0 || uint64(kind) > math.MaxUint32 {
		return errors.New("snapshot: too many candidate children")
	}
	for len(x.counts) <= kind {
		x.counts = append(x.counts, 0)
	}
	var num [candNumSize]byte
	binary.BigEndian.PutUint32(num[:], uint32(kind))
	binary.BigEndian.PutUint32(num[4:], x.counts[kind])
	var rec [edgeRecSize]byte
	copy(rec[:], k[:])
	copy(rec[uidKeySize:], num[:])
	if err := x.cands.add(rec[:candRecSize]); err != nil {
		return err
	}
	copy(rec[uidKeySize:], k[:])
	copy(rec[2*uidKeySize:], num[:])
	for _, o := range owners {
		copy(rec[:uidKeySize], o[:])
		if err := x.edges.add(rec[:]); err != nil {
			return err
		}
	}
	x.counts[kind]++
	x.m++
	return nil
}

// kindCount is the number of candidates of the owned kind with index kind.
func (x *chainIndex) kindCount(kind int) uint32 {
	if kind < len(x.counts) {
		return x.counts[kind]
	}
	return 0
}

// areCRs says, for each UID, whether it is the UID of a recorded CR. It is meant for a few
// UIDs (the release's manifest objects): they are sorted in memory and merged with the CRs.
func (x *chainIndex) areCRs(uids []types.UID) ([]bool, error) {
	out := make([]bool, len(uids))
	if len(uids) == 0 || x.crs.len() == 0 {
		return out, nil
	}
	type query struct {
		k uidKey
		i int
	}
	qs := make([]query, len(uids))
	for i, u := range uids {
		qs[i] = query{x.keys.key(u), i}
	}
	sort.Slice(qs, func(i, j int) bool { return bytes.Compare(qs[i].k[:], qs[j].k[:]) < 0 })
	it := x.crs.iter()
	cr, ok, err := it.next()
	for _, q := range qs {
		for ok && bytes.Compare(cr, q.k[:]) < 0 {
			cr, ok, err = it.next()
		}
		if err != nil {
			return nil, err
		}
		out[q.i] = ok && bytes.Equal(cr, q.k[:])
	}
	return out, nil
}

// children decides which candidates are written as associated objects: those reachable from
// a CR through ownerReference UIDs (a candidate is reached when one of its owners is a CR or a
// reached candidate), except a candidate whose UID is already written (a CR, or one in
// written, or an earlier candidate in spool order). Bit i of the result is the i-th candidate
// in spool order (kind by kind). The empty UID is never "already written" (it is not an
// identity). Memory: 2 bits per candidate. Candidates must not be added any more.
func (x *chainIndex) children(written map[types.UID]struct{}) (bitset, error) {
	m := int(x.m)
	if m == 0 || x.crs.len() == 0 {
		return newBitset(m), nil
	}
	// Spool position of a candidate number.
	offsets := make([]uint32, len(x.counts))
	for i := 1; i < len(offsets); i++ {
		offsets[i] = offsets[i-1] + x.counts[i-1]
	}
	pos := func(num []byte) uint32 {
		return offsets[binary.BigEndian.Uint32(num)] + binary.BigEndian.Uint32(num[4:])
	}
	// Keys of what is already written; lookup so as not to number a new non-canonical UID.
	small := make(map[uidKey]struct{}, len(written))
	for u := range written {
		if k, ok := x.keys.lookup(u); ok {
			small[k] = struct{}{}
		}
	}
	emptyKey, hasEmpty := x.keys.lookup("")

	// Duplicates: in key order, a candidate is excluded when its key equals the previous
	// candidate's (same UID, later in the spool), is a CR, or is already written.
	excluded := newBitset(m)
	{
		crs, cands := x.crs.iter(), x.cands.iter()
		cr, crOK, err := crs.next()
		if err != nil {
			return nil, err
		}
		var prev uidKey
		first := true
		for {
			rec, ok, err := cands.next()
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			k, i := rec[:uidKeySize], pos(rec[uidKeySize:])
			dup := !first && bytes.Equal(prev[:], k)
			copy(prev[:], k)
			first = false
			for crOK && bytes.Compare(cr, k) < 0 {
				if cr, crOK, err = crs.next(); err != nil {
					return nil, err
				}
			}
			if hasEmpty && bytes.Equal(k, emptyKey[:]) {
				continue
			}
			_, isWritten := small[uidKey(k)]
			if dup || isWritten || (crOK && bytes.Equal(cr, k)) {
				excluded.set(i)
			}
		}
	}

	// Reachability, round by round: the frontier (first the CRs, then the UIDs reached in the
	// previous round) is joined with the edges by owner; the candidates found mark every
	// candidate of the same UID, and their UIDs are the next frontier.
	reached := newBitset(m)
	frontier := x.crs
	defer func() {
		if frontier != x.crs {
			frontier.close()
		}
	}()
	for {
		found := newExtSorter(x.dir, uidKeySize, x.chunk)
		err := joinSorted(frontier.iter(), x.edges.iter(), func(e []byte) error {
			if reached.has(pos(e[2*uidKeySize:])) {
				return nil
			}
			return found.add(e[uidKeySize : 2*uidKeySize])
		})
		if err != nil {
			found.close()
			return nil, err
		}
		if found.len() == 0 {
			found.close()
			break
		}
		next := newExtSorter(x.dir, uidKeySize, x.chunk)
		var last uidKey
		err = joinSorted(found.iter(), x.cands.iter(), func(c []byte) error {
			i := pos(c[uidKeySize:])
			if reached.has(i) {
				return nil
			}
			reached.set(i)
			if next.len() > 0 && bytes.Equal(last[:], c[:uidKeySize]) {
				return nil
			}
			copy(last[:], c[:uidKeySize])
			return next.add(c[:uidKeySize])
		})
		found.close()
		if frontier != x.crs {
			frontier.close()
		}
		frontier = next
		if err != nil {
			return nil, err
		}
		if next.len() == 0 {
			break
		}
	}
	for i := range reached {
		reached[i] &^= excluded[i]
	}
	return reached, nil
}

// joinSorted calls fn for every record of recs (sorted) whose leading key is one of keys
// (sorted UID keys, possibly repeated).
func joinSorted(keys, recs *recIter, fn func(rec []byte) error) error {
	k, kOK, err := keys.next()
	if err != nil {
		return err
	}
	for kOK {
		rec, ok, err := recs.next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		for kOK && bytes.Compare(k, rec[:uidKeySize]) < 0 {
			if k, kOK, err = keys.next(); err != nil {
				return err
			}
		}
		if kOK && bytes.Equal(k, rec[:uidKeySize]) {
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
	return nil
}
