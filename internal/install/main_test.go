//go:build !unit

package install_test

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is this package's testbed: a hub alone. The install manifests, the shipped RBAC and the
// CRDs' discovery are checked against its real API server.
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 0}, &env)
}
