package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/testbed"
)

func newDemoCommand() *cobra.Command {
	var members int
	var binDir string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a local hub and member clusters and show what to try (Ctrl-C tears everything down)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "==> Starting a testbed: hub + %d members with workloads\n", members)
			tb, err := testbed.Start(cmd.Context(), testbed.Options{
				Members: members, Workloads: true, BinDir: binDir, Log: out,
			})
			if err != nil {
				return err
			}
			defer tb.Stop()
			fmt.Fprintf(out, "==> Ready in %s\n\n", tb.StartupTime.Round(100*time.Millisecond))
			printClusters(out, tb.Clusters())
			kubectl := "kubectl"
			if k := tb.Kubectl(); k != "" {
				kubectl = k
			}
			m1 := tb.Hub.Kubeconfig
			if len(tb.Members) > 0 {
				m1 = tb.Members[0].Kubeconfig
			}
			fmt.Fprintf(out, "\nTry, in another terminal:\n")
			fmt.Fprintf(out, "  %s --kubeconfig %s get nodes\n", kubectl, m1)
			fmt.Fprintf(out, "  %s --kubeconfig %s create deployment web --image=nginx --replicas=2\n", kubectl, m1)
			fmt.Fprintf(out, "  %s --kubeconfig %s get deployments,pods -o wide\n", kubectl, m1)
			fmt.Fprintf(out, "  %s --kubeconfig %s get namespaces\n", kubectl, tb.Hub.Kubeconfig)
			fmt.Fprintf(out, "\nPress Ctrl-C to tear everything down.\n")
			// main's signal context is cancelled by Ctrl-C (SIGINT) or SIGTERM.
			<-cmd.Context().Done()
			fmt.Fprintln(out, "\n==> Tearing down")
			return tb.Stop()
		},
	}
	cmd.Flags().IntVar(&members, "members", 3, "number of member clusters")
	cmd.Flags().StringVar(&binDir, "bin-dir", os.Getenv(testbed.BinDirEnv), "folder with the testbed binaries ($"+testbed.BinDirEnv+")")
	return cmd
}
