//go:build !unit

package controller

import (
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is a hub with one member.
var env *testbed.Testbed

func TestMain(m *testing.M) { testenv.Main(m, testbed.Options{Members: 1}, &env) }
