// Command rewind releases Kubernetes operators to many clusters in waves and can always bring
// them back. Installed as kubectl-rewind it is also a kubectl plugin (`kubectl rewind ...`),
// and as kubectl_complete-rewind it completes `kubectl rewind ...` for kubectl's shell completion.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rewind-dev/rewind/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := cli.NewCommandFor(os.Args[0], os.Args[1:]).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
