//go:build !unit

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/teststores"
)

// probe reconciles the store once and returns it with its status. It is probed again after
// the interval (1m) when Ready, after NotReadyReprobe when not.
func probe(t *testing.T, r *SnapshotStoreReconciler, st *v1alpha1.SnapshotStore) *v1alpha1.SnapshotStore {
	t.Helper()
	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)})
	if err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.SnapshotStore{}
	if err := r.Client.Get(t.Context(), client.ObjectKeyFromObject(st), got); err != nil {
		t.Fatal(err)
	}
	want := time.Minute
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		want = NotReadyReprobe
	}
	if res.RequeueAfter != want {
		t.Errorf("requeue after %s, want %s (Ready: %v)", res.RequeueAfter, want, meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady))
	}
	return got
}

func wantCondition(t *testing.T, st *v1alpha1.SnapshotStore, typ string, status metav1.ConditionStatus, reason, inMessage string) {
	t.Helper()
	c := meta.FindStatusCondition(st.Status.Conditions, typ)
	if c == nil || c.Status != status || c.Reason != reason || !strings.Contains(c.Message, inMessage) {
		t.Fatalf("%s condition %+v, want %s %s with %q in the message", typ, c, status, reason, inMessage)
	}
}

func TestSnapshotStoreProbe(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	kms := teststores.StartKMS(t)
	srv.CreateBucket(t, "snapshots")
	key := kms.CreateKey(t, "probe")
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := &SnapshotStoreReconciler{Client: c, Now: func() time.Time { return now }, ProbeTimeout: 10 * time.Second}
	creds := func(name, secret string) {
		if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{
			snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(secret)}}); err != nil {
			t.Fatal(err)
		}
	}
	creds("good", srv.SecretKey)
	creds("wrong", "not-the-secret")
	store := func(name, bucket, credsName string, keyRef *v1alpha1.SnapshotKeyRef) *v1alpha1.SnapshotStore {
		st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
			Provider: v1alpha1.StoreProviderS3, Bucket: bucket, Endpoint: srv.Endpoint, Region: srv.Region, Prefix: "p",
			CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: credsName}, KeyRef: keyRef,
			ProbeInterval: &metav1.Duration{Duration: time.Minute},
		}}
		if err := c.Create(t.Context(), st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	ok := probe(t, r, store("ok", "snapshots", "good", &v1alpha1.SnapshotKeyRef{KMS: key}))
	wantCondition(t, ok, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "s3://snapshots/p")
	wantCondition(t, ok, v1alpha1.ConditionWritable, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "")
	wantCondition(t, ok, v1alpha1.ConditionKeyAvailable, metav1.ConditionTrue, v1alpha1.ReasonKeyAvailable, "awskms://alias/probe")
	if ok.Status.KeyID == "" || ok.Status.LastProbeTime == nil || !ok.Status.LastProbeTime.Time.Equal(now) || ok.Status.ObservedGeneration != ok.Generation {
		t.Fatalf("status %+v", ok.Status)
	}
	// The probe left nothing in the bucket.
	entries, err := teststoresList(srv, "snapshots")
	if err != nil || len(entries) != 0 {
		t.Fatalf("the bucket holds %v after probes (%v)", entries, err)
	}

	wantCondition(t, probe(t, r, store("no-bucket", "missing", "good", nil)), v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonBucketNotFound, "")
	wantCondition(t, probe(t, r, store("denied", "snapshots", "wrong", nil)), v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonAccessDenied, "")
	wantCondition(t, probe(t, r, store("no-creds", "snapshots", "absent", nil)), v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonCredentialsNotFound, "credentials Secret "+ns+"/absent")

	// The key disabled: nothing is probed again before the interval is over (a Snapshot
	// deletion or a restart wakes the reconciler too)...
	kms.DisableKey(t, "probe")
	now = now.Add(40 * time.Second)
	res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ok)})
	if err != nil || res.RequeueAfter != 20*time.Second {
		t.Fatalf("a reconcile 40s after a probe: requeue after %s, %v; want the 20s left of the interval", res.RequeueAfter, err)
	}
	early := &v1alpha1.SnapshotStore{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(ok), early); err != nil {
		t.Fatal(err)
	}
	wantCondition(t, early, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "")
	// ... then the store is not Ready, naming the key.
	now = now.Add(20 * time.Second)
	got := probe(t, r, ok)
	wantCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonKeyUnavailable, "awskms://alias/probe")
	wantCondition(t, got, v1alpha1.ConditionWritable, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "")

	// The server down.
	srv.Stop()
	now = now.Add(time.Minute)
	wantCondition(t, probe(t, r, ok), v1alpha1.ConditionWritable, metav1.ConditionFalse, v1alpha1.ReasonStoreUnreachable, "")
}

