package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A component that fails to start is explained by the end of its log in the error, since the
// testbed removes its state directory, logs included, when it stops.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "kube-apiserver.log")
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(log, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := logTail(log)
	if !strings.Contains(got, "line 40") || !strings.Contains(got, fmt.Sprintf("line %d\n", 40-logTailLines+1)) || strings.Contains(got, fmt.Sprintf("line %d\n", 40-logTailLines)) {
		t.Errorf("logTail: %q; want the last %d lines", got, logTailLines)
	}
	if got := logTail(filepath.Join(dir, "missing.log")); got != "" {
		t.Errorf("logTail of a missing log: %q; want nothing", got)
	}
}
