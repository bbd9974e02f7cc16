//go:build !unit

// Package bench holds rewind's benchmarks against the real testbed: `make bench` runs them
// and each prints its figure next to a baseline measured in the same run.
package bench

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		// No benchmark selected (e.g. `go test ./...`): no testbed needed.
		os.Exit(m.Run())
	}
	testenv.Main(m, testbed.Options{Members: 1}, &env)
}

// heapPeaks are the peaks sampled while a function ran.
type heapPeaks struct {
	// inUse is the peak of heap in use (live objects, not yet collected garbage and
	// fragmentation: runtime.MemStats.HeapInuse) above its value before the function.
	inUse uint64
	// live is the peak live heap as measured by the garbage collector at the end of each
	// cycle (runtime/metrics /gc/heap/live:bytes) above the live heap before the function:
	// the memory the function really retained.
	live uint64
	// liveTotal is the same peak with what the process held before (the testbed clients,
	// the benchmark's own state).
	liveTotal uint64
	// liveMedian is the median of the live heap (above the heap before) over the GC cycles
	// seen: what the function typically holds. The peak also counts objects allocated while
	// the collector marks (dead soon after), so it is the worst of all cycles, and the more
	// cycles a run has (the longer it is), the worse its worst one tends to be.
	liveMedian uint64
}

// spread is the median, lowest and highest of one figure over several runs.
type spread struct{ median, low, high uint64 }

// spreadOf summarizes the figure f of runs.
func spreadOf(runs []heapPeaks, f func(heapPeaks) uint64) spread {
	v := make([]uint64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return spread{median: v[len(v)/2], low: v[0], high: v[len(v)-1]}
}

func (s spread) String() string {
	return fmt.Sprintf("%4.1f MiB [%.1f-%.1f]", mb(s.median), mb(s.low), mb(s.high))
}

// peakHeap samples the Go heap every 2 ms while fn runs (runtime/metrics: no stop-the-world).
func peakHeap(fn func()) heapPeaks {
	runtime.GC()
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	read := func() (live, inUse, cycles uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64() + samples[2].Value.Uint64(), samples[3].Value.Uint64()
	}
	baseLive, baseInUse, lastCycle := read()
	var maxLive, maxInUse uint64
	var perCycle []uint64 // live heap at the end of each GC cycle seen
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			live, inUse, cycles := read()
			maxLive, maxInUse = max(maxLive, live), max(maxInUse, inUse)
			if cycles != lastCycle {
				lastCycle = cycles
				perCycle = append(perCycle, live)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	above := func(v, base uint64) uint64 {
		if v < base {
			return 0
		}
		return v - base
	}
	var med uint64
	if len(perCycle) > 0 {
		slices.Sort(perCycle)
		med = perCycle[len(perCycle)/2]
	}
	return heapPeaks{inUse: above(maxInUse, baseInUse), live: above(maxLive, baseLive), liveTotal: maxLive, liveMedian: above(med, baseLive)}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
