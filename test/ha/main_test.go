//go:build !unit

// Package ha checks that rewind's controller survives the loss of its leader. Two
// rewind-controller processes (the binary the image runs, built by the test) run against a real
// hub with leader election, as the controller's ServiceAccount with the shipped RBAC
// (testenv.ControllerConfig); the member is reached as the rewind-member ServiceAccount of
// config/member. The leader is killed with SIGKILL during a snapshot and again during a restore:
// the standby must take over within the lease duration, and the rollout must end exactly as an
// uninterrupted one does.
package ha

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub and one member with workloads (kube-controller-manager, scheduler, kwok).
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1, Workloads: true}, &env)
}
