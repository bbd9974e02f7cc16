package main

import (
	"bytes"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/rewind-dev/rewind/internal/controllercmd"
	"github.com/rewind-dev/rewind/internal/version"
)

// TestShippedBinaryHygiene checks that the binary the image runs links none of the test
// harness: no testbed, no demo or CLI, no sample operator, no test fixtures, and not the
// standard library's testing package.
func TestShippedBinaryHygiene(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the binary's packages: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "github.com/rewind-dev/rewind/cmd/rewind-controller")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.String())
	}
	const mod = "github.com/rewind-dev/rewind/"
	forbidden := []string{
		mod + "internal/testbed",
		mod + "internal/testfixture",
		mod + "internal/cli",
		mod + "examples/",
		mod + "test/",
		mod + "bench",
		mod + "hack/",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed only %d packages: %q", len(deps), deps)
	}
	own := 0
	for _, p := range deps {
		if p == "testing" {
			t.Errorf("rewind-controller links the testing package")
		}
		if !strings.HasPrefix(p, mod) {
			continue
		}
		own++
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("rewind-controller links %s (nothing under %s may ship)", p, f)
			}
		}
	}
	if own == 0 {
		t.Fatal("no rewind package in the list: the check would pass for any binary")
	}
}

func TestVersionFlag(t *testing.T) {
	cmd := newCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "rewind-controller "+version.Version) || !strings.Contains(got, "go1.") {
		t.Errorf("--version printed %q", got)
	}
}

func TestLeaderElectionFlagsMustBeOrdered(t *testing.T) {
	cmd := newCommand()
	cmd.SetArgs([]string{"--leader-elect", "--leader-election-lease-duration=2s", "--leader-election-renew-deadline=3s",
		"--kubeconfig=/nonexistent"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--leader-election-renew-deadline (3s) < --leader-election-lease-duration (2s)") {
		t.Errorf("want an error naming the flags, got %v", err)
	}
}

func TestHubRateLimitMustBePositive(t *testing.T) {
	for _, args := range [][]string{{"--kube-api-qps=0"}, {"--kube-api-burst=0"}, {"--kube-api-qps=-1"}} {
		cmd := newCommand()
		cmd.SetArgs(append(args, "--kubeconfig=/nonexistent"))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "--kube-api-qps") || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("%v: want an error naming the flags, got %v", args, err)
		}
	}
}

func TestRestoreMemoryFlag(t *testing.T) {
	cmd := newCommand()
	cmd.SetArgs([]string{"--restore-memory=lots", "--kubeconfig=/nonexistent"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--restore-memory") || !strings.Contains(err.Error(), "48Mi") {
		t.Errorf("want an error naming the flag and an example, got %v", err)
	}
}

func TestDefaultRestoreBudget(t *testing.T) {
	for limit, want := range map[int64]int64{
		math.MaxInt64: 8 << 20,   // no Go memory limit
		0:             8 << 20,   // nonsense: as none
		921 << 20:     921 << 16, // 90% of a 1Gi pod
		8 << 20:       1 << 20,   // at least 1Mi
		230 << 20:     230 << 16, // 90% of 256Mi
		16 << 30:      16 << 26,  // 16Gi
	} {
		if got := controllercmd.DefaultRestoreBudget(limit); got != want {
			t.Errorf("limit %d: budget %d, want %d", limit, got, want)
		}
	}
}
