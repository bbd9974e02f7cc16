//go:build !unit

package ha

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed/testenv"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rewind-dev/rewind/internal/controller"
)

// Leader election of the processes under test: short, so that the test is quick, and exposed
// as flags of rewind-controller.
const (
	leaseDuration = 5 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = 500 * time.Millisecond
	// retryJitter is client-go's leader-election jitter factor: a candidate retries every
	// retryPeriod to (1+retryJitter)*retryPeriod.
	retryJitter = 1.2
)

// takeoverBound is how long after the leader died a standby must lead. A standby counts the
// lease duration from the moment it observed the leader's last renewal (client-go's
// leader election), which it sees at most one jittered retry period late; it then takes the
// expired lease at its next try, at most one more jittered retry period later. The leader's
// last renewal was before its death. One more second covers process scheduling on a loaded
// 2-core machine.
var takeoverBound = leaseDuration + 2*time.Duration((1+retryJitter)*float64(retryPeriod)) + time.Second

// buildController builds rewind-controller as make image does (static, -trimpath).
func buildController(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build rewind-controller: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "rewind-controller")
	cmd := exec.Command(goBin, "build", "-trimpath", "-tags", "disable_grpc_modules", "-o", bin, "github.com/rewind-dev/rewind/cmd/rewind-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build rewind-controller: %v\n%s", err, out)
	}
	return bin
}

// proc is one rewind-controller process the test started, in its own process group.
type proc struct {
	name    string
	cmd     *exec.Cmd
	done    chan struct{}
	metrics string
	logPath string
}

// procs are every process a test started; stopAll stops those still running.
type procs struct {
	mu  sync.Mutex
	all []*proc
}

// start runs rewind-controller with leader election against the hub of kubeconfig.
func (ps *procs) start(t *testing.T, bin, kubeconfig, name string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{}), metrics: testenv.FreeAddr(t), logPath: filepath.Join(t.TempDir(), name+".log")}
	lf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--leader-elect", "--leader-election-namespace=rewind-system",
		"--leader-election-lease-duration="+leaseDuration.String(),
		"--leader-election-renew-deadline="+renewDeadline.String(),
		"--leader-election-retry-period="+retryPeriod.String(),
		"--metrics-bind-address="+p.metrics, "--metrics-secure=false",
		"--health-probe-bind-address="+testenv.FreeAddr(t),
		"--gate-poll=300ms")
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	p.cmd.Env = append(os.Environ(), "GOMAXPROCS=2")
	// Its own process group, stopped by id; killed if the test binary dies.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); lf.Close(); close(p.done) }()
	ps.mu.Lock()
	ps.all = append(ps.all, p)
	ps.mu.Unlock()
	return p
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL to the process group: no lease release, no cleanup.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) survived SIGKILL for 10s", p.name, p.cmd.Process.Pid)
	}
}

// stop sends SIGTERM (the manager releases its lease and exits), then SIGKILL after a grace.
func (p *proc) stop() {
	if !p.alive() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(20 * time.Second):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stopAll stops every process still running and checks that none is left.
func (ps *procs) stopAll(t *testing.T) {
	ps.mu.Lock()
	all := append([]*proc(nil), ps.all...)
	ps.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	for _, p := range all {
		if err := syscall.Kill(-p.cmd.Process.Pid, 0); err == nil {
			t.Errorf("%s (process group %d) is still running", p.name, p.cmd.Process.Pid)
		}
	}
}

// logTail returns the end of the process's log (controller logs carry no Secret data).
func (p *proc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// isLeader reads controller-runtime's leader_election_master_status gauge from the process's
// metrics endpoint.
func (p *proc) isLeader(ctx context.Context) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return false, err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	want := fmt.Sprintf(`leader_election_master_status{name=%q} `, controller.LeaderElectionID)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			return v == "1", nil
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return false, sc.Err()
}

// leader waits until exactly one of the running processes leads, and returns it.
func (ps *procs) leader(t *testing.T, ctx context.Context) *proc {
	t.Helper()
	var leader *proc
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ps.mu.Lock()
		all := append([]*proc(nil), ps.all...)
		ps.mu.Unlock()
		leader = nil
		n := 0
		for _, p := range all {
			if !p.alive() {
				continue
			}
			if ok, err := p.isLeader(ctx); err == nil && ok {
				leader = p
				n++
			}
		}
		return n == 1, nil
	})
	if err != nil {
		t.Fatalf("no single leader among the controller processes within a minute: %v", err)
	}
	return leader
}
