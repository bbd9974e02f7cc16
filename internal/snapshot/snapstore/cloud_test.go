package snapstore

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestOpenGCSConcurrentADC opens a GCS store without a credentials Secret (Application
// Default Credentials, from a service account file) from several goroutines at once. The
// opener once stored the credentials it found in a variable every call shares, which `go test
// -race` reports here.
func TestOpenGCSConcurrentADC(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "rewind-test",
		"private_key_id": "k1",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   "rewind@rewind-test.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      "http://127.0.0.1:1/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(file, sa, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)

	ctx := context.Background()
	st := &v1alpha1.SnapshotStore{}
	st.Namespace = "ns"
	st.Spec.Bucket = "bucket"
	st.Spec.Endpoint = "http://127.0.0.1:1/storage/v1/"
	open, err := openGCS(ctx, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			ps, err := open(ctx)
			if err == nil {
				if c, ok := ps.(interface{ Close() error }); ok {
					err = c.Close()
				}
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("open %d: %v", i, err)
		}
	}
}
