//go:build !unit

package testbed_test

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// testWriter sends a child's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// binDir is the folder of the testbed binaries the shared testbed uses.
func binDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv(testbed.BinDirEnv); d != "" {
		return d
	}
	b, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(b.APIServer)
}

var (
	buildOnce sync.Once
	rewindBin string
	buildErr  error
	buildOut  []byte
)

// buildRewind builds the rewind binary once per test run, into the state folder of the
// package's testbed, which TestMain removes when it stops the testbed: the binary (about
// 200 MB) does not outlive the run.
func buildRewind(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := testbed.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir := filepath.Join(env.StateDir, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		rewindBin = filepath.Join(dir, "rewind")
		cmd := exec.Command("go", "build", "-o", rewindBin, "./cmd/rewind")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building rewind: %v\n%s", buildErr, buildOut)
	}
	return rewindBin
}

// fastestVersionGET returns the shortest of several GET /version requests through cfg, on a
// connection opened (and warmed) beforehand.
func fastestVersionGET(t *testing.T, cfg *rest.Config) time.Duration {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func() time.Duration {
		start := time.Now()
		if _, err := cs.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(t.Context()); err != nil {
			t.Fatalf("GET /version from %s: %v", cfg.Host, err)
		}
		return time.Since(start)
	}
	get() // opens the connection (TCP and TLS handshakes)
	best := time.Duration(math.MaxInt64)
	for range 5 {
		best = min(best, get())
	}
	return best
}
