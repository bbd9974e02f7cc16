// Package cli holds the cobra commands of the rewind binary.
package cli

import (
	"github.com/spf13/cobra"
)

// NewRootCommand returns the `rewind` command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rewind",
		Short: "Release Kubernetes operators to many clusters in waves, and always bring them back",
		Long: `rewind releases an operator to many member clusters in waves. Before every change it
snapshots each cluster's operator state (CRDs, every custom resource with its status, and
everything the operator created); after the change it gates on health; when a gate fails it
rolls every changed cluster back, exactly, including CRD storage versions.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	h := &hubFlags{}
	h.register(root)
	root.AddCommand(newControllerCommand(h))
	root.AddCommand(newInstallCommand(h))
	root.AddCommand(newClustersCommand(h))
	root.AddCommand(newReleaseCommand(h))
	root.AddCommand(newSnapshotCommand(h))
	root.AddCommand(newRolloutCommand(h))
	root.AddCommand(newRollbackCommand(h))
	root.AddCommand(newHistoryCommand(h))
	root.AddCommand(newTestbedCommand())
	root.AddCommand(newDemoCommand())
	return root
}
