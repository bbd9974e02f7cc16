//go:build !unit

package notification

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub (no member: notifications read the hub only).
var env *testbed.Testbed

func TestMain(m *testing.M) { testenv.Main(m, testbed.Options{}, &env) }
