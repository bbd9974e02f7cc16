//go:build !unit

package patch

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub alone.
var env *testbed.Testbed

func TestMain(m *testing.M) { testenv.Main(m, testbed.Options{}, &env) }
