package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/internal/testbed/testenv"

	"github.com/spf13/cobra"
)

// These tests need no cluster: they check flags, help, errors and completion scripts.

// runAs runs the command line in-process as the program argv0 and returns its output.
func runAs(ctx context.Context, argv0 string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := NewCommandFor(argv0, args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// complete runs `rewind __complete ARGS` as the program argv0 and returns what it offers
// (stdout, which the shell reads; cobra writes notes to stderr).
func complete(ctx context.Context, argv0 string, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := NewCommandFor(argv0, args)
	if filepath.Base(argv0) != pluginCompletionName {
		cmd = NewCommandFor(argv0, append([]string{cobra.ShellCompRequestCmd}, args...))
	}
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// leaves returns every visible command without subcommands.
func leaves(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		if !c.HasSubCommands() {
			out = append(out, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return out
}

// exampleCommands splits an Example into its command lines (continuations joined), leaving
// out comments.
func exampleCommands(example string) []string {
	var cmds []string
	cur := ""
	for _, l := range strings.Split(example, "\n") {
		t := strings.TrimSpace(l)
		if cur == "" && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, `\`) {
			cur += strings.TrimSuffix(t, `\`) + " "
			continue
		}
		cmds = append(cmds, cur+t)
		cur = ""
	}
	return cmds
}

// shellWords splits a command line on blanks, keeping double-quoted words whole, and stops
// at a comment, a redirection or a pipe.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		if r == '#' && !quoted && !inWord {
			break
		}
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	if i := slices.IndexFunc(words, func(s string) bool { return s == ">" || s == "|" }); i >= 0 {
		words = words[:i]
	}
	return words
}

func TestEveryLeafCommandHasLongHelpAndWorkingExamples(t *testing.T) {
	for _, leaf := range leaves(NewRootCommand()) {
		path := leaf.CommandPath()
		t.Run(path, func(t *testing.T) {
			if strings.TrimSpace(leaf.Long) == "" {
				t.Errorf("%s has no Long help", path)
			}
			if strings.TrimSpace(leaf.Example) == "" {
				t.Fatalf("%s has no Example", path)
			}
			ran := 0
			for _, line := range exampleCommands(leaf.Example) {
				words := shellWords(line)
				// Leading environment assignments (KUBECONFIG=... rewind ...).
				for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
					words = words[1:]
				}
				if len(words) == 0 || words[0] != "rewind" {
					continue // e.g. `source <(rewind completion bash)`
				}
				ran++
				// Each example names this very command, with flags that exist and parse, the
				// arguments it accepts and every required flag.
				cmd, rest, err := NewRootCommand().Find(words[1:])
				if err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
				if cmd.CommandPath() != path {
					t.Fatalf("example %q runs %q, not %q", line, cmd.CommandPath(), path)
				}
				if err := cmd.ParseFlags(rest); err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
				if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
				if err := checkRequiredFlags(cmd, nil); err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
			}
			if ran == 0 {
				t.Fatalf("no example of %s runs rewind:\n%s", path, leaf.Example)
			}
		})
	}
}

// commandsWithOutput are the commands that print objects or reports; each takes -o.
var commandsWithOutput = []string{
	"clusters add", "clusters list", "clusters check",
	"release create",
	"snapshot take", "snapshot list", "snapshot show", "snapshot diff", "snapshot verify", "snapshot restore", "snapshot import",
	"rollout status", "rollout approve", "rollout pause", "rollout resume", "rollback", "retry", "history", "plan",
	"testbed up", "testbed status",
	"version",
}

func TestOutputFlagOnEveryCommandThatPrintsObjects(t *testing.T) {
	// The commands without -o print no object or report: they run a process (controller,
	// demo), print one line (install, testbed down), or print a script or help.
	var have []string
	for _, leaf := range leaves(NewRootCommand()) {
		if leaf.Flags().Lookup("output") != nil {
			have = append(have, strings.TrimPrefix(leaf.CommandPath(), "rewind "))
		}
	}
	slices.Sort(have)
	want := slices.Sorted(slices.Values(commandsWithOutput))
	if !slices.Equal(have, want) {
		t.Fatalf("commands with -o: %v\nwant: %v", have, want)
	}

	// A bad value fails while the flags are parsed, naming the flag and the formats, before
	// the (missing) hub kubeconfig is read.
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	for _, path := range commandsWithOutput {
		t.Run(path, func(t *testing.T) {
			args := append(strings.Fields(path), "-o", "bogus")
			out, err := run(t.Context(), args...)
			if err == nil {
				t.Fatalf("-o bogus must fail:\n%s", out)
			}
			msg := err.Error()
			if !strings.Contains(msg, `invalid argument "bogus" for "-o, --output" flag: must be one of table, json, yaml`) ||
				!strings.Contains(msg, "See 'rewind "+path+" --help'") {
				t.Fatalf("the error must name the flag, the formats and the help:\n%s", msg)
			}
			if strings.Contains(msg, missing) {
				t.Fatalf("the kubeconfig was read before the flag was checked:\n%s", msg)
			}
			// Completion offers the three formats and no file names.
			out, err = complete(t.Context(), "rewind", append(strings.Fields(path), "-o", "")...)
			if err != nil || out != "table\njson\nyaml\n:4\n" {
				t.Fatalf("completion of -o: %v\n%q", err, out)
			}
		})
	}
}

func TestUsageErrorsShowTheFix(t *testing.T) {
	// The hub kubeconfig does not exist: every case fails before it is read.
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	cases := []struct {
		name string
		// args run as rewind; every case must fail before the hub is needed.
		args []string
		// want are substrings of the error.
		want []string
	}{
		{
			name: "unknown flag",
			args: []string{"snapshot", "list", "--bogus"},
			want: []string{"unknown flag: --bogus", "See 'rewind snapshot list --help'"},
		},
		{
			name: "unknown subcommand",
			args: []string{"snapshot", "lst"},
			want: []string{`unknown command "lst" for "rewind snapshot"`, "did you mean list?", "See 'rewind snapshot --help'"},
		},
		{
			name: "unknown command",
			args: []string{"snapshots-and-more"},
			want: []string{`unknown command "snapshots-and-more" for "rewind"`},
		},
		{
			name: "missing argument",
			args: []string{"snapshot", "show"},
			want: []string{"accepts 1 arg(s), received 0", "Usage: rewind snapshot show NAME [flags]", "For example:\n  rewind snapshot show ", "See 'rewind snapshot show --help'"},
		},
		{
			name: "too many arguments",
			args: []string{"rollout", "approve", "mysql", "canary", "extra"},
			want: []string{"accepts between 1 and 2 arg(s), received 3", "Usage: rewind rollout approve NAME [WAVE] [flags]"},
		},
		{
			name: "two required flags missing",
			args: []string{"snapshot", "take"},
			want: []string{"missing required flags --cluster (member cluster), --operator (operator)",
				"For example:\n  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator\n", "See 'rewind snapshot take --help'"},
		},
		{
			name: "one required flag missing",
			args: []string{"snapshot", "take", "--cluster", "prod-eu-1"},
			want: []string{"missing required flag --operator (operator)\n"},
		},
		{
			name: "required flag set empty",
			args: []string{"snapshot", "restore", "snap", "--cluster", ""},
			want: []string{"missing required flag --cluster (member cluster to restore)", "rewind snapshot restore "},
		},
		{
			name: "member kubeconfig of clusters add",
			args: []string{"clusters", "add", "prod-eu-1"},
			want: []string{"missing required flag --kubeconfig (kubeconfig FILE of the member cluster)", "rewind clusters add prod-eu-1 --kubeconfig prod-eu-1.yaml"},
		},
		{
			name: "clusters check",
			args: []string{"clusters", "check", "--operator", "mysql-operator"},
			want: []string{"missing required flag --expect (the OperatorRelease every cluster should run)"},
		},
		{
			name: "no release source",
			args: []string{"release", "create", "mysql-v1", "--operator", "mysql-operator", "--version", "1.0.0", "--git-commit", testCommit, "--image", "example.com/mysql-operator:" + testCommit},
			want: []string{"missing one of the flags --manifests, --chart, --bundle, --from, --repo or --git", "--from oci://registry.example.com/charts/mysql-operator:2.0.0@sha256:"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t.Context(), tc.args...)
			if err == nil {
				t.Fatalf("want an error, got none:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not contain %q:\n%s", w, err)
				}
			}
			if strings.Contains(err.Error(), missing) {
				t.Errorf("the kubeconfig was read before the usage was checked:\n%s", err)
			}
		})
	}

	// A group command without a subcommand prints its help and succeeds.
	out, err := run(t.Context(), "snapshot")
	if err != nil || !strings.Contains(out, "Available Commands:") || !strings.Contains(out, "take") {
		t.Fatalf("rewind snapshot: %v\n%s", err, out)
	}
}

func TestCompletionScripts(t *testing.T) {
	cases := []struct {
		argv0, shell string
		// want are substrings of the script.
		want []string
	}{
		{"rewind", "bash", []string{"__start_rewind()", "complete -o default -F __start_rewind rewind"}},
		{"rewind", "zsh", []string{"#compdef rewind", "compdef _rewind rewind"}},
		{"rewind", "fish", []string{"complete -c rewind"}},
		{"rewind", "powershell", []string{"Register-ArgumentCompleter", "-CommandName 'rewind'"}},
		// Run as the kubectl plugin, the script completes the kubectl-rewind command.
		{"/usr/local/bin/kubectl-rewind", "bash", []string{"__start_kubectl-rewind()", "complete -o default -F __start_kubectl-rewind kubectl-rewind"}},
		{"/usr/local/bin/kubectl-rewind", "zsh", []string{"#compdef kubectl-rewind"}},
		{"/usr/local/bin/kubectl-rewind", "fish", []string{"complete -c kubectl-rewind"}},
	}
	for _, tc := range cases {
		t.Run(filepath.Base(tc.argv0)+"/"+tc.shell, func(t *testing.T) {
			out, err := runAs(t.Context(), tc.argv0, "completion", tc.shell)
			if err != nil {
				t.Fatalf("completion %s: %v\n%s", tc.shell, err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the %s script does not contain %q", tc.shell, w)
				}
			}
		})
	}
}

func TestRunAsKubectlPlugin(t *testing.T) {
	ctx := t.Context()
	// Usage lines and examples read `kubectl rewind ...`.
	out, err := runAs(ctx, "/home/me/bin/kubectl-rewind", "snapshot", "take", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Usage:\n  kubectl rewind snapshot take --cluster C --operator O [flags]", "\n  kubectl rewind snapshot take --cluster prod-eu-1 --operator mysql-operator\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("kubectl-rewind snapshot take --help does not contain %q:\n%s", w, out)
		}
	}
	for _, leaf := range leaves(NewCommandFor("kubectl-rewind", nil)) {
		for _, line := range exampleCommands(leaf.Example) {
			if strings.HasPrefix(line, "rewind ") {
				t.Errorf("%s: example %q does not read `kubectl rewind`", leaf.CommandPath(), line)
			}
		}
	}
	_, err = runAs(ctx, "kubectl-rewind", "snapshot", "show")
	if err == nil || !strings.Contains(err.Error(), "Usage: kubectl rewind snapshot show NAME [flags]") || !strings.Contains(err.Error(), "See 'kubectl rewind snapshot show --help'") {
		t.Fatalf("errors must name the command as kubectl rewind: %v", err)
	}
	// As rewind, the same help reads `rewind ...`.
	out, err = runAs(ctx, "/opt/rewind/bin/rewind", "snapshot", "take", "--help")
	if err != nil || !strings.Contains(out, "Usage:\n  rewind snapshot take") {
		t.Fatalf("rewind snapshot take --help: %v\n%s", err, out)
	}
	// kubectl runs kubectl_complete-rewind with the words after `kubectl rewind`.
	out, err = complete(ctx, "/home/me/bin/kubectl_complete-rewind", "snapshot", "list", "-o", "")
	if err != nil || out != "table\njson\nyaml\n:4\n" {
		t.Fatalf("kubectl_complete-rewind snapshot list -o '': %v\n%q", err, out)
	}
	out, err = complete(ctx, "kubectl_complete-rewind", "snap")
	if err != nil || !strings.HasPrefix(out, "snapshot\t") {
		t.Fatalf("kubectl_complete-rewind snap: %v\n%q", err, out)
	}
}

// writeKubeconfig writes a kubeconfig file and returns its path.
func writeKubeconfig(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// kubeconfigA has two clusters and contexts and no current context; kubeconfigB names the
// current context and adds a third.
const (
	kubeconfigA = `apiVersion: v1
kind: Config
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: ctx-a
  context: {cluster: a, user: u, namespace: team-a}
- name: ctx-b
  context: {cluster: b, user: u}
`
	kubeconfigB = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://c.example:6443"}
contexts:
- name: ctx-c
  context: {cluster: c, user: u, namespace: team-c}
current-context: ctx-b
`
)

func TestHubFlagsLikeKubectl(t *testing.T) {
	a := writeKubeconfig(t, "a.yaml", kubeconfigA)
	b := writeKubeconfig(t, "b.yaml", kubeconfigB)
	gone := filepath.Join(t.TempDir(), "gone.yaml")
	// Every file of $KUBECONFIG is merged (a missing one is skipped, as kubectl does).
	t.Setenv("KUBECONFIG", strings.Join([]string{gone, a, b}, string(filepath.ListSeparator)))
	cases := []struct {
		name string
		h    hubFlags
		// host and ns are what the hub flags resolve to.
		host, ns string
	}{
		{name: "current context from the second file", h: hubFlags{}, host: "https://b.example:6443", ns: "default"},
		{name: "--context", h: hubFlags{context: "ctx-a"}, host: "https://a.example:6443", ns: "team-a"},
		{name: "--context from the second file, user from the first", h: hubFlags{context: "ctx-c"}, host: "https://c.example:6443", ns: "team-c"},
		{name: "-n wins over the context's namespace", h: hubFlags{context: "ctx-a", namespace: "other"}, host: "https://a.example:6443", ns: "other"},
		{name: "--kubeconfig replaces $KUBECONFIG", h: hubFlags{kubeconfig: a, context: "ctx-a"}, host: "https://a.example:6443", ns: "team-a"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.h.config()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.BearerToken != "not-a-secret" {
				t.Errorf("host %s (token set: %v), want %s", cfg.Host, cfg.BearerToken != "", tc.host)
			}
			if ns := tc.h.ns(); ns != tc.ns {
				t.Errorf("namespace %s, want %s", ns, tc.ns)
			}
		})
	}

	// --kubeconfig alone: a file with no current context is an error, as with kubectl.
	if _, err := (&hubFlags{kubeconfig: a}).config(); err == nil || !strings.Contains(err.Error(), a) {
		t.Errorf("a kubeconfig without a current context must fail naming the file, got %v", err)
	}
	// An unknown context is named with the contexts there are; through the real flags.
	_, err := run(t.Context(), "snapshot", "list", "--context", "nope")
	if err == nil || !strings.Contains(err.Error(), `--context "nope" is not in the kubeconfig `+gone+string(filepath.ListSeparator)+a) ||
		!strings.Contains(err.Error(), "its contexts: ctx-a, ctx-b, ctx-c") {
		t.Errorf("an unknown --context must list the contexts, got %v", err)
	}
	// --context completes from the merged kubeconfig, without a hub.
	out, err := complete(t.Context(), "rewind", "snapshot", "list", "--context", "ctx-")
	if err != nil || out != "ctx-a\nctx-b\nctx-c\n:4\n" {
		t.Errorf("completion of --context: %v\n%q", err, out)
	}
}

func TestHubCompletionFailsSilently(t *testing.T) {
	// A hub that refuses connections, and a kubeconfig that does not exist.
	dead := writeKubeconfig(t, "dead.yaml", `apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://`+testenv.FreeAddr(t)+`"}
users:
- name: u
  user: {token: not-a-secret}
contexts:
- name: dead
  context: {cluster: dead, user: u}
current-context: dead
`)
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	completions := [][]string{
		{"snapshot", "show", ""},
		{"snapshot", "diff", "snap-a", ""},
		{"snapshot", "restore", "s"},
		{"snapshot", "take", "--cluster", ""},
		{"snapshot", "take", "--operator", ""},
		{"rollout", "status", ""},
		{"rollout", "approve", "mysql", ""},
		{"rollback", "mysql", "--to", ""},
		{"history", ""},
		{"clusters", "check", "--expect", ""},
		{"snapshot", "list", "-n", ""},
	}
	for _, kubeconfig := range []string{dead, missing} {
		for _, words := range completions {
			t.Run(filepath.Base(kubeconfig)+"/"+strings.Join(words, " "), func(t *testing.T) {
				out, err := complete(t.Context(), "rewind", append([]string{"--kubeconfig", kubeconfig}, words...)...)
				// Nothing offered, no file names, no error.
				if err != nil || out != ":4\n" {
					t.Fatalf("want no completions and directive 4 (no files), got %v\n%q", err, out)
				}
			})
		}
	}
}

func TestFirstExample(t *testing.T) {
	cases := []struct {
		name, example, prefix string
		// want is the example a usage error shows.
		want string
	}{
		{"comments skipped", "  # a comment\n  rewind install --context hub\n  rewind install", "rewind install ", "  rewind install --context hub"},
		{"continuation lines kept", "  rewind release create a \\\n    --operator o\n  rewind release create b", "rewind release create ", "  rewind release create a \\\n    --operator o"},
		{"the command itself before make", "  make demo   # runs this\n  rewind demo\n  rewind demo --keep", "rewind demo ", "  rewind demo"},
		{"else the first command", "  make demo\n  other", "rewind demo ", "  make demo"},
		{"none", "", "rewind x ", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstExample(tc.example, tc.prefix); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEveryCommandHasAnExample: the command groups and the root too (leaves are checked in
// full above), hidden ones included. Each example that runs rewind names this command or one
// below it, with flags that parse.
func TestEveryCommandHasAnExample(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := c.CommandPath()
		t.Run(path, func(t *testing.T) {
			if strings.TrimSpace(c.Example) == "" {
				t.Fatalf("%s has no Example", path)
			}
			ran := 0
			for _, line := range exampleCommands(c.Example) {
				words := shellWords(line)
				for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
					words = words[1:]
				}
				if len(words) == 0 || words[0] != "rewind" {
					continue
				}
				ran++
				found, rest, err := NewRootCommand().Find(words[1:])
				if err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
				if found.CommandPath() != path && !strings.HasPrefix(found.CommandPath(), path+" ") {
					t.Fatalf("example %q runs %q, which is not %q or below it", line, found.CommandPath(), path)
				}
				if err := found.ParseFlags(rest); err != nil {
					t.Fatalf("example %q: %v", line, err)
				}
			}
			if ran == 0 {
				t.Fatalf("no example of %s runs rewind:\n%s", path, c.Example)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewRootCommand())
}
