package cli

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// annotationOneOf on a command lists flags of which at least one must be set.
const annotationOneOf = "rewind.dev/one-of-flags"

// requireFlags marks flags every invocation must set; a missing one fails with its name, its
// meaning and an example (checkRequiredFlags), before anything is read from a cluster.
func requireFlags(cmd *cobra.Command, names ...string) {
	for _, n := range names {
		if err := cmd.MarkFlagRequired(n); err != nil {
			panic(err) // a programming error: the flag does not exist
		}
	}
}

// requireOneOf says at least one of the flags must be set.
func requireOneOf(cmd *cobra.Command, names ...string) {
	cmd.MarkFlagsOneRequired(names...)
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationOneOf] = strings.Join(names, " ")
}

// checkRequiredFlags fails when a required flag is not set, naming each one and showing an
// example. It runs before cobra's own check, whose message shows no fix.
func checkRequiredFlags(cmd *cobra.Command, _ []string) error {
	var missing, problems []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if req := f.Annotations[cobra.BashCompOneRequiredFlag]; len(req) == 1 && req[0] == "true" && f.Value.String() == "" {
			missing = append(missing, fmt.Sprintf("--%s (%s)", f.Name, strings.TrimSuffix(f.Usage, " (required)")))
		}
	})
	switch len(missing) {
	case 0:
	case 1:
		problems = append(problems, "missing required flag "+missing[0])
	default:
		problems = append(problems, "missing required flags "+strings.Join(missing, ", "))
	}
	if group := strings.Fields(cmd.Annotations[annotationOneOf]); len(group) > 0 {
		set := false
		for _, n := range group {
			set = set || cmd.Flags().Changed(n)
		}
		if !set {
			problems = append(problems, "missing one of the flags --"+strings.Join(group[:len(group)-1], ", --")+" or --"+group[len(group)-1])
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s%s", strings.Join(problems, "; "), usageHint(cmd))
}

// usageHint ends a usage error: the command's first example and where its help is.
func usageHint(cmd *cobra.Command) string {
	var b strings.Builder
	if ex := firstExample(cmd.Example, cmd.CommandPath()+" "); ex != "" {
		fmt.Fprintf(&b, "\nFor example:\n%s", ex)
	}
	fmt.Fprintf(&b, "\nSee '%s --help'.", cmd.CommandPath())
	return b.String()
}

// firstExample returns the first command of an Example that starts with prefix (else its
// first command), with its continuation lines.
func firstExample(example, prefix string) string {
	var first string
	var lines []string
	for _, l := range strings.Split(example, "\n") {
		t := strings.TrimSpace(l)
		if len(lines) == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		lines = append(lines, l)
		if strings.HasSuffix(t, `\`) {
			continue
		}
		ex := strings.Join(lines, "\n")
		if strings.HasPrefix(strings.TrimSpace(ex)+" ", prefix) {
			return ex
		}
		if first == "" {
			first = ex
		}
		lines = nil
	}
	return first
}

// flagError names the command's help after a flag error (an unknown flag, a bad value).
func flagError(cmd *cobra.Command, err error) error {
	return fmt.Errorf("%w\nSee '%s --help'.", err, cmd.CommandPath())
}

// explainArgs makes a wrong number of arguments show the usage line and an example.
func explainArgs(cmd *cobra.Command) {
	validate := cmd.Args
	if validate == nil {
		return
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if err := validate(cmd, args); err != nil {
			return fmt.Errorf("%w\nUsage: %s%s", err, cmd.UseLine(), usageHint(cmd))
		}
		return nil
	}
}

// unknownSubcommand rejects `rewind GROUP NOPE`; without it cobra prints the group's help and
// exits 0.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return fmt.Errorf("%s\nSee '%s --help' for its commands.", msg, cmd.CommandPath())
}

// examplePrefix matches an example line that runs rewind.
var examplePrefix = regexp.MustCompile(`(?m)^(\s*)rewind `)

// polish gives every command under root the same behaviour: examples that read the way the
// user runs rewind (prog), errors that show the fix, group commands that reject unknown
// subcommands, and no file names offered where no file is expected.
func polish(root *cobra.Command, prog string) {
	root.SetFlagErrorFunc(flagError)
	root.PersistentPreRunE = checkRequiredFlags
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if prog != programName {
			c.Example = examplePrefix.ReplaceAllString(c.Example, "${1}"+prog+" ")
		}
		switch {
		case c.HasSubCommands() && c.HasParent():
			if !c.Runnable() {
				c.Args = unknownSubcommand
				c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
			}
		case !c.HasSubCommands():
			explainArgs(c)
			if c.ValidArgsFunction == nil {
				c.ValidArgsFunction = cobra.NoFileCompletions
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
