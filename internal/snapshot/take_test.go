//go:build !unit

package snapshot_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

func hubClient(t *testing.T) client.Client {
	t.Helper()
	return testenv.HubClient(t, env.Hub.RESTConfig())
}

func take(t *testing.T, hub *snapshot.Hub, ns, name string, retention int) *v1alpha1.Snapshot {
	t.Helper()
	snap, err := hub.Take(t.Context(), testenv.Member(t, env.Members[0]), snapshot.Request{
		Name: name, Namespace: ns, Cluster: "member1", Reason: "test", Retention: retention, Capture: captureOpts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestTakeStoresEncryptedVerifiedPayload(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	hub := &snapshot.Hub{Client: c}
	before := time.Now()
	snap := take(t, hub, ns, "first", -1)
	took := time.Since(before)
	// The capture's duration is recorded (the rate rewind plan estimates from), and stored.
	recorded := &v1alpha1.Snapshot{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(snap), recorded); err != nil {
		t.Fatal(err)
	}
	if d := recorded.Status.CaptureDuration; d == nil || d.Duration <= 0 || d.Duration > took {
		t.Fatalf("status.captureDuration %v: want more than 0 and at most the %v Take took", d, took)
	}
	if snap.Status.Counts.CustomResources != 200 || snap.Status.Counts.Associated != 800 || snap.Status.Counts.CRDs != 1 {
		t.Fatalf("counts %+v", snap.Status.Counts)
	}
	if !strings.HasPrefix(snap.Status.Checksum, "sha256:") || snap.Status.ClusterID == "" || snap.Status.CapturedAt == nil || snap.Status.StoredBytes == 0 {
		t.Fatalf("metadata %+v", snap.Status)
	}
	// The checksum is the one of the canonical payload.
	plain, _ := capture(t)
	if got := snapshot.ChecksumOf(plain); got != snap.Status.Checksum {
		t.Fatalf("recorded checksum %s, canonical payload %s", snap.Status.Checksum, got)
	}
	if err := hub.Verify(t.Context(), snap); err != nil {
		t.Fatalf("verify: %v", err)
	}
	_, entries, err := hub.Load(t.Context(), snap)
	if err != nil || len(entries) != 1001 {
		t.Fatalf("load: %d entries, %v", len(entries), err)
	}
	// Taking it again by name is a no-op.
	again := take(t, hub, ns, "first", -1)
	if again.Status.Checksum != snap.Status.Checksum || !again.Status.CapturedAt.Equal(snap.Status.CapturedAt) {
		t.Fatalf("taking an existing snapshot again must return it unchanged")
	}

	// The stored bytes hold no Secret's plaintext, in any encoding.
	var secrets corev1.SecretList
	if err := c.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var stored bytes.Buffer
	for _, s := range secrets.Items {
		for _, v := range s.Data {
			stored.Write(v)
		}
	}
	if stored.Len() < int(snap.Status.StoredBytes) {
		t.Fatalf("found %d stored bytes, the snapshot says %d", stored.Len(), snap.Status.StoredBytes)
	}
	for i := 0; i < 200; i++ {
		v := testfixture.SecretValue(fmt.Sprintf("db-%05d", i))
		for _, form := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if bytes.Contains(stored.Bytes(), []byte(form)) {
				t.Fatalf("the stored payload contains a Secret's plaintext value %q", form)
			}
		}
	}
	if !bytes.Contains(plain, []byte(base64.StdEncoding.EncodeToString([]byte(testfixture.SecretValue("db-00000"))))) {
		t.Fatal("control: the plaintext payload should hold the Secret (so the check above means something)")
	}
}

func TestFlippedByteFailsVerification(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	hub := &snapshot.Hub{Client: c}
	snap := take(t, hub, ns, "victim", -1)
	var secrets corev1.SecretList
	if err := c.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	flipped := false
	for i := range secrets.Items {
		s := &secrets.Items[i]
		for k, v := range s.Data {
			if len(v) > 100 && !flipped {
				v[len(v)/2] ^= 0x01
				s.Data[k] = v
				if err := c.Update(t.Context(), s); err != nil {
					t.Fatal(err)
				}
				flipped = true
			}
		}
	}
	if !flipped {
		t.Fatal("no payload chunk found to corrupt")
	}
	err := hub.Verify(t.Context(), snap)
	if err == nil || !errors.Is(err, payload.ErrCorrupted) {
		t.Fatalf("verify of a corrupted payload must fail with ErrCorrupted, got %v", err)
	}
	if _, _, err := hub.Load(t.Context(), snap); err == nil {
		t.Fatal("a corrupted snapshot must not load (so it cannot be restored)")
	}
}

func TestRetentionKeepsReferencedSnapshots(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	hub := &snapshot.Hub{Client: c}
	take(t, hub, ns, "s1", -1)
	// A Rollout still references s1.
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "ro", Namespace: ns},
		Spec: v1alpha1.RolloutSpec{Operator: "mysql-operator", Release: "mysql-v1", InstallNamespace: "mysql-system",
			Waves: []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1"}, MaxConcurrency: 1}}},
	}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	// Its target restores s1.
	rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "ro-member1", Namespace: ns},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "ro", Cluster: "member1", Revision: 2, Path: v1alpha1.PathRestore, ToRelease: "mysql-v1",
			Snapshot: "s1", Operator: "mysql-operator", InstallNamespace: "mysql-system"}}
	if err := c.Create(t.Context(), rt); err != nil {
		t.Fatal(err)
	}
	take(t, hub, ns, "s2", -1)
	take(t, hub, ns, "s3", -1)
	take(t, hub, ns, "s4", 2)
	var list v1alpha1.SnapshotList
	if err := c.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range list.Items {
		names[s.Name] = true
	}
	if !names["s1"] || !names["s3"] || !names["s4"] || names["s2"] || len(names) != 3 {
		t.Fatalf("retention 2 must keep s3, s4 and the referenced s1, and delete s2; kept %v", names)
	}
	// s2's payload is gone too.
	var secrets corev1.SecretList
	if err := c.List(t.Context(), &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if strings.Contains(s.Name, "-s2-") || strings.HasSuffix(s.Name, "-s2") {
			t.Fatalf("payload chunk %s of the deleted snapshot s2 remains", s.Name)
		}
	}
}

