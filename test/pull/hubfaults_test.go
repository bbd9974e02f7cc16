//go:build !unit

package pull

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// TestAgentsRideOutTheirWayToTheHub: the pull members' agents reach the hub through a fault
// proxy that resets their connections every 3 s and answers a fifth of their requests with
// 429, 500, 503 or 504 through an upgrade, and loses the answers of their first writes (done
// by the hub) through a person's rollback (the way a WAN or a corporate proxy between an
// edge site and its hub behaves). Their targets, copies and
// heartbeats go on: both members end upgraded, then restored to their snapshots object by
// object, and neither agent stops. (TestAgentRidesOutFaults covers the way from an agent to its
// own cluster.)
func TestAgentsRideOutTheirWayToTheHub(t *testing.T) {
	joined(t)
	proxy, err := suite.Env.Hub.StartFaultProxy(testbed.Faults{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	f := suite.New(t, allAtOnce())
	agents := map[string]*agent{}
	for _, name := range pullMembers {
		bind(t, name, f.NS)
		agents[name] = startAgentVia(t, name, proxy.Server)
	}
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)
	f.Populate()

	if err := proxy.Faults().Set(testbed.Faults{HTTPProxy: true, ResetEvery: 3 * time.Second,
		HTTP: testbed.HTTPFaults{Fraction: 0.2, Codes: []int{429, 500, 503, 504}}}); err != nil {
		t.Fatal(err)
	}
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 6*time.Minute)
	snaps := f.SnapshotsOf(ro.Status.Revision)
	// The rollback: the agents' first four writes of rewind.dev objects (their copies' status as
	// the restore starts and goes on) are done by the hub and their answers lost. Not a random
	// fraction: an agent writes to the hub only a few times in a rollback (its journal is in its
	// member, its progress paced), and runs at a fifth, then at a third, of its writes met no
	// lost answer at all.
	upgrade := proxy.Faults().Counts()
	if err := proxy.Faults().Set(testbed.Faults{HTTPProxy: true, ResetEvery: 3 * time.Second,
		HTTP: testbed.HTTPFaults{Fraction: 1, LoseAnswers: true, MutatingOnly: true, Max: 4, PathPrefixes: []string{"/apis/rewind.dev/"}}}); err != nil {
		t.Fatal(err)
	}
	suite.Rewind(t, f.NS, "rollback", f.Name, "--reason", "under faults of the way to the hub")
	f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 6*time.Minute)
	injected := proxy.Faults().Counts()
	proxy.Faults().SetEnabled(false)
	if upgrade.HTTPFaults == 0 || injected.ConnsReset == 0 || injected.HTTPByCode[0] == 0 {
		t.Fatalf("a fault was not injected on the way to the hub (%s): the test proves less than it says", injected)
	}
	t.Logf("faults injected on the agents' way to the hub: %s", injected)
	for name, a := range agents {
		if a.exited() {
			t.Errorf("the agent of %s exited under faults of its way to the hub", name)
		}
	}
	assertRolledBack(t, f, "mysql-a", snaps)
}

// startAgentVia runs the agent of a pull member until the test ends, reaching the hub at
// server: with a copy of its stored credential (the agents joined once per run) whose hub
// server is server, in the test's own folder.
func startAgentVia(t *testing.T, name, server string) *agent {
	t.Helper()
	stored := filepath.Join(suite.Env.StateDir, name+".credential.json")
	if _, err := os.Stat(stored); errors.Is(err, fs.ErrNotExist) {
		// No agent of this member ran yet: one trades the bootstrap token and stops.
		first := startAgent(t, name)
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, err := os.Stat(stored)
			return err == nil, nil
		})
		first.stop(syscall.SIGTERM)
		if err != nil {
			t.Fatalf("the agent of %s did not store its credential: %v", name, err)
		}
	}
	b, err := os.ReadFile(stored)
	if err != nil {
		t.Fatalf("the stored credential of %s (its agent joined before): %v", name, err)
	}
	var cred map[string]any
	if err := json.Unmarshal(b, &cred); err != nil {
		t.Fatal(err)
	}
	cred["server"] = server
	if b, err = json.Marshal(cred); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".credential.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return startAgentWith(t, name, file, filepath.Join(suite.Env.StateDir, name+".agent-via-proxy.log"))
}