// A store that meets a blip (503s and resets for several seconds, longer than the S3 SDK's
// own three tries) is Ready all the same: the probe is tried again in place until its timeout.
// A store away for longer is not Ready, and is probed again after NotReadyReprobe, not after its interval: once
// it is back, it is Ready within that, and so are the snapshots that wait for it. Before, one
// probe that met a blip kept the store not Ready, and every cluster's snapshot waiting, for the
// whole interval.
func TestSnapshotStoreRidesOutABlip(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	srv.CreateBucket(t, "snapshots")
	faulty := teststores.StartFaultyHTTP(t, srv.Endpoint)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := &SnapshotStoreReconciler{Client: c, Now: func() time.Time { return now }, ProbeTimeout: 15 * time.Second}
	if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, Data: map[string][]byte{
		snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(srv.SecretKey)}}); err != nil {
		t.Fatal(err)
	}
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "s3", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderS3, Bucket: "snapshots", Endpoint: faulty.URL, Region: srv.Region,
		CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "creds"}, ProbeInterval: &metav1.Duration{Duration: time.Hour},
	}}
	if err := c.Create(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	reconcile := func() (ctrl.Result, *v1alpha1.SnapshotStore) {
		t.Helper()
		res, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)})
		if err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.SnapshotStore{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(st), got); err != nil {
			t.Fatal(err)
		}
		return res, got
	}

	faulty.FailFor("", 7*time.Second)
	res, got := reconcile()
	if unavailable, reset := faulty.Counts(); unavailable+reset == 0 {
		t.Fatal("the probe met no fault: the test proves nothing")
	}
	wantCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "")
	if res.RequeueAfter != time.Hour {
		t.Errorf("a Ready store is probed again after %s, want its interval 1h", res.RequeueAfter)
	}

	// Away for longer than the probe's timeout: not Ready, probed again soon.
	now = now.Add(time.Hour)
	faulty.FailFor("", time.Hour)
	res, got = reconcile()
	if meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("a store away for longer than the probe's timeout is Ready: %+v", got.Status.Conditions)
	}
	if res.RequeueAfter != NotReadyReprobe {
		t.Fatalf("a store that is not Ready is probed again after %s, want %s", res.RequeueAfter, NotReadyReprobe)
	}
	// Woken earlier (a Snapshot deleted), it keeps its finding until then.
	now = now.Add(10 * time.Second)
	if res, _ = reconcile(); res.RequeueAfter != NotReadyReprobe-10*time.Second {
		t.Fatalf("a reconcile 10s after a failed probe: requeue after %s, want %s", res.RequeueAfter, NotReadyReprobe-10*time.Second)
	}

	// Back: Ready at the next probe.
	faulty.Heal()
	now = now.Add(NotReadyReprobe)
	res, got = reconcile()
	wantCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonProbeSucceeded, "")
	if res.RequeueAfter != time.Hour {
		t.Errorf("Ready again: probed again after %s, want its interval 1h", res.RequeueAfter)
	}
}

func teststoresList(srv *teststores.S3, bucket string) ([]string, error) {
	out, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys, nil
}

// A store is not deleted while Snapshots live in it.
func TestSnapshotStoreKeptWhileSnapshotsLiveInIt(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	r := &SnapshotStoreReconciler{Client: c}
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "folder", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderFolder, Path: t.TempDir()}}
	if err := c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns}, Spec: v1alpha1.SnapshotSpec{Cluster: "member1", Operator: "mysql-operator"}}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	base := snap.DeepCopy()
	snap.Status.Store, snap.Status.Location = "folder", "dir:///x#kept"
	if err := c.Status().Patch(ctx, snap, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.SnapshotStore{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatalf("the store went while a Snapshot lives in it: %v", err)
	}
	wantCondition(t, got, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonInUse, "1 Snapshots are stored in it (kept)")
	if err := c.Delete(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, req.NamespacedName, got); !apierrors.IsNotFound(err) {
		t.Fatalf("the store must go once no Snapshot lives in it: %v", err)
	}
}
