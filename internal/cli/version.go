package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/rewind-dev/rewind/internal/version"
)

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, git commit, Go version and build date of this binary",
		Long: `Prints what this binary was built from: the release version, the git commit, the build date
(set by make build) and the Go toolchain. It reads nothing from a cluster.`,
		Example: `  rewind version
  rewind version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := version.Get()
			if ok, err := printStructured(cmd.OutOrStdout(), output, v); ok {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "Version:\t%s\n", v.Version)
			fmt.Fprintf(w, "Commit:\t%s\n", dash(v.Commit))
			fmt.Fprintf(w, "Build date:\t%s\n", dash(v.BuildDate))
			fmt.Fprintf(w, "Go version:\t%s\n", v.GoVersion)
			fmt.Fprintf(w, "Platform:\t%s\n", v.Platform)
			return w.Flush()
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
