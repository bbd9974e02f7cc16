package snapshot

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestUIDKeys(t *testing.T) {
	var k keyer
	canon := types.UID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
	key := k.key(canon)
	if key[0] != 0 || fmt.Sprintf("%x", key[1:]) != "0f1e2d3c4b5a69788796a5b4c3d2e1f0" {
		t.Fatalf("canonical UUID key: %x", key)
	}
	if k.other != nil {
		t.Fatal("a canonical UUID must not be numbered")
	}
	// Not canonical: numbered, so distinct strings stay distinct and equal ones equal.
	others := []types.UID{"", "0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f", "0f1e2d3c_4b5a-6978-8796-a5b4c3d2e1f0", "x"}
	seen := map[uidKey]types.UID{key: canon}
	for _, u := range others {
		if _, ok := k.lookup(u); ok {
			t.Fatalf("%q: lookup before key must fail", u)
		}
		ku := k.key(u)
		if prev, dup := seen[ku]; dup {
			t.Fatalf("%q and %q have the same key", u, prev)
		}
		seen[ku] = u
		if again, ok := k.lookup(u); !ok || again != ku || k.key(u) != ku {
			t.Fatalf("%q: key not stable", u)
		}
	}
}

func TestExtSorterSortsAcrossRunsAndLevels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 63, 64, 65, 500, 4000} {
		s := newExtSorter(t.TempDir(), 5, 40) // 8 records per chunk: many runs and merges
		var want [][]byte
		for range n {
			rec := []byte{byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))}
			want = append(want, rec)
			if err := s.add(rec); err != nil {
				t.Fatal(err)
			}
		}
		slices.SortFunc(want, bytes.Compare)
		for pass := range 2 { // readable more than once
			it := s.iter()
			var got [][]byte
			for {
				rec, ok, err := it.next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got = append(got, bytes.Clone(rec))
			}
			if !slices.EqualFunc(got, want, bytes.Equal) {
				t.Fatalf("n=%d pass %d: records out of order or lost (%d of %d)", n, pass, len(got), len(want))
			}
		}
		perLevel := map[int]int{}
		for _, run := range s.runs {
			perLevel[run.level]++
		}
		for lvl, k := range perLevel {
			if k >= sortFanIn {
				t.Errorf("n=%d: %d runs of level %d, they must have been merged", n, k, lvl)
			}
		}
		dir := s.dir
		s.close()
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("n=%d: close left %d files", n, len(left))
		}
	}
}

// addCandidate adds a candidate of kind 0 by UIDs.
func addCandidate(x *chainIndex, uid types.UID, owners []types.UID) error {
	return addCandidateOfKind(x, 0, uid, owners)
}

func addCandidateOfKind(x *chainIndex, kind int, uid types.UID, owners []types.UID) error {
	var keys []uidKey
	for _, o := range owners {
		keys = append(keys, x.keys.key(o))
	}
	return x.addCandidate(kind, x.keys.key(uid), keys)
}

type testCandidate struct {
	uid    types.UID
	owners []types.UID
}

// referenceChildren is the capture's former in-memory algorithm: UID sets in maps.
func referenceChildren(crs []types.UID, cands []testCandidate, written map[types.UID]struct{}) []bool {
	out := make([]bool, len(cands))
	crUIDs := map[types.UID]struct{}{}
	w := map[types.UID]struct{}{}
	for u := range written {
		w[u] = struct{}{}
	}
	for _, u := range crs {
		crUIDs[u] = struct{}{}
		if u != "" {
			w[u] = struct{}{}
		}
	}
	if len(cands) == 0 || len(crUIDs) == 0 {
		return out
	}
	reach := map[types.UID]bool{}
	for changed := true; changed; {
		changed = false
		for _, e := range cands {
			if reach[e.uid] {
				continue
			}
			for _, o := range e.owners {
				if _, isCR := crUIDs[o]; isCR || reach[o] {
					reach[e.uid] = true
					changed = true
					break
				}
			}
		}
	}
	for i, e := range cands {
		if !reach[e.uid] {
			continue
		}
		if _, dup := w[e.uid]; dup {
			continue
		}
		out[i] = true
		if e.uid != "" {
			w[e.uid] = struct{}{}
		}
	}
	return out
}

