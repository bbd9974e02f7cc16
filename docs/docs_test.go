//go:build !unit

// Package docs_test runs the documentation: every shell block marked as tested (a fenced
// block whose info string is "sh tested") in README.md and docs/*.md is executed, in the
// order of its file, by one bash per file, against a testbed the blocks themselves start. A
// block followed directly by a block whose info string is "text output" must print those
// lines, in that order (blanks are collapsed, and "..." in a line matches any text). A
// command that fails fails the test.
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// block is one tested shell block and the output shown after it, if any.
type block struct {
	file   string
	line   int      // of the opening fence
	script string   // the shell lines
	want   []string // the lines of the "text output" block that follows, if any
}

// parseBlocks returns the tested blocks of a Markdown document, in order.
func parseBlocks(file string, doc []byte) ([]block, error) {
	var blocks []block
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	var cur *block    // inside a tested block
	var out *[]string // inside the output block of the last tested block
	inOther := false  // inside another fenced block
	lastTested := -1  // index of the block the next output block belongs to
	for sc.Scan() {
		n++
		l := sc.Text()
		t := strings.TrimSpace(l)
		fence := strings.HasPrefix(t, "```")
		switch {
		case cur != nil:
			if fence {
				blocks = append(blocks, *cur)
				lastTested = len(blocks) - 1
				cur = nil
				continue
			}
			cur.script += l + "\n"
		case out != nil:
			if fence {
				out = nil
				lastTested = -1
				continue
			}
			*out = append(*out, l)
		case inOther:
			if fence {
				inOther = false
			}
		case fence:
			info := strings.Fields(strings.TrimPrefix(t, "```"))
			switch {
			case len(info) == 2 && info[0] == "sh" && info[1] == "tested":
				cur = &block{file: file, line: n}
			case len(info) == 2 && info[0] == "text" && info[1] == "output":
				if lastTested < 0 {
					return nil, fmt.Errorf("%s:%d: a \"text output\" block must follow a \"sh tested\" block directly", file, n)
				}
				out = &blocks[lastTested].want
			default:
				inOther = true
				lastTested = -1
			}
		case t != "":
			lastTested = -1
		}
	}
	if cur != nil || out != nil || inOther {
		return nil, fmt.Errorf("%s: a fenced block is not closed", file)
	}
	return blocks, sc.Err()
}

// squash collapses runs of blanks, so that a table's column widths do not matter.
func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// matchOutput checks that want's non-blank lines appear in got's lines, in order; "..." in a
// wanted line matches any text.
func matchOutput(got string, want []string) error {
	lines := strings.Split(got, "\n")
	i := 0
	for _, w := range want {
		w = squash(w)
		if w == "" {
			continue
		}
		parts := strings.Split(w, "...")
		for k := range parts {
			parts[k] = regexp.QuoteMeta(strings.TrimSpace(parts[k]))
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		for ; i < len(lines) && !re.MatchString(squash(lines[i])); i++ {
		}
		if i == len(lines) {
			return fmt.Errorf("no line (after the ones matched before it) matches %q", w)
		}
		i++
	}
	return nil
}

const marker = "@@rewind-docs-block "

func TestParseBlocks(t *testing.T) {
	doc := "text\n```sh tested\necho a\n```\n\n```text output\na\n```\n```sh\nnot run\n```\n```sh tested\necho b\n```\n"
	blocks, err := parseBlocks("x.md", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 2 || blocks[0].script != "echo a\n" || len(blocks[0].want) != 1 || blocks[1].script != "echo b\n" || blocks[1].want != nil {
		t.Fatalf("parsed %+v", blocks)
	}
	if _, err := parseBlocks("x.md", []byte("```sh\nfoo\n```\n```text output\na\n```\n")); err == nil {
		t.Error("an output block after an untested block should be refused")
	}
	if err := matchOutput("x\nNAME   READY\nm1     True  4s\n", []string{"NAME READY", "m1 True ..."}); err != nil {
		t.Error(err)
	}
	if err := matchOutput("m1 True\nNAME READY\n", []string{"NAME READY", "m1 True"}); err == nil {
		t.Error("lines out of order should not match")
	}
}

// TestDocs runs the tested blocks of each document in one bash, from a folder of its own that
// holds links to the repository's examples and config and a freshly built bin/rewind, with
// HOME in that folder (so the testbed's default state folder is there too).
func TestDocs(t *testing.T) {
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	binDir := filepath.Join(t.TempDir(), "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "rewind"), "./cmd/rewind")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rewind: %v\n%s", err, out)
	}
	tested := 0
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		blocks, err := parseBlocks(rel, doc)
		if err != nil {
			t.Fatal(err)
		}
		if len(blocks) == 0 {
			continue
		}
		tested++
		t.Run(filepath.Base(rel), func(t *testing.T) { runDoc(t, root, binDir, filepath.Dir(bins.APIServer), blocks) })
	}
	if tested == 0 {
		t.Fatal("no document has a tested block")
	}
}

func runDoc(t *testing.T, root, binDir, testbedBin string, blocks []block) {
	work := t.TempDir()
	for _, l := range []struct{ name, target string }{{"bin", binDir}, {"examples", filepath.Join(root, "examples")}, {"config", filepath.Join(root, "config")}} {
		if err := os.Symlink(l.target, filepath.Join(work, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	stateDir := filepath.Join(work, ".cache", "rewind", "testbed")
	// Whatever the blocks leave running: the testbed, by its own record.
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(stateDir, testbed.StateFileName)); err == nil {
			if _, err := testbed.StopState(stateDir); err != nil {
				t.Errorf("stopping the testbed the document left: %v", err)
			}
		}
	})
	var script strings.Builder
	script.WriteString("set -euo pipefail\nexec 2>&1\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "printf '\\n%s%d@@\\n'\n%s\n", marker, i, b.script)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "HOME="+work, "XDG_CACHE_HOME=", "KUBECONFIG=",
		"PATH="+testbedBin+string(os.PathListSeparator)+os.Getenv("PATH"),
		testbed.BinDirEnv+"="+testbedBin)
	// Its own process group: what the blocks start in the background (the controller) is
	// stopped with it, by the group's id.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	runErr := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	// The output of each block, by its marker.
	outputs := make([]string, len(blocks))
	last := -1
	for _, chunk := range strings.Split(out.String(), "\n"+marker)[1:] {
		var i int
		if _, err := fmt.Sscanf(chunk, "%d@@", &i); err != nil || i < 0 || i >= len(blocks) {
			t.Fatalf("unreadable marker in the output: %q", chunk[:min(len(chunk), 40)])
		}
		outputs[i] = chunk[strings.Index(chunk, "\n")+1:]
		last = i
	}
	if runErr != nil {
		if last < 0 {
			t.Fatalf("bash: %v\n%s", runErr, out.String())
		}
		b := blocks[last]
		t.Fatalf("%s:%d: the block failed (%v) after %s:\n%s\noutput:\n%s", b.file, b.line, runErr, time.Since(start).Round(time.Second), b.script, outputs[last])
	}
	t.Logf("%d blocks ran in %s", len(blocks), time.Since(start).Round(time.Second))
	if testing.Verbose() {
		for i, b := range blocks {
			t.Logf("%s:%d printed:\n%s", b.file, b.line, outputs[i])
		}
	}
	for i, b := range blocks {
		if b.want == nil {
			continue
		}
		if err := matchOutput(outputs[i], b.want); err != nil {
			t.Errorf("%s:%d: the output is not the one the document shows: %v\nblock:\n%s\noutput:\n%s", b.file, b.line, err, b.script, outputs[i])
		}
	}
}
