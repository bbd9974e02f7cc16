// Package teststores starts the real servers that snapshot-store tests run against: an
// S3-compatible server (versitygw with its posix backend), a GCS emulator (fake-gcs-server)
// and an AWS KMS (local-kms), built from Go modules, and Azurite (Azure Blob, from npm), all by
// hack/stores/build.sh into a cache folder (never committed). Each
// server runs in its own process group, is stopped by its process id when the test ends (or
// dies with the test binary), and keeps its data in the test's temporary folder: nothing is
// left behind.
package teststores

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed/testenv"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// BinDirEnv names the environment variable that points at a folder with versitygw and
// local-kms; without it hack/stores/build.sh builds them (once) and says where.
const BinDirEnv = "REWIND_STORES_BIN"

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// BinDir returns the folder with the server binaries, building them the first time.
func BinDir() (string, error) {
	binOnce.Do(func() {
		if d := os.Getenv(BinDirEnv); d != "" {
			binDir = d
			return
		}
		root, err := repoRoot()
		if err != nil {
			binErr = err
			return
		}
		cmd := exec.Command(filepath.Join(root, "hack", "stores", "build.sh"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			binErr = fmt.Errorf("teststores: building the store servers (hack/stores/build.sh): %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		binDir = lines[len(lines)-1]
	})
	return binDir, binErr
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "stores", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("teststores: no hack/stores/build.sh above the working directory; set %s", BinDirEnv)
		}
		dir = parent
	}
}

// server is one process of a test server.
type server struct {
	name, bin string
	args, env []string
	addr      string
	log       string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (s *server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting %s: %v", s.name, err)
	}
	logf.Close()
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(s.log)
			t.Fatalf("%s exited before listening on %s:\n%s", s.name, s.addr, tail(b))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not listening on %s after 30s", s.name, s.addr)
		}
		// A dial refused returns at once: wait a little for the next try.
		select {
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop kills the server's process group (SIGKILL: a crash, not a shutdown) and waits until
// its port is closed.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.exited: // its sockets are closed with it
	case <-time.After(30 * time.Second):
	}
	s.cmd = nil
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// S3 is a running versitygw (posix backend) on 127.0.0.1.
type S3 struct {
	srv *server
	// Endpoint is its URL (http://127.0.0.1:PORT).
	Endpoint string
	// AccessKey and SecretKey are the root user's credentials (generated per server).
	AccessKey, SecretKey string
	// Root is the folder whose subfolders are the buckets.
	Root string
	// Region is the region it answers for.
	Region string
}

// StartS3 starts an S3 server for the test, stopped when the test ends.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	root := filepath.Join(tmp, "buckets")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	s := &S3{Endpoint: "http://" + addr, AccessKey: "rewind-test", SecretKey: randomHex(t, 20), Root: root, Region: "us-east-1"}
	s.srv = &server{
		name: "versitygw", bin: filepath.Join(dir, "versitygw"), addr: addr, log: filepath.Join(tmp, "versitygw.log"),
		args: []string{"--port", addr, "--region", s.Region, "--quiet", "posix", "--nometa", root},
		env:  []string{"ROOT_ACCESS_KEY_ID=" + s.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + s.SecretKey},
	}
	s.srv.start(t)
	t.Cleanup(s.srv.stop)
	return s
}

// Stop kills the server (as a crash would); Start starts it again on the same port and data.
func (s *S3) Stop()                { s.srv.stop() }
func (s *S3) Start(t testing.TB)   { s.srv.start(t) }
func (s *S3) Log() ([]byte, error) { return os.ReadFile(s.srv.log) }
func (s *S3) Addr() string         { return s.srv.addr }
func (s *S3) Creds() aws.Credentials {
	return aws.Credentials{AccessKeyID: s.AccessKey, SecretAccessKey: s.SecretKey}
}

// Client returns an S3 client of the root user.
func (s *S3) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:                     s.Region,
		BaseEndpoint:               aws.String(s.Endpoint),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// CreateBucket creates a bucket.
func (s *S3) CreateBucket(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
}

// ObjectPath is the file that holds an object of the posix backend.
func (s *S3) ObjectPath(bucket, key string) string { return filepath.Join(s.Root, bucket, key) }

// KMS is a running local-kms on 127.0.0.1.
type KMS struct {
	srv *server
	// Endpoint is its URL (http://127.0.0.1:PORT); Region its region.
	Endpoint, Region string
}

// StartKMS starts local-kms for the test, stopped when the test ends.
func StartKMS(t testing.TB) *KMS {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	addr := testenv.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	k := &KMS{Endpoint: "http://" + addr, Region: "eu-west-1"}
	data := filepath.Join(tmp, "kms-data")
	k.srv = &server{
		name: "local-kms", bin: filepath.Join(dir, "local-kms"), addr: addr, log: filepath.Join(tmp, "local-kms.log"),
		env: []string{"PORT=" + port, "KMS_REGION=" + k.Region, "KMS_ACCOUNT_ID=111122223333", "KMS_DATA_PATH=" + data,
			"KMS_SEED_PATH=" + filepath.Join(tmp, "no-seed.yaml")},
	}
	k.srv.start(t)
	t.Cleanup(k.srv.stop)
	return k
}

