//go:build !unit

package snapshot_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/teststores"
)

// s3Store creates, in ns, the credentials Secret of srv and a SnapshotStore on bucket with
// keyRef, and returns it.
func s3Store(t *testing.T, c client.Client, ns, name string, srv *teststores.S3, endpoint, bucket string, keyRef *v1alpha1.SnapshotKeyRef) *v1alpha1.SnapshotStore {
	t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-creds", Namespace: ns}, Data: map[string][]byte{
		snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(srv.SecretKey),
	}}
	if err := c.Create(t.Context(), sec); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	st := &v1alpha1.SnapshotStore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.SnapshotStoreSpec{
			Provider: v1alpha1.StoreProviderS3, Bucket: bucket, Prefix: "rewind/" + ns, Region: srv.Region, Endpoint: endpoint,
			CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: sec.Name}, KeyRef: keyRef,
		},
	}
	if err := c.Create(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	return st
}

func resolve(t *testing.T, c client.Client, st *v1alpha1.SnapshotStore) *snapstore.Store {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(st), st); err != nil {
		t.Fatal(err)
	}
	s, err := snapstore.FromObject(t.Context(), c, st)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func takeInto(t *testing.T, hub *snapshot.Hub, s *snapstore.Store, ns, name string) (*v1alpha1.Snapshot, error) {
	return hub.Take(t.Context(), testenv.Member(t, env.Members[0]), snapshot.Request{
		Name: name, Namespace: ns, Cluster: "member1", Reason: "test", Retention: -1, Capture: captureOpts(), Store: s,
	})
}

