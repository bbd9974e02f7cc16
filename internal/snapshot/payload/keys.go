package payload

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"

	"gocloud.dev/secrets"
	_ "gocloud.dev/secrets/localsecrets" // base64key:// keepers
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/fault"
)

// KeyWrapper is a key-encryption key (KEK): it wraps and unwraps the per-payload data keys.
type KeyWrapper interface {
	// ID names the key; a payload records it so a reader can tell which key it needs. It is
	// not secret.
	ID() string
	// Wrap encrypts a data key.
	Wrap(ctx context.Context, dek []byte) ([]byte, error)
	// Unwrap decrypts a data key wrapped by Wrap.
	Unwrap(ctx context.Context, wrapped []byte) ([]byte, error)
}

const (
	// KEKSize is the size of a LocalKEK's key.
	KEKSize = 32

	// HubKeySecretName is the hub Secret that holds the snapshot key-encryption key.
	HubKeySecretName = "rewind-snapshot-key"
	// HubKeySecretKey is the data key of that Secret holding the raw 32-byte key.
	HubKeySecretKey = "key"

	wrapAD = "rewind.dev/snapshot-payload-dek/v1"
)

// LocalKEK is an AES-256 key held in memory that wraps data keys with AES-GCM.
type LocalKEK struct {
	id   string
	aead cipher.AEAD
}

var _ KeyWrapper = (*LocalKEK)(nil)

// NewLocalKEK makes a LocalKEK from a 32-byte key. Its ID is the hex of the first 8 bytes of
// the key's SHA-256.
func NewLocalKEK(key []byte) (*LocalKEK, error) {
	if len(key) != KEKSize {
		return nil, fmt.Errorf("payload: key-encryption key is %d bytes, want %d", len(key), KEKSize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("payload: key-encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("payload: key-encryption key: %w", err)
	}
	sum := sha256.Sum256(key)
	return &LocalKEK{id: hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// GenerateLocalKEK makes a LocalKEK from a fresh random key.
func GenerateLocalKEK() (*LocalKEK, error) {
	key := make([]byte, KEKSize)
	defer clear(key)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("payload: generating key-encryption key: %w", err)
	}
	return NewLocalKEK(key)
}

// ID implements KeyWrapper.
func (k *LocalKEK) ID() string { return k.id }

// Wrap implements KeyWrapper: a random 12-byte nonce followed by the sealed key.
func (k *LocalKEK) Wrap(_ context.Context, dek []byte) ([]byte, error) {
	out := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(dek)+k.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("payload: generating nonce: %w", err)
	}
	return k.aead.Seal(out, out, dek, []byte(wrapAD)), nil
}

// Unwrap implements KeyWrapper. A wrapped key that fails authentication (another key, or
// damaged) gives an error wrapping ErrCorrupted.
func (k *LocalKEK) Unwrap(_ context.Context, wrapped []byte) ([]byte, error) {
	ns := k.aead.NonceSize()
	if len(wrapped) < ns+k.aead.Overhead() {
		return nil, fmt.Errorf("%w: wrapped data key too short", ErrCorrupted)
	}
	dek, err := k.aead.Open(nil, wrapped[:ns], wrapped[ns:], []byte(wrapAD))
	if err != nil {
		return nil, fmt.Errorf("%w: wrapped data key failed authentication with KEK %s", ErrCorrupted, k.id)
	}
	return dek, nil
}

// HubKEK loads the snapshot key-encryption key from the hub Secret
// <namespace>/rewind-snapshot-key (data key "key"), generating and creating the Secret on
// first use. Two processes racing to create it end up with the same key: the loser of the
// race reads the winner's. The Secret is immutable; a Secret without a valid key is an error
// and is never overwritten, since payloads written under the old key would be lost.
//
// Pass a client that reads from the API server (not a manager's cache, which would start
// caching every Secret).
func HubKEK(ctx context.Context, c client.Client, namespace string) (*LocalKEK, error) {
	key := client.ObjectKey{Namespace: namespace, Name: HubKeySecretName}
	s := &corev1.Secret{}
	err := c.Get(ctx, key, s)
	if err == nil {
		return kekFromSecret(s)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("payload: reading Secret %s: %w", key, err)
	}
	raw := make([]byte, KEKSize)
	defer clear(raw)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("payload: generating key-encryption key: %w", err)
	}
	immutable := true
	s = &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: HubKeySecretName, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "rewind"},
			Annotations: map[string]string{
				"rewind.dev/description": "Key-encryption key of rewind snapshot payloads. Deleting or changing it makes every stored snapshot unreadable.",
			},
		},
		Type:      corev1.SecretTypeOpaque,
		Immutable: &immutable,
		Data:      map[string][]byte{HubKeySecretKey: raw},
	}
	// Sent again on a fault: a try whose answer was lost left it there (AlreadyExists, below).
	err = fault.Retry(ctx, fault.CreateTries, func() error { return c.Create(ctx, s) })
	clear(s.Data[HubKeySecretKey])
	switch {
	case err == nil:
		return NewLocalKEK(raw)
	case apierrors.IsAlreadyExists(err):
		s = &corev1.Secret{}
		if err := c.Get(ctx, key, s); err != nil {
			return nil, fmt.Errorf("payload: reading Secret %s after losing the race to create it: %w", key, err)
		}
		return kekFromSecret(s)
	default:
		return nil, fmt.Errorf("payload: creating Secret %s: %w", key, err)
	}
}

