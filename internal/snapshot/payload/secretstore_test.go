//go:build !unit

package payload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// chunkSecrets lists the chunk Secrets of name in ns, with their data.
// TestSecretStoreContract: the secrets:// store keeps the contract of every store (the
// other stores are checked in TestStores).
func TestSecretStoreContract(t *testing.T) {
	c, ns := hubClient(t)
	u := "secrets://" + ns
	s, err := OpenStore(t.Context(), u, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*SecretStore); !ok {
		t.Fatalf("OpenStore(%s) is a %T", u, s)
	}
	testStoreContract(t, s, u+"/")
}

func chunkSecrets(t *testing.T, c client.Client, ns, name string) []corev1.Secret {
	t.Helper()
	list := &corev1.SecretList{}
	if err := c.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{LabelPayload: payloadLabel(name)}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestSecretStoreChunks(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	s := NewSecretStore(c, ns)
	kek := testKEK(t)
	plain := randomBytes(5<<19, 40) // 2.5 MiB, incompressible: the payload is as large
	payload, w := encrypt(t, kek, plain)

	loc, size, err := s.Put(ctx, "big", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	if loc != "secrets://"+ns+"/big" || size != int64(len(payload)) {
		t.Errorf("Put: %s, %d bytes; want secrets://%s/big, %d", loc, size, ns, len(payload))
	}
	secrets := chunkSecrets(t, c, ns, "big")
	if len(secrets) < 4 {
		t.Fatalf("a %d-byte payload is in %d Secrets, want >= 4", len(payload), len(secrets))
	}
	for _, sec := range secrets {
		n := 0
		for k, v := range sec.Data {
			n += len(k) + len(v)
		}
		if n >= 1<<20 || n > SecretChunkSize+len(chunkDataKey) {
			t.Errorf("Secret %s holds %d bytes of data", sec.Name, n)
		}
		if !strings.HasPrefix(sec.Name, "rewind-snap-big-") {
			t.Errorf("chunk Secret named %s", sec.Name)
		}
	}
	got := readAll(t, s, "big")
	if !bytes.Equal(got, payload) {
		t.Fatal("payload read back differs")
	}
	rc, err := s.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, rc, kek, w.Checksum()); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// A missing chunk: Get fails, and so does a read that finds it gone midway.
	rc, err = s.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	missing := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rewind-snap-big-2"}}
	if err := c.Delete(ctx, missing); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), "chunk 2") {
		t.Errorf("reading with chunk 2 deleted midway: %v, want ErrCorrupted naming chunk 2", err)
	}
	if _, err := s.Get(ctx, "big"); !errors.Is(err, ErrCorrupted) || !strings.Contains(err.Error(), "chunk 2") {
		t.Errorf("Get with chunk 2 missing: %v, want ErrCorrupted naming chunk 2", err)
	}

	// Delete removes every chunk.
	if err := s.Delete(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if left := chunkSecrets(t, c, ns, "big"); len(left) != 0 {
		t.Errorf("%d chunk Secrets left after Delete", len(left))
	}
	if _, err := s.Get(ctx, "big"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
}

func TestSecretStoreChangedChunk(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	s := NewSecretStore(c, ns)
	data := randomBytes(SecretChunkSize+100, 41)
	if _, _, err := s.Put(ctx, "p", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rewind-snap-p-1"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data[chunkDataKey][5] ^= 1
	if err := c.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrCorrupted) {
		t.Errorf("reading a payload whose chunk changed: %v, want ErrCorrupted", err)
	}
}

func TestSecretStoreIncompletePut(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	s := NewSecretStore(c, ns)
	data := randomBytes(3*SecretChunkSize+10, 42)

	// A Put that dies after writing two chunks (1 and 2; chunk 0 comes last).
	if _, _, err := s.Put(ctx, "crash", newBrokenReader(data[:2*SecretChunkSize+5])); err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	if n := len(chunkSecrets(t, c, ns, "crash")); n != 1 {
		t.Fatalf("%d chunk Secrets after the failed Put, want 1 (chunk 1)", n)
	}
	_, err := s.Get(ctx, "crash")
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of an unfinished payload: %v, want ErrIncomplete and ErrNotFound", err)
	}
	// Retrying finishes it.
	if _, _, err := s.Put(ctx, "crash", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "crash"); !bytes.Equal(got, data) {
		t.Fatal("payload differs after the retried Put")
	}
	// A shorter payload of the same name leaves no stale chunks.
	if _, _, err := s.Put(ctx, "crash", bytes.NewReader(data[:100])); err != nil {
		t.Fatal(err)
	}
	if n := len(chunkSecrets(t, c, ns, "crash")); n != 1 {
		t.Errorf("%d chunk Secrets after a 100-byte Put, want 1", n)
	}
	if got := readAll(t, s, "crash"); !bytes.Equal(got, data[:100]) {
		t.Fatal("payload differs after the shorter Put")
	}
}

func TestSecretStoreNames(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	s := NewSecretStore(c, ns)
	long := strings.Repeat("a", 200)
	cases := []string{
		"plain-name",
		"Upper_Case.and.dots",
		long,
		long[:199] + "b", // shares the cleaned prefix with long
		"x.-y",
	}
	for i, name := range cases {
		base := chunkSecretBase(name)
		if errs := validation.IsDNS1123Subdomain(base + "-999999"); len(errs) > 0 {
			t.Errorf("%q: Secret names %s-N are invalid: %v", name, base, errs)
		}
		if errs := validation.IsValidLabelValue(payloadLabel(name)); len(errs) > 0 {
			t.Errorf("%q: label value %q invalid: %v", name, payloadLabel(name), errs)
		}
		data := []byte(fmt.Sprintf("payload %d", i))
		if _, _, err := s.Put(ctx, name, bytes.NewReader(data)); err != nil {
			t.Fatalf("%q: %v", name, err)
		}
	}
	for i, name := range cases {
		if got := readAll(t, s, name); string(got) != fmt.Sprintf("payload %d", i) {
			t.Errorf("%q reads back %q", name, got)
		}
	}
	for _, name := range cases {
		if err := s.Delete(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(ns), client.HasLabels{LabelPayload}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d chunk Secrets left", len(list.Items))
	}
}
