//go:build !unit

package bench

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"runtime"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// BenchmarkRestoreHeap measures the memory of one restore as the fleet runs it: a snapshot of
// 200 CRs and 800 owned objects, decoded from its stream, restored to a member where one
// ConfigMap changed since (so the restore runs in full and finds the other 999 objects equal).
// It reports the peak live heap above the heap before the restore (median of 5) and the bytes
// allocated per restore.
func BenchmarkRestoreHeap(b *testing.B) {
	ctx := context.Background()
	emptyMember(b)
	populate(b, 0, 200, 200)
	var buf bytes.Buffer
	if _, err := snapshot.Capture(ctx, testenv.Member(b, env.Members[0]), snapshot.Options{
		Operator: "mysql-operator", Namespace: "mysql-system", Manifests: []*unstructured.Unstructured{testfixture.MySQLCRD()},
	}, &buf); err != nil {
		b.Fatal(err)
	}
	stream := buf.Bytes()
	dyn, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	cms := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(benchNamespaces[0])
	// change edits one ConfigMap, so that the restore is not a no-op.
	change := func(round int) {
		cm, err := cms.Get(ctx, "db-00000-config", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_ = unstructured.SetNestedField(cm.Object, fmt.Sprintf("changed-%d", round), "data", "my.cnf")
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cl := testenv.Member(b, env.Members[0])
	// restoreOnce restores the snapshot once after a change: streamed from its payload (as the
	// controller and the CLI read it), or, as before, decoded whole and held while it runs.
	restoreOnce := func(round int, streamed bool) (heapPeaks, uint64) {
		change(round)
		var before, after runtime.MemStats
		var rep *restore.Report
		heap := peakHeap(func() {
			runtime.ReadMemStats(&before)
			var hdr snapshot.Header
			var entries []snapshot.Entry
			var all iter.Seq2[snapshot.RawEntry, error]
			if streamed {
				d, err := snapshot.NewDecoder(bytes.NewReader(stream))
				if err != nil {
					b.Fatal(err)
				}
				hdr, all = d.Header(), d.AllRaw()
			} else {
				var err error
				if hdr, entries, err = snapshot.ReadAll(bytes.NewReader(stream)); err != nil {
					b.Fatal(err)
				}
				all = snapshot.RawEntriesOf(entries)
			}
			var err error
			rep, err = restore.Run(ctx, cl, restore.Options{Header: hdr, Entries: all, Parallelism: 16})
			if err != nil {
				b.Fatal(err)
			}
			runtime.KeepAlive(entries)
			runtime.ReadMemStats(&after)
		})
		if t := rep.Totals(); t.Restored != 1 || t.Unchanged != 1000 {
			b.Fatalf("restore: %+v, want 1 restored and 1000 unchanged (CRD included)", t)
		}
		return heap, after.TotalAlloc - before.TotalAlloc
	}
	var runs, heldRuns []heapPeaks
	var allocs []uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for round := range 5 {
			heap, alloc := restoreOnce(i*20+round, true)
			runs = append(runs, heap)
			allocs = append(allocs, alloc)
		}
	}
	b.StopTimer()
	for round := range 5 {
		heap, _ := restoreOnce(10+round, false)
		heldRuns = append(heldRuns, heap)
	}
	heldLive := spreadOf(heldRuns, func(h heapPeaks) uint64 { return h.live })
	heldTypical := spreadOf(heldRuns, func(h heapPeaks) uint64 { return h.liveMedian })

	// Baseline, same run: what a restore held before it streamed, the decoded snapshot plus
	// one LIST of every kind it holds, all at once.
	var held []*unstructured.UnstructuredList
	var baseRuns []heapPeaks
	for range 5 {
		baseRuns = append(baseRuns, peakHeap(func() {
			_, entries, err := snapshot.ReadAll(bytes.NewReader(stream))
			if err != nil {
				b.Fatal(err)
			}
			seen := map[schema.GroupVersionResource]bool{}
			for _, e := range entries {
				res, err := cl.Resource(e.Object.GroupVersionKind())
				if err != nil {
					b.Fatal(err)
				}
				if seen[res.GVR] {
					continue
				}
				seen[res.GVR] = true
				l, err := dyn.Resource(res.GVR).List(ctx, metav1.ListOptions{})
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, l)
			}
			runtime.KeepAlive(entries)
			runtime.KeepAlive(held)
			held = nil
		}))
	}
	baseLive := spreadOf(baseRuns, func(h heapPeaks) uint64 { return h.live })

	live := spreadOf(runs, func(h heapPeaks) uint64 { return h.live })
	inUse := spreadOf(runs, func(h heapPeaks) uint64 { return h.inUse })
	var total uint64
	for _, a := range allocs {
		total += a
	}
	perRestore := total / uint64(len(allocs))
	fmt.Printf("restore heap: snapshot of 200 CRs + 800 owned objects, 1 object changed; median of %d restores [lowest-highest], above the heap before\n", len(runs))
	typical := spreadOf(runs, func(h heapPeaks) uint64 { return h.liveMedian })
	fmt.Printf("  peak live heap   %s\n", live)
	fmt.Printf("  typical live heap (median over the GC cycles of a restore) %s\n", typical)
	fmt.Printf("  baseline: the same restore with the snapshot decoded whole and held while it runs (before restores kept entries compact): peak live heap %s, typical %s; ratios %.2f and %.2f\n",
		heldLive, heldTypical, float64(live.median)/float64(heldLive.median), float64(typical.median)/float64(heldTypical.median))
	fmt.Printf("  peak heap in use %s\n", inUse)
	fmt.Printf("  baseline: the decoded snapshot and one LIST of each of its kinds held at once (what a restore held before it streamed): peak live heap %s; ratio %.2f\n",
		baseLive, float64(live.median)/float64(baseLive.median))
	fmt.Printf("  allocated        %4.1f MiB per restore (decoding the snapshot included)\n", mb(perRestore))
	b.ReportMetric(mb(live.median), "peak-live-MiB")
	b.ReportMetric(mb(perRestore), "alloc-MiB/restore")
}
