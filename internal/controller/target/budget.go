package target

import (
	"fmt"

	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryBudget bounds the snapshot content that running restores hold in memory at once,
// counted in the snapshots' uncompressed bytes (status.bytes). A restore that does not fit
// waits (its target says so) until others finish; a snapshot larger than the whole budget
// restores alone. A nil budget bounds nothing.
type MemoryBudget struct {
	size int64
	sem  *semaphore.Weighted
}

// NewMemoryBudget returns a budget of size bytes (size <= 0: unbounded, nil).
func NewMemoryBudget(size int64) *MemoryBudget {
	if size <= 0 {
		return nil
	}
	return &MemoryBudget{size: size, sem: semaphore.NewWeighted(size)}
}

// weight is what a snapshot of n bytes takes of the budget.
func (b *MemoryBudget) weight(n int64) int64 { return min(max(n, 1), b.size) }

// TryTake takes a snapshot's share of the budget if it is free, and returns the function
// that gives it back.
func (b *MemoryBudget) TryTake(n int64) (release func(), ok bool) {
	if b == nil {
		return func() {}, true
	}
	w := b.weight(n)
	if !b.sem.TryAcquire(w) {
		return nil, false
	}
	return func() { b.sem.Release(w) }, true
}

// String is the budget as a quantity ("64Mi").
func (b *MemoryBudget) String() string {
	if b == nil {
		return "unbounded"
	}
	return resource.NewQuantity(b.size, resource.BinarySI).String()
}

// ParseMemoryBudget reads a --restore-memory value: a quantity of bytes ("48Mi"), or 0 for
// no bound.
func ParseMemoryBudget(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() < 0 {
		return 0, fmt.Errorf("--restore-memory %q: want a quantity of bytes such as 48Mi, or 0 for no bound", s)
	}
	return q.Value(), nil
}
