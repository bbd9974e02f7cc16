package target

import (
	"strings"
	"testing"
)

func TestMemoryBudget(t *testing.T) {
	b := NewMemoryBudget(100)
	give1, ok := b.TryTake(60)
	if !ok {
		t.Fatal("the first restore must fit an empty budget")
	}
	if _, ok := b.TryTake(50); ok {
		t.Fatal("60 + 50 bytes must not fit a budget of 100")
	}
	give2, ok := b.TryTake(40)
	if !ok {
		t.Fatal("60 + 40 bytes fit a budget of 100")
	}
	give1()
	give2()
	// Larger than the budget: it restores alone, once the budget is free.
	give3, ok := b.TryTake(1 << 30)
	if !ok {
		t.Fatal("a snapshot larger than the budget must restore when the budget is free")
	}
	if _, ok := b.TryTake(1); ok {
		t.Fatal("nothing fits beside a snapshot that took the whole budget")
	}
	give3()
	if _, ok := b.TryTake(0); !ok {
		t.Fatal("a snapshot of unknown size takes one byte")
	}

	var none *MemoryBudget
	if give, ok := none.TryTake(1 << 40); !ok || give == nil {
		t.Fatal("no budget bounds nothing")
	}
	if NewMemoryBudget(0) != nil {
		t.Fatal("a budget of 0 is no bound")
	}
	if got := NewMemoryBudget(48 << 20).String(); got != "48Mi" {
		t.Fatalf("String: %q", got)
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
