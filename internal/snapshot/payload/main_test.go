//go:build !unit

package payload

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) { testenv.Main(m, testbed.Options{}, &env) } // hub only

// hubClient returns a client of the hub API server (no cache) and a fresh namespace.
func hubClient(t *testing.T) (client.Client, string) {
	t.Helper()
	cfg := env.Hub.RESTConfig()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, testenv.Namespace(t, cfg)
}
