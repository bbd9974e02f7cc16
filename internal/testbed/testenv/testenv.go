// Package testenv lets a test package share one real testbed across its tests: TestMain calls
// Main, which starts the testbed, runs the tests and always stops it (also on SIGINT/SIGTERM,
// and the child processes die with the test binary if it crashes).
//
// The file with that TestMain, and every test file that uses the testbed, starts with
// `//go:build !unit`: `make test-unit` (`go test -tags unit ./...`) then builds each package
// without them and runs only its tests that need no testbed, while `make test` runs all. A
// helper both kinds of test use lives in an untagged file.
package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// Main starts a testbed with opts, stores it in *tb, runs the package's tests, stops the
// testbed and exits with the tests' status. Use it from TestMain.
func Main(m *testing.M, opts testbed.Options, tb **testbed.Testbed) {
	os.Exit(run(m, opts, tb))
}

func run(m *testing.M, opts testbed.Options, tb **testbed.Testbed) int {
	if os.Getenv("REWIND_TEST_LOG") != "" {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	} else {
		ctrllog.SetLogger(logr.Discard())
	}
	opts.HandleSignals = true
	if opts.Log == nil {
		opts.Log = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t, err := testbed.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: starting the testbed: %v\n", err)
		return 1
	}
	defer t.Stop()
	*tb = t
	return m.Run()
}

// Namespace creates a namespace with a unique name derived from the test's name in the cluster
// of cfg and deletes it when the test ends.
func Namespace(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := strings.ToLower(t.Name())
	base = strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, base)
	if len(base) > 40 {
		base = base[:40]
	}
	name := strings.Trim(base, "-") + "-" + rand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("deleting namespace %s: %v", name, err)
		}
	})
	return name
}

// StopStateOnInterrupt stops the detached testbed recorded in dir (rewind testbed up
// --state-dir dir) when the test ends, and also when make test is interrupted (SIGINT,
// SIGTERM: the package's testbed handler exits without running the test's cleanups).
func StopStateOnInterrupt(t testing.TB, dir string) {
	stop := func() { _ = testbed.StopIfRecorded(dir) }
	remove := testbed.OnInterrupt(stop)
	t.Cleanup(func() { remove(); stop() })
}
