//go:build !unit

package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var benchNamespaces = []string{"bench-a", "bench-b", "bench-c", "bench-d", "bench-e"}

// populate installs the MySQLCluster CRD and adds count CRs of about 1 KiB each (numbered
// from offset), the first children of which get 4 owned objects each.
func populate(b *testing.B, offset, count, children int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cfg := env.Members[0].RESTConfig()
	if _, err := apply.Objects(ctx, testenv.Member(b, env.Members[0]), []*unstructured.Unstructured{testfixture.MySQLCRD()}, apply.Options{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	err := testfixture.Populate(ctx, cfg, testfixture.Options{
		Namespaces: benchNamespaces, Count: count, Offset: offset, Children: true, ChildrenFor: children, PayloadBytes: 700, Parallelism: 32,
	})
	if err != nil {
		b.Fatal(err)
	}
	fmt.Printf("setup: %d MySQLClusters (~1 KiB each) and %d owned objects created in %s\n", count, 4*children, time.Since(start).Round(time.Millisecond))
}

// emptyMember deletes what populate creates (every MySQLCluster and owned object in the bench
// namespaces; the CRD stays), so that each benchmark starts from the same empty member
// whatever ran before it in the same `make bench`.
func emptyMember(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fixture := metav1.ListOptions{LabelSelector: "app=mysql"} // on every object populate creates
	for _, gvr := range listedKinds {
		for _, ns := range benchNamespaces {
			// NotFound: the CRD or the namespace is not there yet, so neither are its objects.
			if err := dyn.Resource(gvr).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, fixture); err != nil && !apierrors.IsNotFound(err) {
				b.Fatalf("emptying the member: deleting %s in %s: %v", gvr.Resource, ns, err)
			}
		}
	}
	// Nothing holds them (no finalizers, no garbage collector in this testbed): they are gone
	// when DeleteCollection returns. Check, so that a benchmark never measures leftovers.
	for _, gvr := range listedKinds {
		for _, ns := range benchNamespaces {
			l, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: fixture.LabelSelector, Limit: 1})
			if err != nil && !apierrors.IsNotFound(err) {
				b.Fatal(err)
			}
			if err == nil && len(l.Items) > 0 {
				b.Fatalf("emptying the member: %s %s/%s remains", gvr.Resource, ns, l.Items[0].GetName())
			}
		}
	}
	fmt.Printf("setup: member emptied in %s\n", time.Since(start).Round(time.Millisecond))
}

// benchParallelism is the capture's list parallelism (0: the default).
var benchParallelism = 0

var listedKinds = []schema.GroupVersionResource{
	testfixture.MySQLGVR,
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
}

// rawList is the baseline: a plain paginated LIST (limit 500) of the same kinds, one after
// the other, decoded and dropped.
func rawList(ctx context.Context, cfg *rest.Config) (int, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, gvr := range listedKinds {
		cont := ""
		for {
			l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
			if err != nil {
				return n, err
			}
			n += len(l.Items)
			if cont = l.GetContinue(); cont == "" {
				break
			}
		}
	}
	return n, nil
}

type captureRun struct {
	d       time.Duration
	objects int
	plain   int64
	stored  int64
	heap    heapPeaks
}

