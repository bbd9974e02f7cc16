package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/install"
)

func newInstallCommand(h *hubFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "install",
		Short: "Install rewind's CRDs (rewind.dev/v1alpha1) and the rewind-system namespace into the hub",
		Long: `Creates or updates the rewind.dev/v1alpha1 CRDs (MemberCluster, OperatorRelease, Rollout,
Snapshot) and the rewind-system namespace in the hub, and waits until the CRDs are
Established. Running it again upgrades the CRDs in place.`,
		Example: `  rewind install --kubeconfig hub.kubeconfig
  rewind install --context hub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			if err := install.Hub(cmd.Context(), c); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "rewind.dev CRDs installed and Established")
			return nil
		},
	}
}
