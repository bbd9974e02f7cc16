package target

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

func TestMemoryBudget(t *testing.T) {
	b := NewMemoryBudget(100)
	give1, ok := b.TryTake(key("a"), "s", 60)
	if !ok {
		t.Fatal("the first restore must fit an empty budget")
	}
	if _, ok := b.TryTake(key("b"), "s", 50); ok {
		t.Fatal("60 + 50 bytes must not fit a budget of 100")
	}
	b.Forget(key("b"))
	give2, ok := b.TryTake(key("c"), "s", 40)
	if !ok {
		t.Fatal("60 + 40 bytes fit a budget of 100")
	}
	give1()
	give2()
	// Larger than the budget: it restores alone, once the budget is free.
	give3, ok := b.TryTake(key("d"), "s", 1<<30)
	if !ok {
		t.Fatal("a snapshot larger than the budget must restore when the budget is free")
	}
	if _, ok := b.TryTake(key("e"), "s", 1); ok {
		t.Fatal("nothing fits beside a snapshot that took the whole budget")
	}
	b.Forget(key("e"))
	give3()
	if _, ok := b.TryTake(key("f"), "s", 0); !ok {
		t.Fatal("a snapshot of unknown size takes one byte")
	}

	var none *MemoryBudget
	if give, ok := none.TryTake(key("a"), "s", 1<<40); !ok || give == nil {
		t.Fatal("no budget bounds nothing")
	}
	if _, ok := none.Waiting(key("a"), "s"); ok || none.Wakeups() != nil {
		t.Fatal("no budget has no line")
	}
	none.Forget(key("a"))
	if NewMemoryBudget(0) != nil {
		t.Fatal("a budget of 0 is no bound")
	}
	if got := NewMemoryBudget(48 << 20).String(); got != "48Mi" {
		t.Fatalf("String: %q", got)
	}
}

// wakeups drains the wake-ups sent so far.
func wakeups(b *MemoryBudget) []string {
	var out []string
	for {
		select {
		case ev := <-b.Wakeups():
			out = append(out, ev.Object.GetName())
		default:
			return out
		}
	}
}

// Waiting restores are served in the order they came, woken when their turn may have come,
// and a newcomer does not pass them.
func TestMemoryBudgetLine(t *testing.T) {
	b := NewMemoryBudget(100)
	giveA, _ := b.TryTake(key("a"), "s", 80)
	if _, ok := b.TryTake(key("big"), "s1", 60); ok {
		t.Fatal("80 + 60 must not fit")
	}
	if n, ok := b.Waiting(key("big"), "s1"); !ok || n != 60 {
		t.Fatalf("Waiting: %d %v, want the size it asked with", n, ok)
	}
	if _, ok := b.Waiting(key("big"), "other"); ok {
		t.Fatal("Waiting is per snapshot")
	}
	// 20 bytes are free, but big came first: the small one waits behind it.
	if _, ok := b.TryTake(key("small"), "s2", 20); ok {
		t.Fatal("a newcomer passed a restore waiting in line")
	}
	if w := wakeups(b); len(w) != 0 {
		t.Fatalf("woken before anything was given back: %v", w)
	}
	giveA()
	// Both fit now: both are woken, in order.
	if w := wakeups(b); strings.Join(w, ",") != "big,small" {
		t.Fatalf("wake-ups %v, want big,small", w)
	}
	// small asks first: it still fits after big, so it may go.
	giveSmall, ok := b.TryTake(key("small"), "s2", 20)
	if !ok {
		t.Fatal("small fits after big")
	}
	giveBig, ok := b.TryTake(key("big"), "s1", 60)
	if !ok {
		t.Fatal("big's turn came")
	}
	if _, ok := b.Waiting(key("big"), "s1"); ok {
		t.Fatal("a restore that took its share is out of the line")
	}
	giveSmall()
	giveBig()
	if _, ok := b.TryTake(key("x"), "s", 100); !ok {
		t.Fatal("everything was given back")
	}
}

// A waiting target that stops asking (deleted, or moved on) leaves the line after a while, so
// it does not hold up those behind it; one that is deleted leaves at once.
func TestMemoryBudgetExpiry(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewMemoryBudget(100)
	b.now = func() time.Time { return now }
	give, _ := b.TryTake(key("a"), "s", 50)
	if _, ok := b.TryTake(key("gone"), "s", 100); ok {
		t.Fatal("100 must not fit beside 50")
	}
	if _, ok := b.TryTake(key("next"), "s", 10); ok {
		t.Fatal("next must wait behind gone")
	}
	now = now.Add(waiterExpiry / 2)
	if _, ok := b.TryTake(key("next"), "s", 10); ok {
		t.Fatal("gone keeps its place for a while")
	}
	now = now.Add(waiterExpiry/2 + time.Second)
	if _, ok := b.TryTake(key("next"), "s", 10); !ok {
		t.Fatal("gone stopped asking: next must go")
	}
	if w := wakeups(b); strings.Join(w, ",") != "next" {
		t.Fatalf("wake-ups %v, want next (its turn came when gone left)", w)
	}
	give()
	if _, ok := b.TryTake(key("later"), "s", 100); ok {
		t.Fatal("100 must not fit beside next's 10")
	}
	if _, ok := b.TryTake(key("after"), "s", 1); ok {
		t.Fatal("after waits behind later")
	}
	b.Forget(key("later"))
	if w := wakeups(b); strings.Join(w, ",") != "after" {
		t.Fatalf("wake-ups %v, want after (later was deleted)", w)
	}
}

func TestParseMemoryBudget(t *testing.T) {
	for in, want := range map[string]int64{"48Mi": 48 << 20, "0": 0, "1G": 1e9, "1000": 1000} {
		got, err := ParseMemoryBudget(in)
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1Mi", "lots", ""} {
		if _, err := ParseMemoryBudget(in); err == nil || !strings.Contains(err.Error(), "--restore-memory") {
			t.Errorf("%q: want an error naming --restore-memory, got %v", in, err)
		}
	}
}