func randomUID(r *rand.Rand) types.UID {
	switch r.IntN(20) {
	case 0:
		return ""
	case 1:
		return types.UID(fmt.Sprintf("odd-%d", r.IntN(5)))
	case 2:
		return types.UID(fmt.Sprintf("%08X-0000-0000-0000-000000000000", r.IntN(5)))
	}
	return types.UID(fmt.Sprintf("%08x-%04x-4000-8000-%012x", r.IntN(1<<20), r.IntN(3), r.IntN(1<<40)))
}

func TestChainIndexMatchesTheInMemoryAlgorithm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		// A universe of UIDs, some shared between CRs, candidates and owners.
		universe := make([]types.UID, 1+r.IntN(200))
		for i := range universe {
			universe[i] = randomUID(r)
		}
		pick := func() types.UID { return universe[r.IntN(len(universe))] }
		var crs []types.UID
		for range r.IntN(60) {
			crs = append(crs, pick())
		}
		var cands []testCandidate
		for range r.IntN(300) {
			c := testCandidate{uid: pick()}
			for range r.IntN(4) {
				c.owners = append(c.owners, pick())
			}
			cands = append(cands, c)
		}
		// Chains: some candidates owned by earlier ones.
		for i := range cands {
			if i > 0 && r.IntN(3) == 0 {
				cands[i].owners = append(cands[i].owners, cands[r.IntN(i)].uid)
			}
		}
		written := map[types.UID]struct{}{}
		for range r.IntN(5) {
			if u := pick(); u != "" {
				written[u] = struct{}{}
			}
		}
		chunk := []int{0, 17, 64, 200}[trial%4]
		x := newChainIndex(t.TempDir(), chunk)
		for _, u := range crs {
			if err := x.addCR(x.keys.key(u)); err != nil {
				t.Fatal(err)
			}
		}
		// Candidates come kind by kind in spool order, but kinds are added in any order
		// (listed concurrently).
		kinds := 1 + r.IntN(4)
		bounds := []int{0}
		for k := 1; k < kinds; k++ {
			bounds = append(bounds, r.IntN(len(cands)+1))
		}
		bounds = append(bounds, len(cands))
		slices.Sort(bounds)
		for _, k := range r.Perm(kinds) {
			for _, c := range cands[bounds[k]:bounds[k+1]] {
				if err := addCandidateOfKind(x, k, c.uid, c.owners); err != nil {
					t.Fatal(err)
				}
			}
		}
		for k := range kinds {
			if got := x.kindCount(k); got != uint32(bounds[k+1]-bounds[k]) {
				t.Fatalf("kind %d: %d candidates, want %d", k, got, bounds[k+1]-bounds[k])
			}
		}
		got, err := x.children(written)
		if err != nil {
			t.Fatal(err)
		}
		want := referenceChildren(crs, cands, written)
		for i := range cands {
			if got.has(uint32(i)) != want[i] {
				t.Fatalf("trial %d (chunk %d): candidate %d %+v: written %v, the in-memory algorithm says %v", trial, chunk, i, cands[i], got.has(uint32(i)), want[i])
			}
		}
		// Which UIDs are CRs, for manifest objects.
		queries := []types.UID{pick(), pick(), "", "never-seen", pick()}
		isCR, err := x.areCRs(queries)
		if err != nil {
			t.Fatal(err)
		}
		for i, q := range queries {
			if isCR[i] != slices.Contains(crs, q) {
				t.Fatalf("trial %d: areCRs(%q) = %v", trial, q, isCR[i])
			}
		}
		dir := x.dir
		x.close()
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("trial %d: close left %d files", trial, len(left))
		}
	}
}

// A long chain (each candidate owned by the next one, the last by a CR) takes one round per
// link.
func TestChainIndexFollowsLongChains(t *testing.T) {
	const n = 300
	uid := func(i int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)) }
	x := newChainIndex(t.TempDir(), 64)
	defer x.close()
	if err := x.addCR(x.keys.key(uid(n))); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := addCandidate(x, uid(i), []types.UID{uid(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := addCandidate(x, uid(n+1), []types.UID{uid(n + 2)}); err != nil { // unreachable
		t.Fatal(err)
	}
	got, err := x.children(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !got.has(uint32(i)) {
			t.Fatalf("candidate %d of the chain is not reached", i)
		}
	}
	if got.has(n) {
		t.Fatal("an object owned by no CR must not be reached")
	}
}
