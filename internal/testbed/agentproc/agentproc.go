// Package agentproc runs pull members' agents as the end-to-end tests (test/pull) and the
// fleet benchmark (bench/fleet) do: each member joined with `rewind clusters join`, as a
// person joins it, and each agent (`rewind agent` or `rewind-controller agent`) a process of
// its own, as it would be a pod in its cluster, started and stopped by its PID.
package agentproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// BuildRewind builds the rewind CLI (./cmd/rewind) into dir and returns its path.
func BuildRewind(dir string) (string, error) {
	root, err := testbed.RepoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "rewind")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rewind")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building rewind: %w\n%s", err, out)
	}
	return bin, nil
}

// Join runs `rewind clusters join cluster` against the hub of hubKubeconfig, writing the
// agent's bootstrap kubeconfig to bootstrap; extra are more flags (--label, --bind).
func Join(ctx context.Context, rewind, hubKubeconfig, cluster, bootstrap string, extra ...string) error {
	args := append([]string{"clusters", "join", cluster, "--bootstrap-kubeconfig", bootstrap, "--kubeconfig", hubKubeconfig}, extra...)
	if out, err := exec.CommandContext(ctx, rewind, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("rewind clusters join %s: %w\n%s", cluster, err, out)
	}
	return nil
}

// Options say how to run a member's agent.
type Options struct {
	// Bin is rewind or rewind-controller: both have the agent command.
	Bin string
	// Cluster is the member's name in the hub.
	Cluster string
	// CredentialFile keeps the agent's hub credential; BootstrapFile is what Join wrote,
	// passed only while CredentialFile does not exist yet (the agent has not joined).
	CredentialFile, BootstrapFile string
	// MemberKubeconfig is the member's kubeconfig.
	MemberKubeconfig string
	// Args are more flags of the agent command.
	Args []string
	// Log is the file the agent's output is appended to.
	Log string
}

// Agent is a pull member's agent process.
type Agent struct {
	o    Options
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the agent of o.
func Start(o Options) (*Agent, error) {
	a := &Agent{o: o}
	return a, a.Start()
}

// Start starts the agent again (after Stop, or after it ended).
func (a *Agent) Start() error {
	args := append([]string{"agent", "--cluster", a.o.Cluster, "--credential-file", a.o.CredentialFile,
		"--member-kubeconfig", a.o.MemberKubeconfig}, a.o.Args...)
	if _, err := os.Stat(a.o.CredentialFile); err != nil {
		args = append(args, "--bootstrap-kubeconfig", a.o.BootstrapFile)
	}
	log, err := os.OpenFile(a.o.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(a.o.Bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	// Killed with the process that started it, should that end first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting the agent of %s: %w", a.o.Cluster, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	a.mu.Lock()
	a.cmd, a.done = cmd, done
	a.mu.Unlock()
	return nil
}

// Stop sends sig to the agent's process (by its PID) and waits for it to end, killing it
// after 30 s.
func (a *Agent) Stop(sig syscall.Signal) {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Exited says whether the agent's process ended.
func (a *Agent) Exited() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// PID is the agent's current process ID (0 before it started).
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return 0
	}
	return a.cmd.Process.Pid
}
