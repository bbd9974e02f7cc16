//go:build !unit

// Package orchestration runs how the controller orchestrates a rollout, end to end against a
// real hub and three member clusters with workloads (kube-controller-manager, scheduler and
// kwok per member): stalls and recoveries, approvals, retries, clusters of a wave in parallel,
// preflight gates and a GitOps tool beside an automatic rollback. test/e2e runs the rollout
// pipeline itself (waves, failure policies, crashes); the two packages run side by side, each
// with its own testbed.
package orchestration

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

// suite is the package's testbed and hub.
var suite fleet.Suite

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true}, &suite.Env)
}

// Shorthands for the suite's helpers.
var (
	hub          = suite.Hub
	newFleet     = suite.New
	memberClient = fleet.MemberClient
	rewind       = suite.Rewind
	makeRelease  = suite.MakeRelease
)

// healthy is the release variant whose operator becomes Available everywhere.
const healthy = fleet.Healthy

// startManager runs a manager (crashing at a step where crashAt says) until the test ends.
func startManager(t *testing.T, ns string, crashAt func(cluster, step string) bool) (stop func()) {
	t.Helper()
	return suite.StartManager(t, ns, controller.Options{CrashAt: crashAt})
}
