//go:build !unit

package docs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// signalChildEnv, when set to a folder, makes the test binary a document run that is
// interrupted: it runs, as TestDocs runs a document's blocks (runScript), a script that starts
// a testbed in the background with bin/rewind (as the README's blocks do), says READY and waits.
const signalChildEnv = "REWIND_DOCS_SIGNAL_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(signalChildEnv); dir != "" {
		env := append(os.Environ(), "HOME="+dir, "XDG_CACHE_HOME=", "KUBECONFIG=")
		err := runScript(context.Background(), dir, filepath.Join(dir, "state"),
			"set -e\nbin/rewind testbed up --members 0 --state-dir state >/dev/null 2>&1\necho READY\nsleep 600\n", env, os.Stdout)
		fmt.Fprintln(os.Stderr, "child: the script ended before it was interrupted:", err)
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// TestAnInterruptedDocumentLeavesNoProcess: make test interrupted (SIGTERM) while a document's
// blocks run leaves nothing running: the testbed the blocks started (detached, by design: the
// README's reader stops it with rewind testbed down) is stopped before the test binary exits,
// and the binary exits with 143. Before, the test's cleanup that stops it never ran: an
// interrupted make test left etcd, the API servers and the member controllers running.
func TestAnInterruptedDocumentLeavesNoProcess(t *testing.T) {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "rewind"), "./cmd/rewind")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rewind: %v\n%s", err, out)
	}
	state := filepath.Join(dir, "state")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), signalChildEnv+"="+dir, testbed.BinDirEnv+"="+filepath.Dir(bins.APIServer))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if _, err := os.Stat(filepath.Join(state, testbed.StateFileName)); err == nil {
			_, _ = testbed.StopState(state)
		}
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "READY" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the child exited before its testbed was ready")
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the child's testbed was not ready within 3 minutes")
	}
	st, err := testbed.ReadState(state)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) == 0 {
		t.Fatal("the state file names no process")
	}
	for _, p := range st.Processes {
		if !testbed.Alive(p) {
			t.Fatalf("process %s (pid %d) of the testbed is not running before the signal", p.Name, p.PID)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the child did not exit within a minute of SIGTERM")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("the child should exit with status 143 after SIGTERM, got %v", err)
	}
	for _, p := range st.Processes {
		if testbed.Alive(p) {
			t.Errorf("process %s (pid %d) of the testbed is still alive", p.Name, p.PID)
		}
		if testbed.GroupAlive(p.PID) {
			t.Errorf("process group of %s (pgid %d) still has members", p.Name, p.PID)
		}
	}
}
