//go:build !unit

package cli

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is the testbed shared by this package's tests: a hub and 2 members, each reached
// through the testbed's fault proxy (HTTP layer on, no fault until a test sets one:
// TestPlanRidesOutMemberFaults).
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 2, MemberFaults: &testbed.Faults{HTTPProxy: true}}, &env)
}
