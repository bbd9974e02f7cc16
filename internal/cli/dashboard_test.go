package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// The dashboard's flags are checked before the hub is read: a bad address, and actions on an
// address other hosts can reach (the dashboard has no login of its own).
func TestDashboardRefusesActionsOffLoopback(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	t.Setenv("KUBECONFIG", missing)
	cases := []struct {
		// args follow `rewind dashboard`.
		args []string
		// want is a substring of the error.
		want string
	}{
		{[]string{"--address", "nonsense"}, `--address "nonsense"`},
		{[]string{"--address", "0.0.0.0:3100", "--enable-actions"}, "--enable-actions is refused on --address 0.0.0.0:3100"},
		{[]string{"--address", "192.0.2.1:3100", "--enable-actions"}, "serve it on 127.0.0.1"},
		// Allowed: the error is about the missing kubeconfig, read after the flags.
		{[]string{"--address", "127.0.0.1:0", "--enable-actions"}, missing},
		{[]string{"--address", "localhost:0", "--enable-actions"}, missing},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t.Context(), append([]string{"dashboard"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v\n%s", tc.want, err, out)
			}
		})
	}
}