func kekFromSecret(s *corev1.Secret) (*LocalKEK, error) {
	raw := s.Data[HubKeySecretKey]
	defer clear(raw)
	if len(raw) != KEKSize {
		return nil, fmt.Errorf("payload: Secret %s/%s holds no valid key-encryption key under %q (%d bytes, want %d); it is not overwritten because payloads written under it would become unreadable",
			s.Namespace, s.Name, HubKeySecretKey, len(raw), KEKSize)
	}
	return NewLocalKEK(raw)
}

// KeeperKEK wraps data keys with a gocloud.dev/secrets Keeper, so a KMS (or a local key, for
// tests, with base64key://) can hold the key-encryption key.
type KeeperKEK struct {
	id     string
	keeper *secrets.Keeper
}

var _ KeyWrapper = (*KeeperKEK)(nil)

// NewKeeperKEK wraps keeper under the given ID, which must name the key (not the client
// configuration) so payloads can be read with it later.
func NewKeeperKEK(id string, keeper *secrets.Keeper) (*KeeperKEK, error) {
	if id == "" || len(id) > maxKEKIDLen {
		return nil, fmt.Errorf("payload: keeper ID must be 1 to %d bytes", maxKEKIDLen)
	}
	if keeper == nil {
		return nil, errors.New("payload: nil keeper")
	}
	return &KeeperKEK{id: id, keeper: keeper}, nil
}

// OpenKeeperKEK opens the keeper at urlstr with secrets.OpenKeeper (the base64key:// driver is
// linked in; import others, e.g. gocloud.dev/secrets/awskms, to use them). Its ID is
// "keeper-" and the hex of the first 8 bytes of the SHA-256 of the URL's scheme, host and
// path: query parameters (region, endpoint) may change without changing the ID, and the URL
// itself (which for base64key:// holds the key) is never recorded.
func OpenKeeperKEK(ctx context.Context, urlstr string) (*KeeperKEK, error) {
	u, err := url.Parse(urlstr)
	if err != nil {
		return nil, errors.New("payload: keeper URL does not parse") // the URL may hold a key: not echoed
	}
	if mux := secrets.DefaultURLMux(); !mux.ValidKeeperScheme(u.Scheme) {
		return nil, fmt.Errorf("payload: no keeper driver for scheme %q (linked in: %v)", u.Scheme, mux.KeeperSchemes())
	}
	if u.Host == "" && u.Path == "" {
		// base64key:// alone would make a random key that no later process could match.
		return nil, fmt.Errorf("payload: %s:// keeper URL names no key", u.Scheme)
	}
	k, err := secrets.OpenKeeper(ctx, urlstr)
	if err != nil {
		return nil, fmt.Errorf("payload: opening %s:// keeper: %w", u.Scheme, err)
	}
	return &KeeperKEK{id: KeeperID(u), keeper: k}, nil
}

// KeeperID is the ID of the KeeperKEK of a keeper URL: "keeper-" and the hex of the first 8
// bytes of the SHA-256 of the URL's scheme, host and path (the key it names, whatever the
// region, endpoint or credentials used to reach it).
func KeeperID(u *url.URL) string {
	sum := sha256.Sum256([]byte(u.Scheme + "://" + u.Host + u.Path))
	return "keeper-" + hex.EncodeToString(sum[:8])
}

// ID implements KeyWrapper.
func (k *KeeperKEK) ID() string { return k.id }

// Wrap implements KeyWrapper.
func (k *KeeperKEK) Wrap(ctx context.Context, dek []byte) ([]byte, error) {
	return k.keeper.Encrypt(ctx, dek)
}

// Unwrap implements KeyWrapper.
func (k *KeeperKEK) Unwrap(ctx context.Context, wrapped []byte) ([]byte, error) {
	return k.keeper.Decrypt(ctx, wrapped)
}

// Close releases the keeper.
func (k *KeeperKEK) Close() error { return k.keeper.Close() }
