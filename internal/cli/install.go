package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/install"
)

func newInstallCommand(h *hubFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "install",
		Short:   "Install rewind's CRDs (rewind.dev/v1alpha1) and the rewind-system namespace into the hub",
		Example: `  rewind install --kubeconfig hub.kubeconfig`,
		Args:    cobra.NoArgs,
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
