//go:build !unit

package docs_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
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
	root, bins := repoAndBinaries(t)
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
	t.Cleanup(func() { _ = testbed.StopIfRecorded(state) })
	testenv.StartReady(t, cmd)
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
	testenv.Interrupt(t, cmd, syscall.SIGTERM, 143, st.Processes)
}