// captureOnce runs the full capture: canonical stream, gzip and AES-256-GCM, to io.Discard.
func captureOnce(ctx context.Context, b *testing.B, cfg *rest.Config) captureRun {
	cl, err := member.New("bench", cfg)
	if err != nil {
		b.Fatal(err)
	}
	kek, err := payload.GenerateLocalKEK()
	if err != nil {
		b.Fatal(err)
	}
	var run captureRun
	run.heap = peakHeap(func() {
		start := time.Now()
		w, err := payload.NewWriter(ctx, io.Discard, kek)
		if err != nil {
			b.Fatal(err)
		}
		res, err := snapshot.Capture(ctx, cl, snapshot.Options{
			Operator: "mysql-operator", Namespace: "mysql-system",
			Manifests: []*unstructured.Unstructured{testfixture.MySQLCRD()}, Parallelism: benchParallelism,
		}, w)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		run.d = time.Since(start)
		run.objects = res.Counts.CRDs + res.Counts.CustomResources + res.Counts.Associated
		run.plain, run.stored = w.PlaintextBytes(), w.StoredBytes()
	})
	return run
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// heapRuns captures 3 times and returns the runs.
func heapRuns(ctx context.Context, b *testing.B, cfg *rest.Config) []captureRun {
	var runs []captureRun
	for range 3 {
		runs = append(runs, captureOnce(ctx, b, cfg))
	}
	return runs
}

// BenchmarkSnapshotCapture captures 10,000 CRs of about 1 KiB plus 2,000 owned objects and
// compares with a raw paginated LIST of the same objects, measured alternately in the same
// run (median of 3). Peak heap is measured at 5,000, 10,000 and 20,000 CRs (with 1,000, 2,000
// and 4,000 owned objects), 3 captures each, to show it does not grow with the payload.
func BenchmarkSnapshotCapture(b *testing.B) {
	ctx := context.Background()
	cfg := env.Members[0].RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000

	emptyMember(b)
	populate(b, 0, 5000, 250)
	half := heapRuns(ctx, b, cfg)
	populate(b, 5000, 5000, 250)

	var capT, listT time.Duration
	var full []captureRun
	var listed int
	for i := 0; i < b.N; i++ {
		var caps, lists []time.Duration
		full = full[:0]
		for r := 0; r < 3; r++ {
			start := time.Now()
			n, err := rawList(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			lists = append(lists, time.Since(start))
			listed = n
			run := captureOnce(ctx, b, cfg)
			caps = append(caps, run.d)
			full = append(full, run)
		}
		capT, listT = median(caps), median(lists)
	}
	b.StopTimer()
	populate(b, 10000, 10000, 500)
	double := heapRuns(ctx, b, cfg)

	points := [][]captureRun{half, full, double}
	row := func(name string, f func(heapPeaks) uint64) []spread {
		fmt.Printf("    %-28s", name)
		var out []spread
		for _, runs := range points {
			var hs []heapPeaks
			for _, r := range runs {
				hs = append(hs, r.heap)
			}
			s := spreadOf(hs, f)
			out = append(out, s)
			fmt.Printf(" %22s", s)
		}
		fmt.Println()
		return out
	}
	last := full[len(full)-1]
	ratio := float64(capT) / float64(listT)
	fmt.Printf("snapshot capture: %d objects (%d captured), %.1f MiB canonical, %.1f MiB stored (gzip + AES-256-GCM)\n",
		listed, last.objects, mb(uint64(last.plain)), mb(uint64(last.stored)))
	fmt.Printf("  capture time      %8s  (%.0f objects/s)\n", capT.Round(time.Millisecond), float64(last.objects)/capT.Seconds())
	fmt.Printf("  baseline raw LIST %8s  (%.0f objects/s)\n", listT.Round(time.Millisecond), float64(listed)/listT.Seconds())
	fmt.Printf("  ratio capture/LIST %.2fx (target <= 1.30x)\n", ratio)
	fmt.Printf("  peak heap by payload: median of 3 captures [lowest-highest]; \"above\": above the heap just before the capture\n")
	fmt.Printf("    %-28s %22s %22s %22s\n", "", "5,000 CRs", "10,000 CRs", "20,000 CRs")
	fmt.Printf("    %-28s", "objects captured")
	for _, runs := range points {
		fmt.Printf(" %22d", runs[0].objects)
	}
	fmt.Printf("\n    %-28s", "canonical payload")
	for _, runs := range points {
		fmt.Printf(" %18.1f MiB", mb(uint64(runs[0].plain)))
	}
	fmt.Println()
	live := row("live heap (after GC), above", func(h heapPeaks) uint64 { return h.live })
	row("  median over GC cycles", func(h heapPeaks) uint64 { return h.liveMedian })
	row("live heap of the process", func(h heapPeaks) uint64 { return h.liveTotal })
	inUse := row("heap in use (with garbage)", func(h heapPeaks) uint64 { return h.inUse })
	b.ReportMetric(capT.Seconds(), "capture-s")
	b.ReportMetric(listT.Seconds(), "rawlist-s")
	b.ReportMetric(ratio, "capture/list")
	b.ReportMetric(float64(last.objects)/capT.Seconds(), "objects/s")
	b.ReportMetric(mb(inUse[1].median), "peak-heap-MiB")
	b.ReportMetric(mb(live[0].median), "peak-live-heap-5k-MiB")
	b.ReportMetric(mb(live[1].median), "peak-live-heap-10k-MiB")
	b.ReportMetric(mb(live[2].median), "peak-live-heap-20k-MiB")
}
