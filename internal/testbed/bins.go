package testbed

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinDirEnv names the environment variable that points at a folder with the testbed binaries.
const BinDirEnv = "REWIND_TESTBED_BIN"

// Binaries are the paths of the programs the testbed runs.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kwok string
	// KwokStages is the kwok configuration file with the node and pod Stage documents.
	KwokStages string
}

// BinariesIn checks that dir holds every testbed binary.
func BinariesIn(dir string) (Binaries, error) {
	b := Binaries{
		Etcd:              filepath.Join(dir, "etcd"),
		APIServer:         filepath.Join(dir, "kube-apiserver"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		Kwok:              filepath.Join(dir, "kwok"),
		KwokStages:        filepath.Join(dir, "kwok-stages.yaml"),
	}
	for _, p := range []string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.Kwok, b.KwokStages} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("testbed: %s is missing; run `make testbed-bins` (or set %s to a folder with the binaries)", p, BinDirEnv)
		}
	}
	return b, nil
}

// FindBinaries uses $REWIND_TESTBED_BIN when set; otherwise it runs hack/testbed/build.sh of
// the repository containing the working directory, which builds what is missing (the first
// time takes about 15 minutes) and prints the binary folder.
func FindBinaries() (Binaries, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return BinariesIn(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	cmd := exec.Command(filepath.Join(root, "hack", "testbed", "build.sh"))
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("testbed: building the binaries: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return BinariesIn(lines[len(lines)-1])
}

// RepoRoot finds the rewind repository root from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "testbed", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testbed: cannot find the rewind repository (hack/testbed/build.sh) above the working directory; set %s to a folder with the testbed binaries", BinDirEnv)
		}
		dir = parent
	}
}

// Kubectl returns the path of the kubectl built beside the testbed binaries, or "" if there
// is none.
func (t *Testbed) Kubectl() string {
	p := filepath.Join(filepath.Dir(t.bins.APIServer), "kubectl")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}
