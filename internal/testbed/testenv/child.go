package testenv

import (
	"bufio"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// StartReady starts cmd (the test binary run again as a child, told by its environment what to
// do) and waits, at most 3 minutes, until it prints a line READY; the test fails if it exits
// or takes longer. The child is killed when the test ends.
func StartReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
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
			t.Fatal("the child exited before it was ready")
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the child was not ready within 3 minutes")
	}
}

// Interrupt sends sig to the child cmd started by StartReady, waits at most a minute for it
// to exit, and checks that it exited with status code, then that none of procs (or their
// process groups) is alive.
func Interrupt(t *testing.T, cmd *exec.Cmd, sig syscall.Signal, code int, procs []testbed.ProcessRecord) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the child did not exit within a minute of %v", sig)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != code {
		t.Errorf("the child should exit with status %d after %v, got %v", code, sig, err)
	}
	AssertAllGone(t, procs)
}

// AssertAllGone fails the test for each of procs, or its process group, still alive.
func AssertAllGone(t *testing.T, procs []testbed.ProcessRecord) {
	t.Helper()
	for _, r := range procs {
		if testbed.Alive(r) {
			t.Errorf("process %s (pid %d) is still alive", r.Name, r.PID)
		}
		if testbed.GroupAlive(r.PID) {
			t.Errorf("process group of %s (pgid %d) still has members", r.Name, r.PID)
		}
	}
}
