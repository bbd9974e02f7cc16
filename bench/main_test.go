// Package bench holds rewind's benchmarks against the real testbed: `make bench` runs them
// and each prints its figure next to a baseline measured in the same run.
package bench

import (
	"flag"
	"os"
	"runtime"
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

// peakHeap samples the Go heap while fn runs and returns the peak heap in use above the
// heap before fn started.
func peakHeap(fn func()) (peak uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var max atomic.Uint64
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
	return max.Load()
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
