//go:build !unit

// The test builds the rewind CLI (about 200 packages): on a fresh clone with a cold build cache
// and a busy machine that passed go test's 10-minute default inside make test-unit, so it runs
// in make test, not in the unit lane.

package version_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/internal/version"
)

// TestLinkerFlagsReachRewindVersion builds the rewind CLI as `make build` does (-trimpath,
// -ldflags -X into this package) and checks that `rewind version -o json` reports the values.
func TestLinkerFlagsReachRewindVersion(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build rewind: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "rewind")
	const pkg = "github.com/rewind-dev/rewind/internal/version"
	ldflags := "-X " + pkg + ".Version=v9.8.7 -X " + pkg + ".Commit=0123456789abcdef0123456789abcdef01234567 -X " + pkg + ".BuildDate=2026-01-02T03:04:05Z"
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "github.com/rewind-dev/rewind/cmd/rewind")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build: the build cache is shared
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stderr bytes.Buffer
	run := exec.Command(bin, "version", "-o", "json")
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("rewind version -o json: %v\n%s", err, stderr.String())
	}
	var got version.Info
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("rewind version -o json printed no JSON: %v\n%s", err, out)
	}
	want := version.Info{Version: "v9.8.7", Commit: "0123456789abcdef0123456789abcdef01234567", BuildDate: "2026-01-02T03:04:05Z",
		GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if got != want {
		t.Errorf("rewind version -o json = %+v, want %+v", got, want)
	}
	table, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Version:", "v9.8.7", "Commit:", "Build date:", "2026-01-02T03:04:05Z", "Go version:", runtime.Version()} {
		if !strings.Contains(string(table), w) {
			t.Errorf("rewind version lacks %q:\n%s", w, table)
		}
	}
}

func TestDefaults(t *testing.T) {
	i := version.Get()
	if i.Version != "dev" || i.GoVersion != runtime.Version() {
		t.Errorf("an unlinked build reports %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "dev (commit ") || !strings.Contains(s, runtime.Version()) {
		t.Errorf("String() = %q", s)
	}
}
