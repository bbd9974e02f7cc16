//go:build !unit

package payload

import (
	"bytes"
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestHubKEK(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)

	k1, err := HubKEK(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: HubKeySecretName}, s); err != nil {
		t.Fatalf("the key Secret was not created: %v", err)
	}
	if len(s.Data[HubKeySecretKey]) != KEKSize || s.Immutable == nil || !*s.Immutable {
		t.Errorf("key Secret: %d-byte key, immutable %v; want %d bytes, immutable", len(s.Data[HubKeySecretKey]), s.Immutable, KEKSize)
	}
	k2, err := HubKEK(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if k1.ID() != k2.ID() {
		t.Fatalf("second HubKEK has ID %s, first %s", k2.ID(), k1.ID())
	}
	plain := randomBytes(100<<10, 25)
	payload, _ := encrypt(t, k1, plain)
	if got, _, err := decrypt(k2, payload); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("decrypting with the second instance: %v", err)
	}
}

func TestHubKEKRace(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			k, err := HubKEK(ctx, c, ns)
			if err == nil {
				ids[i] = k.ID()
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got key %s, caller 0 %s", i, ids[i], ids[0])
		}
	}

	// The race lost for certain: the Secret is created between this caller's Get and Create.
	lateC := &lateClient{Client: c}
	k, err := HubKEK(ctx, lateC, ns)
	if err != nil {
		t.Fatal(err)
	}
	if !lateC.alreadyExists {
		t.Fatal("the Create did not meet AlreadyExists")
	}
	if k.ID() != ids[0] {
		t.Errorf("the loser of the race got key %s, the winner %s", k.ID(), ids[0])
	}
}

// lateClient reports NotFound for its first Get, as if it ran just before another process
// created the object.
type lateClient struct {
	client.Client
	gets          int
	alreadyExists bool
}

func (c *lateClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets++
	if c.gets == 1 {
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *lateClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := c.Client.Create(ctx, obj, opts...)
	c.alreadyExists = c.alreadyExists || apierrors.IsAlreadyExists(err)
	return err
}

func TestHubKEKKeepsABadSecret(t *testing.T) {
	ctx := context.Background()
	c, ns := hubClient(t)
	bad := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: HubKeySecretName, Namespace: ns},
		Data:       map[string][]byte{HubKeySecretKey: []byte("short")},
	}
	if err := c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := HubKEK(ctx, c, ns); err == nil {
		t.Fatal("HubKEK accepted a 5-byte key")
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bad), s); err != nil || string(s.Data[HubKeySecretKey]) != "short" {
		t.Errorf("the existing Secret was changed (%v)", err)
	}
}
