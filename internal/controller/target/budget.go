package target

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// MemoryBudget bounds the snapshot content that running restores hold in memory at once,
// counted in the snapshots' uncompressed bytes (status.bytes). A restore that does not fit
// waits in line (its target says so); when memory frees, the next in line are woken through
// Wakeups, in the order they came, and a newcomer does not pass them. A snapshot larger than
// the whole budget restores alone. A nil budget bounds nothing.
type MemoryBudget struct {
	size int64
	now  func() time.Time

	mu   sync.Mutex
	used int64
	// line holds the waiting targets in arrival order.
	line []*waiter
	wake chan event.GenericEvent
}

// waiter is a target waiting for the budget.
type waiter struct {
	key      types.NamespacedName
	snapshot string
	weight   int64
	// seen is the last time the target asked; one that stops asking (deleted, or moved on)
	// leaves the line after waiterExpiry.
	seen time.Time
	// woken says a wake-up was sent since it last asked.
	woken bool
}

// waiterExpiry is how long a waiting target keeps its place without asking again: a few of
// its fallback polls (budgetPoll).
const waiterExpiry = 5 * budgetPoll

// NewMemoryBudget returns a budget of size bytes (size <= 0: unbounded, nil).
func NewMemoryBudget(size int64) *MemoryBudget {
	if size <= 0 {
		return nil
	}
	return &MemoryBudget{size: size, now: time.Now, wake: make(chan event.GenericEvent, 1024)}
}

// weight is what a snapshot of n bytes takes of the budget.
func (b *MemoryBudget) weight(n int64) int64 { return min(max(n, 1), b.size) }

// TryTake takes, for the target key, the share of a snapshot of n bytes if it is free and no
// target that came earlier still waits for it; it returns the function that gives it back.
// Otherwise the target waits in line: Waiting then knows its size, and Wakeups names it once
// its turn may have come.
func (b *MemoryBudget) TryTake(key types.NamespacedName, snapshot string, n int64) (release func(), ok bool) {
	if b == nil {
		return func() {}, true
	}
	w := b.weight(n)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.expire() {
		b.wakeNext()
	}
	i := slices.IndexFunc(b.line, func(x *waiter) bool { return x.key == key })
	if i >= 0 && b.line[i].snapshot != snapshot {
		b.line = slices.Delete(b.line, i, i+1) // another snapshot: a new request
		i = -1
	}
	// It fits if it fits after everyone ahead of it in line.
	ahead := b.line
	if i >= 0 {
		ahead = b.line[:i]
	}
	need := w
	for _, x := range ahead {
		need += x.weight
	}
	if b.used+need <= b.size {
		b.used += w
		if i >= 0 {
			b.line = slices.Delete(b.line, i, i+1)
		}
		return func() { b.give(w) }, true
	}
	if i >= 0 {
		b.line[i].seen, b.line[i].woken = b.now(), false
	} else {
		b.line = append(b.line, &waiter{key: key, snapshot: snapshot, weight: w, seen: b.now()})
	}
	return nil, false
}

// Waiting returns the size recorded for a target waiting in line for snapshot, so that it
// need not read the snapshot again to ask.
func (b *MemoryBudget) Waiting(key types.NamespacedName, snapshot string) (n int64, ok bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.line {
		if x.key == key && x.snapshot == snapshot {
			return x.weight, true
		}
	}
	return 0, false
}

// Forget takes a target out of the line (it was deleted).
func (b *MemoryBudget) Forget(key types.NamespacedName) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.line = slices.DeleteFunc(b.line, func(x *waiter) bool { return x.key == key })
	b.wakeNext()
}

// Wakeups names, as RolloutTargets, the waiting targets whose turn may have come (nil for a
// nil budget).
func (b *MemoryBudget) Wakeups() <-chan event.GenericEvent {
	if b == nil {
		return nil
	}
	return b.wake
}

func (b *MemoryBudget) give(w int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= w
	b.expire()
	b.wakeNext() // memory freed: wake whoever fits now
}

// wakeNext wakes, in order, the waiters that fit in what is free.
func (b *MemoryBudget) wakeNext() {
	free := b.size - b.used
	for _, x := range b.line {
		if x.weight > free {
			return
		}
		free -= x.weight
		if x.woken {
			continue
		}
		select {
		case b.wake <- event.GenericEvent{Object: &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: x.key.Namespace, Name: x.key.Name}}}:
			x.woken = true
		default: // full: its fallback poll asks again
		}
	}
}

// expire drops the waiters that stopped asking and says whether it dropped any (those
// behind them may then fit).
func (b *MemoryBudget) expire() bool {
	now := b.now()
	n := len(b.line)
	b.line = slices.DeleteFunc(b.line, func(x *waiter) bool { return now.Sub(x.seen) > waiterExpiry })
	return len(b.line) != n
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
