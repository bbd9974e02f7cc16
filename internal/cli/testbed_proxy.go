package cli

import (
	"fmt"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// newTestbedProxyCommand is the hidden `rewind testbed proxy`: the latency proxy that
// `testbed up --member-latency` starts in its own process, so that it keeps running after `up`
// returns; `testbed down` stops it by its process-group id like the other processes.
func newTestbedProxyCommand() *cobra.Command {
	var latency time.Duration
	var routes []string
	cmd := &cobra.Command{
		Use:    "proxy --latency DURATION --route LISTEN=TARGET...",
		Short:  "Forward TCP connections with a delay (started by 'testbed up --member-latency')",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if latency <= 0 {
				return fmt.Errorf("--latency must be positive, got %s", latency)
			}
			if len(routes) == 0 {
				return fmt.Errorf("at least one --route LISTEN=TARGET is required")
			}
			var rs []testbed.ProxyRoute
			for _, s := range routes {
				r, err := testbed.ParseProxyRoute(s)
				if err != nil {
					return err
				}
				rs = append(rs, r)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return testbed.RunLatencyProxy(ctx, latency, rs)
		},
	}
	cmd.Flags().DurationVar(&latency, "latency", 0, "delay of every chunk of bytes in each direction")
	cmd.Flags().StringArrayVar(&routes, "route", nil, "LISTEN=TARGET address pair (repeatable)")
	return cmd
}
