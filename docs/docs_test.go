//go:build !unit

// Package docs_test runs the documentation: every shell block marked as tested (a fenced
// block whose info string is "sh tested") in README.md and docs/*.md is executed, in the
// order of its file, by one bash per file, against a testbed the blocks themselves start. A
// block followed directly by a block whose info string is "text output" must print those
// lines, in that order (blanks are collapsed, and "..." in a line matches any text). A
// command that fails fails the test.
package docs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// TestDocs runs the tested blocks of each document in one bash, from a folder of its own that
// holds links to the repository's examples and config and a freshly built bin/rewind, with
// HOME in that folder (so the testbed's default state folder is there too).
func TestDocs(t *testing.T) {
	root, bins := repoAndBinaries(t)
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
		if err := testbed.StopIfRecorded(stateDir); err != nil {
			t.Errorf("stopping the testbed the document left: %v", err)
		}
	})
	var script strings.Builder
	script.WriteString("set -euo pipefail\nexec 2>&1\n")
	for i, b := range blocks {
		fmt.Fprintf(&script, "printf '\\n%s%d@@\\n'\n%s\n", marker, i, b.script)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	env := append(os.Environ(), "HOME="+work, "XDG_CACHE_HOME=", "KUBECONFIG=",
		"PATH="+testbedBin+string(os.PathListSeparator)+os.Getenv("PATH"),
		testbed.BinDirEnv+"="+testbedBin)
	var out bytes.Buffer
	start := time.Now()
	runErr := runScript(ctx, work, stateDir, script.String(), env, &out)
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

// runScript runs script with bash in folder work, its output to stdout, in a process group of
// its own: what the script starts in the background (a controller) is stopped with the group
// when it ends, by the group's id (the testbed it starts is stopped by its record in stateDir,
// by the caller's cleanup). Interrupted (SIGINT or SIGTERM: make test stopped), the test
// binary exits without running any cleanup: so the group and the testbed are stopped first,
// here, and the binary exits as the signal says (130 or 143). Before, a document's testbed
// outlived an interrupted make test.
func runScript(ctx context.Context, work, stateDir, script string, env []string, stdout io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout = work, env, stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var pgid atomic.Int64
	var interrupted atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	defer func() { signal.Stop(sig); close(done) }()
	go func() {
		select {
		case s := <-sig:
			interrupted.Store(true)
			if p := pgid.Load(); p > 0 {
				_ = syscall.Kill(-int(p), syscall.SIGKILL)
			}
			_ = testbed.StopIfRecorded(stateDir)
			os.Exit(128 + int(s.(syscall.Signal)))
		case <-done:
		}
	}()
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid.Store(int64(cmd.Process.Pid))
	err := cmd.Wait()
	if interrupted.Load() {
		select {} // the script was killed by the handler, which stops the rest and exits
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	return err
}

// repoAndBinaries returns the repository's root and the testbed binaries.
func repoAndBinaries(t *testing.T) (string, testbed.Binaries) {
	t.Helper()
	root, err := testbed.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := testbed.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	return root, bins
}
