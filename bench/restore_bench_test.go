//go:build !unit

package bench

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// changeAll is the baseline: a raw parallel update (16 workers) of every CR (spec) and every
// owned object (data or labels), from one LIST per kind. It returns how many objects it
// updated.
func changeAll(ctx context.Context, b *testing.B, round int) int {
	cfg := env.Members[0].RESTConfig()
	cfg.QPS = -1 // no client-side rate limiter, as restore.Run: the server sets the pace
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	type job struct {
		gvr schema.GroupVersionResource
		u   *unstructured.Unstructured
	}
	var jobs []job
	for _, gvr := range listedKinds {
		cont := ""
		for {
			l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
			if err != nil {
				b.Fatal(err)
			}
			for i := range l.Items {
				u := &l.Items[i]
				if gvr != testfixture.MySQLGVR && len(u.GetOwnerReferences()) == 0 {
					continue
				}
				mark := fmt.Sprintf("changed-%d", round)
				switch gvr.Resource {
				case "mysqlclusters":
					_ = unstructured.SetNestedField(u.Object, mark, "spec", "version")
				case "configmaps":
					_ = unstructured.SetNestedField(u.Object, mark, "data", "my.cnf")
				case "secrets":
					_ = unstructured.SetNestedField(u.Object, "Y2hhbmdlZA==", "data", "password")
					_ = unstructured.SetNestedField(u.Object, mark, "metadata", "labels", "changed")
				default:
					_ = unstructured.SetNestedField(u.Object, mark, "metadata", "labels", "changed")
				}
				jobs = append(jobs, job{gvr: gvr, u: u})
			}
			if cont = l.GetContinue(); cont == "" {
				break
			}
		}
	}
	ch := make(chan job)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if _, err := dyn.Resource(j.gvr).Namespace(j.u.GetNamespace()).Update(ctx, j.u, metav1.UpdateOptions{}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return len(jobs)
}

// BenchmarkRestore measures a full-replace restore of 10,000 changed CRs plus 2,000 changed
// owned objects against the raw parallel update of the same objects, in the same run.
func BenchmarkRestore(b *testing.B) {
	ctx := context.Background()
	emptyMember(b)
	populate(b, 0, 5000, 250)
	populate(b, 5000, 5000, 250)
	var buf bytes.Buffer
	if _, err := snapshot.Capture(ctx, testenv.Member(b, env.Members[0]), snapshot.Options{
		Operator: "mysql-operator", Namespace: "mysql-system", Manifests: []*unstructured.Unstructured{testfixture.MySQLCRD()},
	}, &buf); err != nil {
		b.Fatal(err)
	}
	hdr, entries, err := snapshot.ReadAll(&buf)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		var rawRates, restoreRates []float64
		var restored int
		for round := 0; round < 2; round++ {
			start := time.Now()
			n := changeAll(ctx, b, i*10+round)
			rawRates = append(rawRates, float64(n)/time.Since(start).Seconds())

			start = time.Now()
			rep, err := restore.Run(ctx, testenv.Member(b, env.Members[0]), restore.Options{Header: hdr, Entries: snapshot.RawEntriesOf(entries), Parallelism: 16})
			if err != nil {
				b.Fatal(err)
			}
			d := time.Since(start)
			t := rep.Totals()
			restored = t.Restored + t.Created + t.Recreated
			if restored < n {
				b.Fatalf("restore changed %d objects, %d were changed", restored, n)
			}
			restoreRates = append(restoreRates, float64(restored)/d.Seconds())
		}
		raw, rest := avg(rawRates), avg(restoreRates)
		fmt.Printf("restore: %d changed objects (10,000 CRs + 2,000 owned) restored by full replacement\n", restored)
		fmt.Printf("  restore            %6.0f objects/s  (target >= 500/s)\n", rest)
		fmt.Printf("  baseline raw update %6.0f objects/s  (16 parallel writers, same objects)\n", raw)
		fmt.Printf("  ratio restore/raw  %.2fx (target >= 0.70x)\n", rest/raw)
		b.ReportMetric(rest, "restore-objects/s")
		b.ReportMetric(raw, "raw-update-objects/s")
		b.ReportMetric(rest/raw, "restore/raw")
	}
}

func avg(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