// failingStore is a payload store whose Put reads up to readFirst bytes, then fails with
// failWith. A Put whose payload stream fails fails with errStoreRead, which does not wrap
// the stream's error (as a store that words its own failure would).
type failingStore struct {
	readFirst int64
	failWith  error
}

var errStoreRead = errors.New("the store could not read the payload")

func (s *failingStore) Put(_ context.Context, _ string, r io.Reader) (string, int64, error) {
	if _, err := io.CopyN(io.Discard, r, s.readFirst); err != nil {
		return "", 0, errStoreRead
	}
	return "", 0, s.failWith
}

func (s *failingStore) Get(context.Context, string) (io.ReadCloser, error) {
	return nil, payload.ErrNotFound
}

func (s *failingStore) Delete(context.Context, string) error { return nil }

func TestTakeReportsTheFailureThatCameFirst(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	errDiskFull := errors.New("no space left on the bucket")
	// A kind the member does not serve (and no CRD of the release defines).
	unknownKind := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": "g"},
	}}
	for _, tc := range []struct {
		name string
		// store is where the payload goes.
		store *failingStore
		// manifests replace the release's manifests of captureOpts when set.
		manifests []*unstructured.Unstructured
		// want says whether err is the expected one.
		want func(err error) bool
	}{{
		name:  "store fails before reading",
		store: &failingStore{readFirst: 0, failWith: errDiskFull},
		want:  func(err error) bool { return errors.Is(err, errDiskFull) },
	}, {
		name:  "store fails after reading part of the payload",
		store: &failingStore{readFirst: 4096, failWith: errDiskFull},
		want:  func(err error) bool { return errors.Is(err, errDiskFull) },
	}, {
		name:      "capture fails first",
		store:     &failingStore{readFirst: math.MaxInt64},
		manifests: append(captureOpts().Manifests, unknownKind),
		want: func(err error) bool {
			return member.IsNotServed(err) && strings.Contains(err.Error(), "example.com/v1 Gadget") && !errors.Is(err, errStoreRead)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			kek, err := payload.GenerateLocalKEK()
			if err != nil {
				t.Fatal(err)
			}
			hub := &snapshot.Hub{Client: c, KEK: kek, OpenStore: func(context.Context, string, client.Client) (payload.Store, error) {
				return tc.store, nil
			}}
			opts := captureOpts()
			if tc.manifests != nil {
				opts.Manifests = tc.manifests
			}
			name := strings.ReplaceAll(tc.name, " ", "-")
			_, err = hub.Take(t.Context(), testenv.Member(t, env.Members[0]), snapshot.Request{
				Name: name, Namespace: ns, Cluster: "member1", Retention: -1, Capture: opts,
			})
			if err == nil || !tc.want(err) {
				t.Fatalf("Take returned %v", err)
			}
			var snap v1alpha1.Snapshot
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &snap); err != nil {
				t.Fatal(err)
			}
			if meta.FindStatusCondition(snap.Status.Conditions, v1alpha1.ConditionReady) != nil || snap.Status.Location != "" {
				t.Fatalf("a failed Take must not record the snapshot as stored: %+v", snap.Status)
			}
		})
	}
}

// TestTakeWhoseCreateLostItsAnswer: the Snapshot's create is done and its answer lost (the
// client sends it again and meets AlreadyExists). The take goes on and records the snapshot
// Ready. Before, the status write went out without the resourceVersion the lost answer would
// have given, and failed: the step failed and was run again.
func TestTakeWhoseCreateLostItsAnswer(t *testing.T) {
	mysqlFixture(t)
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	base, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	lost := 0
	lossy := interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*v1alpha1.Snapshot); !ok || lost > 0 {
				return cl.Create(ctx, obj, opts...)
			}
			sent := obj.DeepCopyObject().(client.Object)
			if err := cl.Create(ctx, sent, opts...); err != nil {
				return err
			}
			lost++
			return &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		},
	})
	snap, err := (&snapshot.Hub{Client: lossy}).Take(t.Context(), testenv.Member(t, env.Members[0]), snapshot.Request{
		Name: "lost", Namespace: ns, Cluster: "member1", Reason: "test", Retention: -1, Capture: captureOpts(),
	})
	if lost != 1 {
		t.Fatalf("%d answers lost, want 1: the test proves nothing", lost)
	}
	if err != nil {
		t.Fatalf("a take whose create lost its answer: %v", err)
	}
	got := &v1alpha1.Snapshot{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(snap), got); err != nil || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("Snapshot lost: %v, conditions %+v; want it Ready", err, got.Status.Conditions)
	}
}
