// Command rewind-controller is rewind's manager, the binary the rewind image runs: the
// reconcilers against a hub cluster. It carries none of the CLI's test harness, demo or
// sample operator (TestShippedBinaryHygiene checks it).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rewind-dev/rewind/internal/agentcmd"
	"github.com/rewind-dev/rewind/internal/controllercmd"
	"github.com/rewind-dev/rewind/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var kubeconfig, kubecontext string
	var showVersion bool
	cmd := &cobra.Command{
		Use:   "rewind-controller",
		Short: "Run the rewind manager (the reconcilers) against a hub cluster",
		Long:  controllercmd.Long,
		Example: `  # in a pod: the pod's service account, two replicas with leader election
  rewind-controller --leader-elect
  # out of cluster, against a hub given by a kubeconfig, with readable logs
  rewind-controller --kubeconfig ~/.kube/hub.yaml --dev-log --metrics-secure=false`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o, devLog := controllercmd.AddFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the hub (default: $KUBECONFIG, ~/.kube/config, else the pod's service account)")
	f.StringVar(&kubecontext, "context", "", "kubeconfig context of the hub (default: the current context)")
	f.BoolVar(&showVersion, "version", false, "print the version and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if showVersion {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "rewind-controller", version.Get())
			return err
		}
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: kubecontext}).ClientConfig()
		if err != nil {
			return fmt.Errorf("loading the hub's client configuration (--kubeconfig, $KUBECONFIG, or the pod's service account): %w", err)
		}
		return controllercmd.Run(cmd, cfg, o, *devLog)
	}
	// The image runs a pull member's agent too: rewind-controller agent --cluster NAME ...
	cmd.AddCommand(agentcmd.New())
	return cmd
}