// Stop kills local-kms; Start starts it again with the same keys.
func (k *KMS) Stop()              { k.srv.stop() }
func (k *KMS) Start(t testing.TB) { k.srv.start(t) }

// Client returns a KMS client (local-kms takes any credentials).
func (k *KMS) Client() *kms.Client {
	return kms.New(kms.Options{
		Region: k.Region, BaseEndpoint: aws.String(k.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// CreateKey creates a symmetric key with the alias alias/<name> and returns its awskms:// URL
// (through the alias, with region and endpoint).
func (k *KMS) CreateKey(t testing.TB, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := k.Client().CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecSymmetricDefault, KeyUsage: kmstypes.KeyUsageTypeEncryptDecrypt})
	if err != nil {
		t.Fatalf("creating KMS key %s: %v", name, err)
	}
	if _, err := k.Client().CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String("alias/" + name), TargetKeyId: out.KeyMetadata.KeyId}); err != nil {
		t.Fatalf("creating KMS alias %s: %v", name, err)
	}
	return fmt.Sprintf("awskms://alias/%s?region=%s&endpoint=%s", name, k.Region, k.Endpoint)
}

// DisableKey disables the key behind alias/<name>: it can no longer unwrap.
func (k *KMS) DisableKey(t testing.TB, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := k.Client().DescribeKey(ctx, &kms.DescribeKeyInput{KeyId: aws.String("alias/" + name)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Client().DisableKey(ctx, &kms.DisableKeyInput{KeyId: d.KeyMetadata.KeyId}); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// GCS is a running fake-gcs-server on 127.0.0.1 with a token endpoint for its service account.
type GCS struct {
	srv *server
	// Endpoint is the JSON API base URL to give a SnapshotStore (spec.endpoint).
	Endpoint string
	// ServiceAccount is a service account key (JSON) whose token_uri is a local token server
	// (fake-gcs-server takes any token): nothing leaves the machine.
	ServiceAccount []byte
}

// StartGCS starts fake-gcs-server (in memory) for the test, stopped when the test ends.
func StartGCS(t testing.TB) *GCS {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	addr := testenv.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	g := &GCS{Endpoint: "http://" + addr + "/storage/v1/", ServiceAccount: fakeServiceAccount(t)}
	g.srv = &server{
		name: "fake-gcs-server", bin: filepath.Join(dir, "fake-gcs-server"), addr: addr, log: filepath.Join(tmp, "fake-gcs-server.log"),
		args: []string{"-scheme", "http", "-host", host, "-port", port, "-backend", "memory", "-public-host", addr, "-external-url", "http://" + addr, "-log-level", "warn"},
	}
	g.srv.start(t)
	t.Cleanup(g.srv.stop)
	return g
}

// CreateBucket creates a bucket through the emulator's JSON API.
func (g *GCS) CreateBucket(t testing.TB, name string) {
	t.Helper()
	body := strings.NewReader(`{"name":"` + name + `"}`)
	resp, err := http.Post(strings.TrimSuffix(g.Endpoint, "/")+"/b?project=test", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("creating GCS bucket %s: %s %s", name, resp.Status, b)
	}
}

// fakeServiceAccount makes a service account key with a fresh RSA key whose token_uri is a
// local server that hands out tokens.
func fakeServiceAccount(t testing.TB) []byte {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"test-token","token_type":"Bearer","expires_in":3600}`)
	}))
	t.Cleanup(ts.Close)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	sa, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "test", "private_key_id": "test", "private_key": string(pemKey),
		"client_email": "rewind@test.iam.gserviceaccount.com", "client_id": "1", "token_uri": ts.URL + "/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	return sa
}

// Azurite is a running Azurite blob service on 127.0.0.1 with one storage account.
type Azurite struct {
	srv *server
	// Endpoint is the account's service URL (path style) to give a SnapshotStore.
	Endpoint string
	// Account and Key are the storage account's name and shared key (generated).
	Account, Key string
}

// StartAzurite starts Azurite's blob service (telemetry off, data in the test's folder) for
// the test, stopped when the test ends.
func StartAzurite(t testing.TB) *Azurite {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	addr := testenv.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	key := make([]byte, 64)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	a := &Azurite{Account: "rewindtest", Key: base64.StdEncoding.EncodeToString(key)}
	a.Endpoint = "http://" + addr + "/" + a.Account
	a.srv = &server{
		name: "azurite", bin: filepath.Join(dir, "azurite", "node_modules", ".bin", "azurite-blob"), addr: addr, log: filepath.Join(tmp, "azurite.log"),
		args: []string{"--blobHost", host, "--blobPort", port, "--location", filepath.Join(tmp, "data"), "--disableTelemetry", "--skipApiVersionCheck", "--loose", "--silent"},
		env:  []string{"AZURITE_ACCOUNTS=" + a.Account + ":" + a.Key},
	}
	a.srv.start(t)
	t.Cleanup(a.srv.stop)
	return a
}

// CreateContainer creates a blob container.
func (a *Azurite) CreateContainer(t testing.TB, name string) {
	t.Helper()
	cred, err := azblob.NewSharedKeyCredential(a.Account, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := azblob.NewClientWithSharedKeyCredential(a.Endpoint+"/", cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.CreateContainer(ctx, name, nil); err != nil {
		t.Fatalf("creating container %s: %v", name, err)
	}
}
