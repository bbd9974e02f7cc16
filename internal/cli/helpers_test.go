package cli

import (
	"context"
)

// Helpers of both the tests that need no cluster (usage_test.go) and those that run against
// the testbed.

// testCommit is the git commit the test releases are built from.
const testCommit = "3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90"

// run executes the rewind command line in-process and returns its output.
func run(ctx context.Context, args ...string) (string, error) { return Run(ctx, args...) }
