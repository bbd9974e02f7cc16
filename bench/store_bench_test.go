//go:build !unit

package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/internal/teststores"
)

// BenchmarkSnapshotStores takes and restores a snapshot of 10,000 CRs (~1 KiB) + 2,000 owned
// objects through an S3 SnapshotStore (versitygw, posix backend, on this machine) and through
// the hub-Secret store, in the same run, and compares the S3 store with a raw upload
// (PutObject) and a raw download (GetObject) of the same stored bytes. Captures: median of 3.
func BenchmarkSnapshotStores(b *testing.B) {
	ctx := context.Background()
	emptyMember(b)
	populate(b, 0, 5000, 250)
	populate(b, 5000, 5000, 250)

	hubCfg := env.Hub.RESTConfig()
	c := testenv.HubClient(b, hubCfg)
	ns := testenv.Namespace(b, hubCfg)
	srv := teststores.StartS3(b)
	srv.CreateBucket(b, "bench")
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: ns}, Data: map[string][]byte{
		snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(srv.SecretKey),
	}}); err != nil {
		b.Fatal(err)
	}
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderS3, Bucket: "bench", Prefix: "snapshots", Endpoint: srv.Endpoint, Region: srv.Region,
		CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "s3-creds"},
	}}
	if err := c.Create(ctx, st); err != nil {
		b.Fatal(err)
	}
	s3store, err := snapstore.FromObject(ctx, c, st)
	if err != nil {
		b.Fatal(err)
	}
	hub := &snapshot.Hub{Client: c}
	cl := testenv.Member(b, env.Members[0])
	opts := snapshot.Options{Operator: "mysql-operator", Namespace: "mysql-system", Manifests: []*unstructured.Unstructured{testfixture.MySQLCRD()}}

	take := func(name string, store *snapstore.Store) (*v1alpha1.Snapshot, time.Duration) {
		start := time.Now()
		snap, err := hub.Take(ctx, cl, snapshot.Request{Name: name, Namespace: ns, Cluster: "member1", Retention: -1, Capture: opts, Store: store})
		if err != nil {
			b.Fatal(err)
		}
		return snap, time.Since(start)
	}
	captureOnly := func() (time.Duration, []byte) {
		kek, err := payload.GenerateLocalKEK()
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		start := time.Now()
		w, err := payload.NewWriter(ctx, &buf, kek)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := snapshot.Capture(ctx, cl, opts, w); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start), buf.Bytes()
	}
	restoreFrom := func(snap *v1alpha1.Snapshot, round int) (load, total time.Duration, objects int) {
		changed := changeAll(ctx, b, 100+round)
		start := time.Now()
		hdr, entries, err := hub.Load(ctx, snap)
		if err != nil {
			b.Fatal(err)
		}
		load = time.Since(start)
		rep, err := restore.Run(ctx, cl, restore.Options{Header: hdr, Entries: snapshot.RawEntriesOf(entries), Parallelism: 16})
		if err != nil {
			b.Fatal(err)
		}
		total = time.Since(start)
		t := rep.Totals()
		objects = t.Restored + t.Created + t.Recreated
		if objects < changed {
			b.Fatalf("restore changed %d objects, %d were changed", objects, changed)
		}
		return load, total, objects
	}

	for i := 0; i < b.N; i++ {
		var tS3, tSecrets, tCapture, tPut, tGet []time.Duration
		var snapS3, snapSecrets *v1alpha1.Snapshot
		for r := 0; r < 3; r++ {
			var d time.Duration
			snapS3, d = take(fmt.Sprintf("s3-%d-%d", i, r), s3store)
			tS3 = append(tS3, d)
			snapSecrets, d = take(fmt.Sprintf("secrets-%d-%d", i, r), nil)
			tSecrets = append(tSecrets, d)
			d, stored := captureOnly()
			tCapture = append(tCapture, d)
			// The raw baselines: the same number of stored bytes up to and down from the bucket.
			key := fmt.Sprintf("raw/%d-%d", i, r)
			start := time.Now()
			if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String(key), Body: bytes.NewReader(stored)}); err != nil {
				b.Fatal(err)
			}
			tPut = append(tPut, time.Since(start))
			start = time.Now()
			out, err := srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bench"), Key: aws.String(key)})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, out.Body); err != nil {
				b.Fatal(err)
			}
			out.Body.Close()
			tGet = append(tGet, time.Since(start))
		}
		mS3, mSecrets, mCapture, mPut, mGet := median(tS3), median(tSecrets), median(tCapture), median(tPut), median(tGet)
		s := snapS3.Status
		objects := int(s.Counts.CRDs + s.Counts.CustomResources + s.Counts.Associated)
		fmt.Printf("snapshot stores: %d objects, %.1f MiB canonical, %.2f MiB stored (gzip + AES-256-GCM); medians of 3\n", objects, mb(uint64(s.Bytes)), mb(uint64(s.StoredBytes)))
		fmt.Printf("  take into S3 (versitygw)        %7s  (%.0f objects/s)\n", mS3.Round(time.Millisecond), float64(objects)/mS3.Seconds())
		fmt.Printf("  take into hub Secrets           %7s  (%.0f objects/s)\n", mSecrets.Round(time.Millisecond), float64(objects)/mSecrets.Seconds())
		fmt.Printf("  baseline: capture to memory     %7s, then raw PutObject of the same bytes %s\n", mCapture.Round(time.Millisecond), mPut.Round(time.Millisecond))
		fmt.Printf("  ratio take S3 / (capture + raw upload)  %.2fx\n", mS3.Seconds()/(mCapture+mPut).Seconds())
		fmt.Printf("  ratio take S3 / take hub Secrets        %.2fx\n", mS3.Seconds()/mSecrets.Seconds())

		loadS3, totalS3, n := restoreFrom(snapS3, i*10)
		loadSecrets, totalSecrets, _ := restoreFrom(snapSecrets, i*10+1)
		fmt.Printf("restore of %d changed objects (Load: download, decrypt, verify, decode; then full replacement)\n", n)
		fmt.Printf("  from S3            load %7s, total %7s (%.0f objects/s)\n", loadS3.Round(time.Millisecond), totalS3.Round(time.Millisecond), float64(n)/totalS3.Seconds())
		fmt.Printf("  from hub Secrets   load %7s, total %7s (%.0f objects/s)\n", loadSecrets.Round(time.Millisecond), totalSecrets.Round(time.Millisecond), float64(n)/totalSecrets.Seconds())
		fmt.Printf("  baseline: raw GetObject of the same bytes %s\n", mGet.Round(time.Millisecond))
		fmt.Printf("  ratio restore S3 / restore hub Secrets  %.2fx\n", totalS3.Seconds()/totalSecrets.Seconds())
		b.ReportMetric(mS3.Seconds(), "take-s3-s")
		b.ReportMetric(mSecrets.Seconds(), "take-secrets-s")
		b.ReportMetric(mS3.Seconds()/(mCapture+mPut).Seconds(), "take-s3/capture+put")
		b.ReportMetric(mS3.Seconds()/mSecrets.Seconds(), "take-s3/secrets")
		b.ReportMetric(totalS3.Seconds(), "restore-s3-s")
		b.ReportMetric(totalSecrets.Seconds(), "restore-secrets-s")
		b.ReportMetric(totalS3.Seconds()/totalSecrets.Seconds(), "restore-s3/secrets")
	}
}
