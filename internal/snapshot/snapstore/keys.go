package snapstore

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"gocloud.dev/secrets/awskms"
	_ "gocloud.dev/secrets/azurekeyvault" // azurekeyvault:// keys (the controller's Azure identity)
	_ "gocloud.dev/secrets/gcpkms"        // gcpkms:// keys (Application Default Credentials)
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/payload"
)

// KeyName names the key a keyRef points to, for messages: the KMS URL without its
// parameters, the Secret and data key, or the hub's default key. It holds no secret.
func KeyName(namespace string, ref *v1alpha1.SnapshotKeyRef) string {
	switch {
	case ref == nil:
		return "the hub's default key (Secret " + DefaultKeyNamespace + "/" + payload.HubKeySecretName + ")"
	case ref.KMS != "":
		u, err := url.Parse(ref.KMS)
		if err != nil {
			return "a KMS key whose URL does not parse"
		}
		return u.Scheme + "://" + u.Host + u.Path
	case ref.SecretRef != nil:
		return fmt.Sprintf("Secret %s/%s key %q", namespace, ref.SecretRef.Name, secretKey(ref.SecretRef))
	default:
		return "an empty keyRef"
	}
}

func secretKey(r *v1alpha1.SecretKeyReference) string {
	if r.Key == "" {
		return "key"
	}
	return r.Key
}

// OpenKey opens the key-encryption key a keyRef names (nil: the hub's default key, created
// on first use). storeCreds are the store's credentials, used for a KMS without its own. A
// failure is a *KeyError naming the key.
func OpenKey(ctx context.Context, c client.Client, namespace string, ref *v1alpha1.SnapshotKeyRef, storeCreds *v1alpha1.LocalSecretReference) (payload.KeyWrapper, error) {
	k, err := openKey(ctx, c, namespace, ref, storeCreds)
	if err != nil {
		return nil, &KeyError{Key: KeyName(namespace, ref), Err: err}
	}
	return k, nil
}

func openKey(ctx context.Context, c client.Client, namespace string, ref *v1alpha1.SnapshotKeyRef, storeCreds *v1alpha1.LocalSecretReference) (payload.KeyWrapper, error) {
	switch {
	case ref == nil:
		return payload.HubKEK(ctx, c, DefaultKeyNamespace)
	case ref.KMS != "":
		creds := ref.CredentialsSecretRef
		if creds == nil {
			creds = storeCreds
		}
		return openKMS(ctx, c, namespace, ref.KMS, creds)
	case ref.SecretRef != nil:
		key := secretKey(ref.SecretRef)
		data, err := secretData(ctx, c, namespace, ref.SecretRef.Name, key)
		if err != nil {
			return nil, err
		}
		raw, err := keyBytes(data[key])
		if err != nil {
			return nil, fmt.Errorf("Secret %s/%s key %q: %w", namespace, ref.SecretRef.Name, key, err)
		}
		defer clear(raw)
		return payload.NewLocalKEK(raw)
	default:
		return nil, fmt.Errorf("keyRef sets neither kms nor secretRef")
	}
}

// keyBytes accepts a raw 32-byte key or its base64 (standard or URL alphabet, as
// base64key:// URLs carry it).
func keyBytes(v []byte) ([]byte, error) {
	if len(v) == payload.KEKSize {
		return append([]byte(nil), v...), nil
	}
	s := strings.TrimSpace(string(v))
	s = strings.TrimPrefix(s, "base64key://")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil && len(raw) == payload.KEKSize {
			return raw, nil
		}
	}
	return nil, fmt.Errorf("holds no 32-byte key (want 32 raw bytes or their base64; generate one with: head -c 32 /dev/urandom | base64)")
}

// openKMS opens a KMS key URL. awskms:// uses the credentials Secret when there is one (and
// the URL's region= and endpoint=); other schemes use the controller's environment.
func openKMS(ctx context.Context, c client.Reader, namespace, raw string, creds *v1alpha1.LocalSecretReference) (payload.KeyWrapper, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("the KMS URL does not parse: %w", err)
	}
	if u.Scheme != awskms.Scheme {
		return payload.OpenKeeperKEK(ctx, raw)
	}
	q := u.Query()
	cfg, err := awsConfig(ctx, c, namespace, q.Get("region"), creds)
	if err != nil {
		return nil, err
	}
	endpoint := q.Get("endpoint")
	cl := kms.NewFromConfig(cfg, func(o *kms.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	keyID := strings.TrimPrefix(path.Join(u.Host, u.Path), "/")
	if keyID == "" {
		return nil, fmt.Errorf("the KMS URL names no key (want awskms://alias/NAME or awskms:///ARN)")
	}
	return payload.NewKeeperKEK(payload.KeeperID(u), awskms.OpenKeeper(cl, keyID, nil))
}