// objectKey reads the stored object of a snapshot straight from the S3 server.
func getObject(t *testing.T, srv *teststores.S3, bucket, key string) ([]byte, error) {
	t.Helper()
	out, err := srv.Client().GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

func TestS3StoreWithKMSKeyAndRotation(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	kms := teststores.StartKMS(t)
	srv.CreateBucket(t, "snapshots")
	key1 := kms.CreateKey(t, "rewind-1")
	st := s3Store(t, c, ns, "s3", srv, srv.Endpoint, "snapshots", &v1alpha1.SnapshotKeyRef{KMS: key1})
	hub := &snapshot.Hub{Client: c}

	first, err := takeInto(t, hub, resolve(t, c, st), ns, "first")
	if err != nil {
		t.Fatal(err)
	}
	if first.Status.Store != "s3" || first.Status.KeyRef == nil || first.Status.KeyRef.KMS != key1 || !strings.HasPrefix(first.Status.KeyID, "keeper-") {
		t.Fatalf("the Snapshot records store %q, keyRef %+v, key ID %q", first.Status.Store, first.Status.KeyRef, first.Status.KeyID)
	}
	if !strings.HasPrefix(first.Status.Location, "s3://snapshots/rewind/"+ns) {
		t.Fatalf("location %s", first.Status.Location)
	}
	// The payload is in the bucket under the prefix, and records the key that wrapped it.
	obj, err := getObject(t, srv, "snapshots", "rewind/"+ns+"/first")
	if err != nil {
		t.Fatalf("the payload is not in the bucket: %v", err)
	}
	if int64(len(obj)) != first.Status.StoredBytes {
		t.Fatalf("the bucket holds %d bytes, the Snapshot says %d", len(obj), first.Status.StoredBytes)
	}
	if id, err := payload.KeyIDOf(bytes.NewReader(obj)); err != nil || id != first.Status.KeyID {
		t.Fatalf("the payload records key %q (%v), the Snapshot %q", id, err, first.Status.KeyID)
	}
	// Its metadata is next to it.
	if _, err := getObject(t, srv, "snapshots", "rewind/"+ns+"/first.snapshot.json"); err != nil {
		t.Fatalf("the metadata is not in the bucket: %v", err)
	}
	if err := hub.Verify(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	if _, entries, err := hub.Load(t.Context(), first); err != nil || len(entries) != 1001 {
		t.Fatalf("load: %d entries, %v", len(entries), err)
	}

	// Rotation: the store's key changes; new snapshots use the new key, old ones stay readable.
	key2 := kms.CreateKey(t, "rewind-2")
	st.Spec.KeyRef = &v1alpha1.SnapshotKeyRef{KMS: key2}
	if err := c.Update(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	second, err := takeInto(t, hub, resolve(t, c, st), ns, "second")
	if err != nil {
		t.Fatal(err)
	}
	if second.Status.KeyID == first.Status.KeyID || second.Status.KeyRef.KMS != key2 {
		t.Fatalf("after rotation the new snapshot has key %s (%+v), the old one %s", second.Status.KeyID, second.Status.KeyRef, first.Status.KeyID)
	}
	fresh := &snapshot.Hub{Client: c} // a new process reads both
	for _, s := range []*v1alpha1.Snapshot{first, second} {
		if err := fresh.Verify(t.Context(), s); err != nil {
			t.Fatalf("after rotation, %s: %v", s.Name, err)
		}
	}

	// The old key can no longer be used: verify fails naming it; the new one still works.
	kms.DisableKey(t, "rewind-1")
	err = fresh.Verify(t.Context(), first)
	if err == nil || !strings.Contains(err.Error(), "awskms://alias/rewind-1") {
		t.Fatalf("verify with the old key disabled: %v, want an error naming awskms://alias/rewind-1", err)
	}
	if _, _, err := fresh.Load(t.Context(), first); err == nil || !strings.Contains(err.Error(), "awskms://alias/rewind-1") {
		t.Fatalf("load (what restore reads) with the old key disabled: %v, want an error naming the key", err)
	}
	got := &v1alpha1.Snapshot{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(first), got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionVerified); cond == nil || cond.Status != metav1.ConditionFalse ||
		cond.Reason != v1alpha1.ReasonPayloadUnavailable || !strings.Contains(cond.Message, "rewind-1") {
		t.Fatalf("Verified condition %+v", cond)
	}
	if err := fresh.Verify(t.Context(), second); err != nil {
		t.Fatal(err)
	}
	// KMS down: the message still names the key.
	kms.Stop()
	if err := fresh.Verify(t.Context(), second); err == nil || !strings.Contains(err.Error(), "awskms://alias/rewind-2") {
		t.Fatalf("verify with the KMS stopped: %v, want an error naming the key", err)
	}
}

func randomKey(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(base64.StdEncoding.EncodeToString(b))
}

func TestSecretKeyRotationInAFolderStore(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	for _, n := range []string{"key-a", "key-b"} {
		if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}, Data: map[string][]byte{"key": randomKey(t)}}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "folder", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderFolder, Path: dir, KeyRef: &v1alpha1.SnapshotKeyRef{SecretRef: &v1alpha1.SecretKeyReference{Name: "key-a"}},
	}}
	if err := c.Create(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	hub := &snapshot.Hub{Client: c}
	a, err := takeInto(t, hub, resolve(t, c, st), ns, "under-a")
	if err != nil {
		t.Fatal(err)
	}
	st.Spec.KeyRef.SecretRef.Name = "key-b"
	if err := c.Update(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	b, err := takeInto(t, hub, resolve(t, c, st), ns, "under-b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Status.KeyID == b.Status.KeyID || a.Status.KeyRef.SecretRef.Name != "key-a" {
		t.Fatalf("key IDs %s and %s, first keyRef %+v", a.Status.KeyID, b.Status.KeyID, a.Status.KeyRef)
	}
	for _, s := range []*v1alpha1.Snapshot{a, b} {
		if err := hub.Verify(t.Context(), s); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if _, err := os.Stat(path.Join(dir, s.Name)); err != nil {
			t.Fatalf("payload file: %v", err)
		}
	}
	if err := c.Delete(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "key-a", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	err = hub.Verify(t.Context(), a)
	if err == nil || !strings.Contains(err.Error(), `Secret `+ns+`/key-a key "key"`) {
		t.Fatalf("verify after the old key's Secret was deleted: %v, want an error naming it", err)
	}
	if err := hub.Verify(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

func TestS3ServerStoppedMidUploadLeavesNoReadySnapshot(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	srv.CreateBucket(t, "snapshots")
	proxy := teststores.StartProxy(t, srv.Addr())
	st := s3Store(t, c, ns, "s3", srv, "http://"+proxy.Addr, "snapshots", nil)
	hub := &snapshot.Hub{Client: c}
	s := resolve(t, c, st)

	// The server dies (SIGKILL) once 32 KiB of the upload went through.
	proxy.AfterBytes(32<<10, srv.Stop)
	snap, err := takeInto(t, hub, s, ns, "interrupted")
	if err == nil {
		t.Fatalf("Take succeeded although the server was stopped during the upload: %+v", snap.Status)
	}
	got := &v1alpha1.Snapshot{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "interrupted"}, got); err == nil {
		if meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) || got.Status.Location != "" {
			t.Fatalf("a Snapshot claims a payload the store does not have: %+v", got.Status)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	srv.Start(t)
	if _, err := getObject(t, srv, "snapshots", "rewind/"+ns+"/interrupted"); err == nil {
		t.Fatal("a partial payload is in the bucket")
	}
	// The step is retried: the same Take now completes.
	snap, err = takeInto(t, hub, s, ns, "interrupted")
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Verify(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
}

// A store's answer cut mid-payload (its connection closed after half the body, not reset) is a
// fault of the way to the store: reading the snapshot fails with a transient error, not
// ErrTruncated; Verify does not call it a checksum mismatch; once the way is whole, the same
// reads succeed. Before, the cut read as a truncated payload, and a restore failed for good.
func TestPayloadCutMidAnswerIsAFault(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	srv.CreateBucket(t, "snapshots")
	faulty := teststores.StartFaultyHTTP(t, srv.Endpoint)
	st := s3Store(t, c, ns, "s3", srv, faulty.URL, "snapshots", nil)
	hub := &snapshot.Hub{Client: c}
	snap, err := takeInto(t, hub, resolve(t, c, st), ns, "cut")
	if err != nil {
		t.Fatal(err)
	}
	drain := func() error {
		_, raw, closer, err := hub.StreamRaw(t.Context(), snap)
		if err != nil {
			return err
		}
		defer closer.Close()
		for _, e := range raw {
			if e != nil {
				return e
			}
		}
		return nil
	}

	// Cut in the payload's header (its first bytes), then in its first frame.
	for _, keep := range []int64{10, 300} {
		faulty.CutBodiesFor("/"+ns+"/cut", keep, time.Hour)
		cuts := faulty.Cuts()
		err = drain()
		if faulty.Cuts() == cuts {
			t.Fatalf("no answer was cut after %d bytes: the test proves nothing", keep)
		}
		if err == nil || errors.Is(err, payload.ErrTruncated) || !fault.IsTransient(err) {
			t.Fatalf("streaming a payload whose answer was cut after %d bytes: %v; want a fault (transient, not ErrTruncated)", keep, err)
		}
		if err := hub.Verify(t.Context(), snap); err == nil || errors.Is(err, payload.ErrTruncated) {
			t.Fatalf("verifying a payload whose answer was cut after %d bytes: %v; want a fault", keep, err)
		}
		got := &v1alpha1.Snapshot{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(snap), got); err != nil {
			t.Fatal(err)
		}
		if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionVerified); cond == nil || cond.Reason != v1alpha1.ReasonPayloadUnavailable {
			t.Fatalf("Verified condition after an answer cut after %d bytes %+v, want reason %s", keep, cond, v1alpha1.ReasonPayloadUnavailable)
		}
	}

	faulty.Heal()
	if err := drain(); err != nil {
		t.Fatalf("streaming once the way is whole: %v", err)
	}
	if err := hub.Verify(t.Context(), snap); err != nil {
		t.Fatalf("verifying once the way is whole: %v", err)
	}
}

func TestCorruptedPayloadInBucketIsRefused(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	srv := teststores.StartS3(t)
	srv.CreateBucket(t, "snapshots")
	st := s3Store(t, c, ns, "s3", srv, srv.Endpoint, "snapshots", nil)
	hub := &snapshot.Hub{Client: c}
	snap, err := takeInto(t, hub, resolve(t, c, st), ns, "victim")
	if err != nil {
		t.Fatal(err)
	}
	file := srv.ObjectPath("snapshots", "rewind/"+ns+"/victim")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = hub.Verify(t.Context(), snap)
	if !errors.Is(err, payload.ErrCorrupted) {
		t.Fatalf("verify of a corrupted payload: %v", err)
	}
	if _, _, err := hub.Load(t.Context(), snap); !errors.Is(err, payload.ErrCorrupted) {
		t.Fatalf("load of a corrupted payload: %v", err)
	}
	// A restore reads it as a stream, to its end, before it writes anything: the stream's
	// last word is the mismatch, whether entries are decoded or left raw (a restore's read).
	_, all, closer, err := hub.Stream(t.Context(), snap)
	if err == nil {
		defer closer.Close()
		for _, e := range all {
			if e != nil {
				err = e
			}
		}
	}
	if !errors.Is(err, payload.ErrCorrupted) {
		t.Fatalf("streaming a corrupted payload: %v", err)
	}
	_, raw, rawCloser, err := hub.StreamRaw(t.Context(), snap)
	if err == nil {
		defer rawCloser.Close()
		for _, e := range raw {
			if e != nil {
				err = e
			}
		}
	}
	if !errors.Is(err, payload.ErrCorrupted) {
		t.Fatalf("streaming raw (restore's read) a corrupted payload: %v", err)
	}
	got := &v1alpha1.Snapshot{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(snap), got); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionVerified); cond == nil || cond.Reason != v1alpha1.ReasonChecksumMismatch {
		t.Fatalf("Verified condition %+v", cond)
	}
}

// GCS (fake-gcs-server) and Azure Blob (Azurite): a snapshot goes into the bucket with its
// metadata, verifies and loads; a store on a missing bucket is reported as BucketNotFound.
func TestGCSAndAzureBlobStores(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	gcs := teststores.StartGCS(t)
	gcs.CreateBucket(t, "rewind-gcs")
	az := teststores.StartAzurite(t)
	az.CreateContainer(t, "rewind-azure")
	for _, tc := range []struct {
		provider, bucket, endpoint string
		// creds is the credentials Secret's data.
		creds map[string][]byte
		// location starts the Snapshot's location.
		location string
	}{
		{provider: v1alpha1.StoreProviderGCS, bucket: "rewind-gcs", endpoint: gcs.Endpoint,
			creds: map[string][]byte{snapstore.CredGCSServiceAccount: gcs.ServiceAccount}, location: "gs://rewind-gcs/team"},
		{provider: v1alpha1.StoreProviderAzureBlob, bucket: "rewind-azure", endpoint: az.Endpoint,
			creds:    map[string][]byte{snapstore.CredAzureAccountName: []byte(az.Account), snapstore.CredAzureAccountKey: []byte(az.Key)},
			location: "azblob://rewind-azure/team"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			ns := testenv.Namespace(t, env.Hub.RESTConfig())
			if err := c.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns}, Data: tc.creds}); err != nil {
				t.Fatal(err)
			}
			mk := func(name, bucket string) *v1alpha1.SnapshotStore {
				st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
					Provider: tc.provider, Bucket: bucket, Prefix: "team", Endpoint: tc.endpoint,
					CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "creds"},
				}}
				if err := c.Create(t.Context(), st); err != nil {
					t.Fatal(err)
				}
				return st
			}
			s := resolve(t, c, mk("cloud", tc.bucket))
			if err := snapstore.ProbeStore(t.Context(), s); err != nil {
				t.Fatalf("probe: %v", err)
			}
			hub := &snapshot.Hub{Client: c}
			snap, err := takeInto(t, hub, s, ns, "cloudy")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(snap.Status.Location, tc.location) {
				t.Fatalf("location %s, want %s...", snap.Status.Location, tc.location)
			}
			if err := hub.Verify(t.Context(), snap); err != nil {
				t.Fatal(err)
			}
			if _, entries, err := hub.Load(t.Context(), snap); err != nil || len(entries) != 1001 {
				t.Fatalf("load: %d entries, %v", len(entries), err)
			}
			ps, err := s.Open(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			names, err := ps.(payload.Lister).List(t.Context(), "")
			if err != nil || !slices.Contains(names, "cloudy") || !slices.Contains(names, "cloudy.snapshot.json") {
				t.Fatalf("the store lists %v (%v), want the payload and its metadata", names, err)
			}
			if err := hub.Delete(t.Context(), snap); err != nil {
				t.Fatal(err)
			}
			if names, _ := ps.(payload.Lister).List(t.Context(), ""); len(names) != 0 {
				t.Fatalf("after Delete the store still lists %v", names)
			}
			err = snapstore.ProbeStore(t.Context(), resolve(t, c, mk("missing", "no-such-bucket")))
			if r := snapstore.Reason(err); r != v1alpha1.ReasonBucketNotFound {
				t.Fatalf("probe of a missing bucket: %v, reason %s", err, r)
			}
		})
	}
}
