// Package cli holds the cobra commands of the rewind binary.
package cli

import (
	"bytes"
	"context"
	"github.com/rewind-dev/rewind/internal/agentcmd"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// The names the binary answers to.
const (
	// programName is the binary's own name.
	programName = "rewind"
	// pluginName is the kubectl plugin: kubectl runs it for `kubectl rewind ...`.
	pluginName = "kubectl-rewind"
	// pluginDisplayName is how usage lines read when rewind runs as the kubectl plugin.
	pluginDisplayName = "kubectl rewind"
	// pluginCompletionName is what kubectl (1.26 and later) runs to complete `kubectl rewind ...`;
	// it gets the words typed after `kubectl rewind`.
	pluginCompletionName = "kubectl_complete-rewind"
)

// NewRootCommand returns the `rewind` command with every subcommand.
func NewRootCommand() *cobra.Command {
	return newRoot(programName)
}

// Run executes the rewind command line args in this process and returns what it printed
// (stdout and stderr together): for the demo and for tests.
func Run(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := NewRootCommand()
	cmd.SetArgs(append([]string{}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// NewCommandFor returns the root command for a process started as argv0 with args: `rewind`,
// the kubectl plugin `kubectl-rewind` (usage lines read `kubectl rewind ...`), or
// `kubectl_complete-rewind`, the shell-completion hook kubectl runs for the plugin.
func NewCommandFor(argv0 string, args []string) *cobra.Command {
	args = append([]string{}, args...) // never nil: cobra would read os.Args
	var root *cobra.Command
	switch strings.TrimSuffix(filepath.Base(argv0), ".exe") {
	case pluginName:
		root = newRoot(pluginName)
	case pluginCompletionName:
		root = newRoot(pluginName)
		args = append([]string{cobra.ShellCompRequestCmd}, args...)
	default:
		root = newRoot(programName)
	}
	root.SetArgs(args)
	return root
}

// newRoot builds the command tree; name is the program name, programName or pluginName.
func newRoot(name string) *cobra.Command {
	root := &cobra.Command{
		Use:   name,
		Short: "Release Kubernetes operators to many clusters in waves, and always bring them back",
		Example: `  rewind testbed up --members 3
  rewind clusters add member1 --kubeconfig member1.kubeconfig
  rewind release create mysql-v1 --operator mysql-operator --version 1.0.0 \
      --git-commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 \
      --image registry.example.com/mysql-operator:3f2a9c1 --manifests ./deploy
  rewind rollout status mysql --watch
  rewind rollback mysql`,
		Long: `rewind releases an operator to many member clusters in waves. Before every change it
snapshots each cluster's operator state (CRDs, every custom resource with its status, and
everything the operator created); after the change it gates on health; when a gate fails it
rolls every changed cluster back, exactly, including CRD storage versions.

Every command talks to the hub cluster chosen as kubectl chooses it: --kubeconfig, else the
files of $KUBECONFIG, else ~/.kube/config; --context picks a context and -n a namespace.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	h := &hubFlags{prog: programName}
	if name == pluginName {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: pluginDisplayName}
		h.prog = pluginDisplayName
	}
	h.register(root)
	root.AddCommand(newControllerCommand(h))
	root.AddCommand(agentcmd.New())
	root.AddCommand(newInstallCommand(h))
	root.AddCommand(newNamespaceCommand(h))
	root.AddCommand(newClustersCommand(h))
	root.AddCommand(newReleaseCommand(h))
	root.AddCommand(newSnapshotCommand(h))
	root.AddCommand(newRolloutCommand(h))
	root.AddCommand(newRollbackCommand(h))
	root.AddCommand(newRetryCommand(h))
	root.AddCommand(newHistoryCommand(h))
	root.AddCommand(newPlanCommand(h))
	root.AddCommand(newDashboardCommand(h))
	root.AddCommand(newTestbedCommand())
	root.AddCommand(newDemoCommand())
	root.AddCommand(newVersionCommand())
	addDefaultCommands(root)
	polish(root, h.prog)
	return root
}
