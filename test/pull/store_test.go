//go:build !unit

package pull

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
	"github.com/rewind-dev/rewind/internal/teststores"
)

// TestPullMembersSnapshotIntoTheSnapshotStore: a Rollout with spec.snapshotStore, an S3
// bucket of a real S3 server, over the mixed fleet. The pull members' agents write their
// snapshots into the bucket themselves (the hub copies the store and its credentials Secret
// into each member's namespace, never a payload): every payload and its metadata are objects
// of the bucket, no payload is a Secret of the hub. The upgrade's snapshot of member3 meets a
// store that answers 503 or resets the connection for 15 s, and is taken all the same. A
// person's rollback and a RollbackAll then restore every member from the bucket, each
// compared with its snapshot object by object.
func TestPullMembersSnapshotIntoTheSnapshotStore(t *testing.T) {
	const bucket, prefix, storeName = "snapshots", "fleet", "s3"
	joined(t)
	srv := teststores.StartS3(t)
	srv.CreateBucket(t, bucket)
	faulty := teststores.StartFaultyHTTP(t, srv.Endpoint)
	f := suite.New(t, allAtOnce())
	c := suite.Hub(t)
	ctx := t.Context()
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: "s3-creds"}, Data: map[string][]byte{
		snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(srv.SecretKey),
	}}
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: storeName}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderS3, Bucket: bucket, Prefix: prefix, Region: srv.Region, Endpoint: faulty.URL,
		CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: creds.Name},
		ProbeInterval:        &metav1.Duration{Duration: time.Hour},
	}}
	for _, o := range []client.Object{creds, st} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) { s.SnapshotStore = storeName })
	for _, name := range pullMembers {
		bind(t, name, f.NS)
		startAgent(t, name)
	}
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	f.Populate()

	// The upgrade: member3's snapshot meets an outage of the store.
	faulty.FailFor("member3", 15*time.Second)
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 6*time.Minute)
	unavailable, reset := faulty.Counts()
	if unavailable == 0 {
		t.Fatal("the store never failed member3's snapshot: the fault proves nothing")
	}
	t.Logf("member3's snapshot met %d answers 503 and %d connections reset", unavailable, reset)
	upgrade := f.SnapshotsOf(ro.Status.Revision)
	assertInStore(t, f.NS, storeName, upgrade, srv, bucket, prefix)
	assertAll(t, f, "mysql-b", upgrade, false)
	for _, name := range pullMembers {
		ns := v1alpha1.MemberNamespace(name)
		cp := &v1alpha1.SnapshotStore{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: target.MemberSnapshotName(f.NS, storeName)}, cp); err != nil {
			t.Fatalf("the store's copy for %s: %v", name, err)
		}
		if cp.Labels[v1alpha1.LabelSourceNamespace] != f.NS || cp.Spec.Endpoint != faulty.URL || cp.Spec.CredentialsSecretRef == nil ||
			cp.Spec.CredentialsSecretRef.Name != target.MemberSnapshotName(f.NS, creds.Name) || !meta.IsStatusConditionTrue(cp.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("the store's copy for %s: %+v %+v", name, cp.ObjectMeta.Labels, cp.Spec)
		}
	}

	// A person's rollback, from the bucket, which is away (503s and resets) for 15 s from the
	// first read of a member's snapshot: longer than the cloud SDK's own tries (about 3 s).
	// Every member, push and pull, rides it out (before, a store's 503 after those tries was
	// taken as a snapshot that cannot be restored, and the rollback failed for good).
	faulty.FailFor("-member", 15*time.Second)
	u0, r0 := faulty.Counts()
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "pull members from the store")
	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 5*time.Minute)
	if u1, r1 := faulty.Counts(); u1+r1 == u0+r0 {
		t.Fatal("the store never failed the rollback's reads: the fault proves nothing")
	} else {
		t.Logf("the rollback's reads met %d answers 503 and %d connections reset", u1-u0, r1-r0)
	}
	assertAll(t, f, "mysql-a", upgrade, true)

	// A failed gate: RollbackAll restores every member from its snapshot of mysql-a, in the bucket.
	bad := failAndRollBackAll(t, f)
	snaps := f.SnapshotsOf(bad.Revision)
	assertInStore(t, f.NS, storeName, snaps, srv, bucket, prefix)
	assertAll(t, f, "mysql-a", snaps, true)

	// No payload was written to the hub: no payload Secret of this test's snapshots in the
	// fleet's namespace or the pull members'. (The pull members' namespaces are shared by the
	// package's tests: the others' snapshots are in hub Secrets there, named after their own
	// namespaces, NS.NAME.)
	for _, ns := range append([]string{f.NS}, v1alpha1.MemberNamespace("member3"), v1alpha1.MemberNamespace("member4")) {
		var secrets corev1.SecretList
		if err := c.List(ctx, &secrets, client.InNamespace(ns), client.HasLabels{payload.LabelPayload}); err != nil {
			t.Fatal(err)
		}
		var ours []string
		for _, s := range secrets.Items {
			if name := s.Annotations[payload.AnnotationPayloadName]; ns == f.NS || strings.HasPrefix(name, f.NS+".") {
				ours = append(ours, s.Name+" ("+name+")")
			}
		}
		if len(ours) != 0 {
			t.Errorf("%d snapshot payload Secrets of this test in hub namespace %s, want none (the store holds them): %v", len(ours), ns, ours)
		}
	}
}

// assertInStore checks that every snapshot of snaps (by cluster) records the store (its copy,
// for a pull member) and that its payload and its metadata are objects of the bucket.
func assertInStore(t *testing.T, ns, store string, snaps map[string]string, srv *teststores.S3, bucket, prefix string) {
	t.Helper()
	if len(snaps) != 4 {
		t.Fatalf("snapshots %v, want one per member", snaps)
	}
	keys := map[string]bool{}
	out, err := srv.Client().ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix + "/")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range out.Contents {
		keys[aws.ToString(o.Key)] = true
	}
	for cluster, name := range snaps {
		snapNS, want := ns, store
		if slices.Contains(pullMembers, cluster) {
			snapNS, want = v1alpha1.MemberNamespace(cluster), target.MemberSnapshotName(ns, store)
		}
		snap := &v1alpha1.Snapshot{}
		if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: snapNS, Name: name}, snap); err != nil {
			t.Fatalf("%s's snapshot %s: %v", cluster, name, err)
		}
		if snap.Status.Store != want || !strings.HasPrefix(snap.Status.Location, "s3://"+bucket+"/"+prefix) ||
			!meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
			t.Errorf("%s's snapshot %s/%s: store %q location %q, want store %q in s3://%s/%s, Ready", cluster, snapNS, name,
				snap.Status.Store, snap.Status.Location, want, bucket, prefix)
		}
		for _, k := range []string{prefix + "/" + name, prefix + "/" + name + ".snapshot.json"} {
			if !keys[k] {
				t.Errorf("%s's snapshot: the bucket lacks %s (it holds %d objects)", cluster, k, len(keys))
			}
		}
	}
}
