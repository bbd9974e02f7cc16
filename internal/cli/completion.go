package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// addDefaultCommands adds cobra's `help` and `completion bash|zsh|fish|powershell` commands
// now rather than when the command runs, so that they get examples and the same checks as
// every other command.
func addDefaultCommands(root *cobra.Command) {
	root.InitDefaultHelpCmd()
	// cobra's completion commands keep the writer they are created with; lateOut makes them
	// write to the root's output as set when they run (SetOut is called after this).
	root.SetOut(lateOut{root})
	root.InitDefaultCompletionCmd()
	root.SetOut(nil)

	name := root.Name()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = fmt.Sprintf("  %s help snapshot take\n  %s help rollout", name, name)
		case "completion":
			c.Example = fmt.Sprintf("  source <(%s completion bash)\n  %s completion zsh > \"${fpath[1]}/_%s\"", name, name, name)
			c.Long += `
To complete 'kubectl rewind ...' (kubectl 1.26 and later), put kubectl_complete-rewind on
the PATH next to kubectl-rewind: 'make build' links both to bin/rewind. kubectl runs it with
the words typed after 'kubectl rewind'.
`
			for _, sh := range c.Commands() {
				sh.Example = completionExamples(name, sh.Name())
			}
		}
	}
}

func completionExamples(name, shell string) string {
	switch shell {
	case "bash":
		return fmt.Sprintf("  source <(%[1]s completion bash)\n  %[1]s completion bash > ~/.local/share/bash-completion/completions/%[1]s", name)
	case "zsh":
		return fmt.Sprintf("  source <(%[1]s completion zsh)\n  %[1]s completion zsh > \"${fpath[1]}/_%[1]s\"", name)
	case "fish":
		return fmt.Sprintf("  %[1]s completion fish | source\n  %[1]s completion fish > ~/.config/fish/completions/%[1]s.fish", name)
	case "powershell":
		return fmt.Sprintf("  %[1]s completion powershell | Out-String | Invoke-Expression", name)
	}
	return ""
}

// lateOut writes to the root command's output as it is when written to.
type lateOut struct{ root *cobra.Command }

func (w lateOut) Write(p []byte) (int, error) {
	return w.root.OutOrStdout().Write(p)
}
