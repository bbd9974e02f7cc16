package cli

import (
	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/controllercmd"
)

// newControllerCommand is `rewind controller`: the same manager, with the same flags, as the
// rewind-controller binary the image runs (handy out of cluster next to the CLI).
func newControllerCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the rewind manager (the reconcilers) against a hub cluster",
		Long:  controllercmd.Long + "\n\nThe rewind image runs the same manager as the rewind-controller binary.",
		Example: `  # out of cluster, against a hub given by a kubeconfig
  rewind controller --kubeconfig ~/.kube/hub.yaml --leader-elect
  # against the hub context of a merged $KUBECONFIG, with readable logs and plain-HTTP metrics
  KUBECONFIG=~/.kube/config:~/.kube/fleet.yaml rewind controller --context hub --dev-log --metrics-secure=false`,
		Args: cobra.NoArgs,
	}
	o, devLog := controllercmd.AddFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := h.managerConfig()
		if err != nil {
			return err
		}
		return controllercmd.Run(cmd, cfg, o, *devLog)
	}
	return cmd
}
