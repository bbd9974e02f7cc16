// Package bench holds rewind's benchmarks against the real testbed: `make bench` runs them
// and each prints its figure next to a baseline measured in the same run.
package bench

import (
	"flag"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
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
	// inUse is the peak of heap in use (live objects and not yet collected garbage) above the
	// heap before the function started.
	inUse uint64
	// live is the peak live heap as measured by the garbage collector (runtime/metrics
	// /gc/heap/live:bytes): memory the function really retained.
	live uint64
}

// peakHeap samples the Go heap while fn runs.
func peakHeap(fn func()) heapPeaks {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var max, maxLive atomic.Uint64
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			var s runtime.MemStats
			runtime.ReadMemStats(&s)
			if s.HeapInuse > base && s.HeapInuse-base > max.Load() {
				max.Store(s.HeapInuse - base)
			}
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > maxLive.Load() {
				maxLive.Store(v)
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
	return heapPeaks{inUse: max.Load(), live: maxLive.Load()}
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
