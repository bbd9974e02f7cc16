//go:build !unit

package cli

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/agent"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// logLines keeps what a logger wrote, line by line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// TestAgentWorkStartsAgainAfterTheHubWasAway: the agent's work (its controller of the member's
// targets, on the hub) whose cache does not sync in time, the hub answering none of its lists
// (503 from a fault proxy between the agent and the hub), starts again once the hub answers, and
// the agent goes on. Before, the work's "timed out waiting for cache to be synced" stopped the
// agent. The cache's timeout is 2 s here (controller-runtime's default is 2 minutes).
func TestAgentWorkStartsAgainAfterTheHubWasAway(t *testing.T) {
	const name = "agent-edge-sync"
	boot := joinMember(t, name)
	targets := "/apis/rewind.dev/v1alpha1/namespaces/" + v1alpha1.MemberNamespace(name) + "/rollouttargets"
	proxy, err := env.Hub.StartFaultProxy(testbed.Faults{HTTP: testbed.HTTPFaults{
		Fraction: 1, Codes: []int{http.StatusServiceUnavailable}, PathPrefixes: []string{targets}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	boot.Host = proxy.Server
	logs := &logLines{}
	ctx, cancel := context.WithCancel(ctrl.LoggerInto(context.Background(), funcr.New(logs.write, funcr.Options{})))
	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: filepath.Join(t.TempDir(), "credential.json")},
		Member: env.Members[0].RESTConfig(), CredentialTTL: time.Hour, HeartbeatInterval: 200 * time.Millisecond, CacheSyncTimeout: 2 * time.Second}
	finished := make(chan struct{})
	var res error
	go func() { res = agent.Run(ctx, o); close(finished) }()
	t.Cleanup(func() { cancel(); <-finished })
	waitLog := func(what, line string) {
		t.Helper()
		poll(t, what, func(context.Context) (bool, error) {
			select {
			case <-finished:
				return false, res
			default:
			}
			return logs.has(line), nil
		})
	}
	waitLog("the work stopped while the hub did not answer its lists", "the agent's work stopped while the hub did not answer")
	if n := proxy.Faults().Counts().HTTPFaults; n == 0 {
		t.Fatal("no list of the work was answered with a fault: the test proves nothing")
	}
	proxy.Faults().SetEnabled(false)
	waitLog("the work started again, its cache synced", "Starting workers")
	cancel()
	<-finished
	if res != nil {
		t.Fatalf("the agent stopped with %v", res)
	}
}
