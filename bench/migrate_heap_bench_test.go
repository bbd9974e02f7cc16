//go:build !unit

package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// BenchmarkMigrateHeap measures the memory of the storage migration, the part of a restore
// that rewrites every custom resource of a kind: a rollback whose newer release made v1beta1
// the storage version makes v1alpha1 the storage version again and rewrites every
// MySQLCluster (~1 KiB each) at it (they are stored at v1alpha1 already, so the API server
// writes nothing to etcd for them; the restore's work is the same). The restore runs its CRDs step only (a snapshot holding
// the CRD alone, stopped after the step), first with 2,000 MySQLClusters, then with 20,000. It
// reports the peak live heap above the heap before the restore (median of 3 runs with
// 2,000, one run with 20,000: a run of 20,000 takes about 2 minutes on 2 busy cores). The
// migration pages through the objects one working set at a time (restore.DefaultWorkingSet),
// so the heap is the same with ten times the objects. Baseline, same run: what the migration
// held before it paged, every live MySQLCluster decoded in a map (read as it read them, 500
// a page), measured with 20,000.
func BenchmarkMigrateHeap(b *testing.B) {
	ctx := context.Background()
	emptyMember(b)
	cl := testenv.Member(b, env.Members[0])
	if _, err := apply.Objects(ctx, cl, []*unstructured.Unstructured{testfixture.MySQLCRD()}, apply.Options{}); err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	crds := dyn.Resource(crdGVR)
	const crdName = "mysqlclusters.database.example.com"
	// The snapshot: the CRD as the older release left it (v1alpha1 served and stored).
	older, err := crds.Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if sv, _, _ := unstructured.NestedStringSlice(older.Object, "status", "storedVersions"); !slices.Equal(sv, []string{"v1alpha1"}) {
		b.Fatalf("the member's CRD has stored versions %v; want the older release's [v1alpha1]", sv)
	}
	entries := []snapshot.Entry{{Section: snapshot.SectionCRD, Object: older}}

	// newer makes v1beta1 (the same schema) the storage version, as the newer release did.
	newer := func() {
		cur, err := crds.Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		versions, _, _ := unstructured.NestedSlice(cur.Object, "spec", "versions")
		v1a := versions[0].(map[string]any)
		v1b := (&unstructured.Unstructured{Object: v1a}).DeepCopy().Object
		v1a["storage"] = false
		v1b["name"], v1b["storage"] = "v1beta1", true
		_ = unstructured.SetNestedSlice(cur.Object, []any{v1a, v1b}, "spec", "versions")
		if _, err := crds.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			cur, err := crds.Get(ctx, crdName, metav1.GetOptions{})
			sv, _, _ := unstructured.NestedStringSlice(cur.Object, "status", "storedVersions")
			return err == nil && len(sv) == 2, nil
		})
		if err != nil {
			b.Fatalf("v1beta1 did not become a stored version: %v", err)
		}
	}
	// migrateOnce restores the snapshot's CRD, which migrates every MySQLCluster.
	migrateOnce := func(n int) (heapPeaks, time.Duration) {
		newer()
		var d time.Duration
		heap := peakHeap(func() {
			start := time.Now()
			_, err := restore.Run(ctx, cl, restore.Options{
				Header: snapshot.Header{Operator: "mysql-operator"}, Entries: snapshot.RawEntriesOf(entries), StopAfter: restore.StepCRDs,
			})
			if !errors.Is(err, restore.ErrStopped) {
				b.Fatalf("the restore of the CRD: %v", err)
			}
			d = time.Since(start)
		})
		cur, err := crds.Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if sv, _, _ := unstructured.NestedStringSlice(cur.Object, "status", "storedVersions"); !slices.Equal(sv, []string{"v1alpha1"}) {
			b.Fatalf("after the migration of %d objects the stored versions are %v", n, sv)
		}
		return heap, d
	}
	add := func(offset, count int) {
		start := time.Now()
		err := testfixture.Populate(ctx, env.Members[0].RESTConfig(), testfixture.Options{
			Namespaces: benchNamespaces, Count: count, Offset: offset, PayloadBytes: 700, Parallelism: 32,
		})
		if err != nil {
			b.Fatal(err)
		}
		fmt.Printf("setup: %d MySQLClusters (~1 KiB each, %d in all) created in %s\n", count, offset+count, time.Since(start).Round(time.Millisecond))
	}
	type result struct {
		n     int
		heap  []heapPeaks
		times []time.Duration
	}
	var results []result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		results = nil
		have := 0
		for _, c := range []struct{ n, runs int }{{2000, 3}, {20000, 1}} {
			b.StopTimer()
			if have < c.n {
				add(have, c.n-have)
				have = c.n
			}
			b.StartTimer()
			res := result{n: c.n}
			for range c.runs {
				h, d := migrateOnce(c.n)
				res.heap, res.times = append(res.heap, h), append(res.times, d)
			}
			results = append(results, res)
		}
	}
	b.StopTimer()

	// Baseline, same run: every live object of the kind decoded and held, as the migration
	// read them before it paged (snapshot.EachObject, 500 a page, into a map).
	var baseRuns []heapPeaks
	for range 2 {
		baseRuns = append(baseRuns, peakHeap(func() {
			held := map[string]*unstructured.Unstructured{}
			err := snapshot.EachObject(ctx, cl.Lists, testfixture.MySQLGVR, 500, func(u *unstructured.Unstructured) error {
				held[u.GetNamespace()+"/"+u.GetName()] = u
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			if len(held) != 20000 {
				b.Fatalf("the baseline read %d objects, want 20000", len(held))
			}
			runtime.KeepAlive(held)
		}))
	}
	base := spreadOf(baseRuns, func(h heapPeaks) uint64 { return h.live })

	fmt.Printf("migration heap: the storage version of MySQLClusters switched back to v1alpha1 and every object rewritten at it (restore's CRDs step), working set %d KiB; peak live heap above the heap before, median of the runs [lowest-highest]\n",
		restore.DefaultWorkingSet>>10)
	for _, r := range results {
		live := spreadOf(r.heap, func(h heapPeaks) uint64 { return h.live })
		typical := spreadOf(r.heap, func(h heapPeaks) uint64 { return h.liveMedian })
		fmt.Printf("  %5d objects: peak live heap %s, typical %s; %d runs, %s each (median)\n", r.n, live, typical, len(r.heap), median(r.times).Round(time.Millisecond))
	}
	small := spreadOf(results[0].heap, func(h heapPeaks) uint64 { return h.live })
	large := spreadOf(results[1].heap, func(h heapPeaks) uint64 { return h.live })
	smallTypical := spreadOf(results[0].heap, func(h heapPeaks) uint64 { return h.liveMedian })
	largeTypical := spreadOf(results[1].heap, func(h heapPeaks) uint64 { return h.liveMedian })
	fmt.Printf("  20,000 vs 2,000 objects: ratio %.2f of the peaks, %.2f of the typical heaps (flat: about 1; holding every object: about 10)\n",
		float64(large.median)/float64(small.median), float64(largeTypical.median)/float64(smallTypical.median))
	fmt.Printf("  baseline: every live object decoded and held, as the migration held them before it paged (20,000): peak live heap %s; ratio %.3f\n",
		base, float64(large.median)/float64(base.median))
	b.ReportMetric(mb(large.median), "peak-live-MiB-20k")
	b.ReportMetric(mb(small.median), "peak-live-MiB-2k")
	b.ReportMetric(mb(base.median), "baseline-MiB-20k")
}
