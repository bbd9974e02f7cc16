package payload

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestLocalKEK(t *testing.T) {
	ctx := context.Background()
	key := randomBytes(KEKSize, 20)
	k1, err := NewLocalKEK(key)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := NewLocalKEK(key)
	if k1.ID() != k2.ID() || len(k1.ID()) != 16 {
		t.Errorf("IDs %q and %q: want the same 16 hex digits for the same key", k1.ID(), k2.ID())
	}
	other := testKEK(t)
	if other.ID() == k1.ID() {
		t.Error("two keys share an ID")
	}
	dek := randomBytes(dekSize, 21)
	wrapped, err := k1.Wrap(ctx, dek)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(wrapped, dek) {
		t.Error("wrapped key contains the key")
	}
	got, err := k2.Unwrap(ctx, wrapped)
	if err != nil || !bytes.Equal(got, dek) {
		t.Fatalf("Unwrap: %v", err)
	}
	if _, err := other.Unwrap(ctx, wrapped); !errors.Is(err, ErrCorrupted) {
		t.Errorf("Unwrap with another key: %v, want ErrCorrupted", err)
	}
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := NewLocalKEK(make([]byte, n)); err == nil {
			t.Errorf("NewLocalKEK accepted a %d-byte key", n)
		}
	}
}

func TestKeeperKEK(t *testing.T) {
	ctx := context.Background()
	key := randomBytes(32, 22)
	u := "base64key://" + base64.URLEncoding.EncodeToString(key)
	k1, err := OpenKeeperKEK(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer k1.Close()
	k2, err := OpenKeeperKEK(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Close()
	if k1.ID() != k2.ID() || !strings.HasPrefix(k1.ID(), "keeper-") {
		t.Errorf("IDs %q and %q: want the same keeper-<hex>", k1.ID(), k2.ID())
	}
	plain := randomBytes(200<<10, 23)
	payload, w := encrypt(t, k1, plain)
	got, sum, err := decrypt(k2, payload)
	if err != nil || !bytes.Equal(got, plain) || sum != w.Checksum() {
		t.Fatalf("decrypting with a second keeper of the same key: %v", err)
	}

	k3, err := OpenKeeperKEK(ctx, "base64key://"+base64.URLEncoding.EncodeToString(randomBytes(32, 24)))
	if err != nil {
		t.Fatal(err)
	}
	defer k3.Close()
	if _, _, err := decrypt(k3, payload); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another keeper: %v, want ErrWrongKey", err)
	}

	secret := base64.URLEncoding.EncodeToString(key)
	for _, bad := range []string{"base64key://", "base64key://" + secret + "?x=1", "nosuchkms://" + secret, "base64key://" + secret[:10]} {
		_, err := OpenKeeperKEK(ctx, bad)
		if err == nil {
			t.Errorf("OpenKeeperKEK accepted a bad URL")
			continue
		}
		if strings.Contains(err.Error(), secret[:10]) {
			t.Errorf("error for a bad URL shows key material")
		}
	}
}
