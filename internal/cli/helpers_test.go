package cli

import (
	"context"
	"net"
	"strconv"
	"testing"
)

// Helpers of both the tests that need no cluster (usage_test.go) and those that run against
// the testbed.

// testCommit is the git commit the test releases are built from.
const testCommit = "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90"

// run executes the rewind command line in-process and returns its output.
func run(ctx context.Context, args ...string) (string, error) { return Run(ctx, args...) }

// freeAddr returns a free 127.0.0.1 address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
