//go:build !unit

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// createIdleRollout creates a paused Rollout that no manager acts on (its clusters do not
// exist) and deletes it when the test ends.
func createIdleRollout(t *testing.T, ns, name string) *v1alpha1.Rollout {
	t.Helper()
	c := hubClient(t)
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RolloutSpec{
			Operator: "widget", Release: "widget-v1", InstallNamespace: "widget-system", Paused: true,
			Waves: []v1alpha1.Wave{
				{Name: "canary", Clusters: []string{"no-such-member-1"}},
				{Name: "rest", Clusters: []string{"no-such-member-2"}},
			},
		},
	}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	// As if a controller had started its third revision.
	ro.Status = v1alpha1.RolloutStatus{Revision: 3, CurrentRelease: "widget-v1", Phase: v1alpha1.RolloutPaused}
	if err := c.Status().Update(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), ro); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting rollout %s: %v", name, err)
		}
	})
	return ro
}

func TestMissingObjectsAreNamed(t *testing.T) {
	hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	createIdleRollout(t, ns, "mysql")
	snapshotHint := `snapshot "nope" not found in namespace ` + ns + ` (list them with: rewind snapshot list -n ` + ns + `)`
	rolloutHint := `rollout "nope" not found in namespace ` + ns + ` (list them with: kubectl get rollouts.rewind.dev -n ` + ns + `)`
	releaseHint := `release "nope" not found in namespace ` + ns + ` (list them with: kubectl get operatorreleases -n ` + ns + `)`
	cases := []struct {
		// args run against the shared hub in namespace ns.
		args []string
		// want is a substring of the error.
		want string
	}{
		{[]string{"snapshot", "show", "nope"}, snapshotHint},
		{[]string{"snapshot", "verify", "nope"}, snapshotHint},
		{[]string{"snapshot", "diff", "nope", "--live"}, snapshotHint},
		{[]string{"snapshot", "restore", "nope", "--cluster", "member1"}, snapshotHint},
		{[]string{"rollout", "status", "nope"}, rolloutHint},
		{[]string{"rollout", "approve", "nope"}, rolloutHint},
		{[]string{"rollout", "pause", "nope"}, rolloutHint},
		{[]string{"rollout", "resume", "nope"}, rolloutHint},
		{[]string{"rollback", "nope"}, rolloutHint},
		{[]string{"history", "nope"}, rolloutHint},
		{[]string{"rollback", "mysql", "--to", "nope"}, "--to nope: " + releaseHint},
		{[]string{"rollout", "approve", "mysql", "nope"}, `rollout mysql has no wave "nope"; its waves: canary, rest`},
		{[]string{"clusters", "check", "--operator", "widget", "--expect", "nope"}, "--expect: " + releaseHint},
		{[]string{"snapshot", "take", "--cluster", "nope", "--operator", "widget"},
			`member cluster "nope" not found (list them with: rewind clusters list; register one with: rewind clusters add nope --kubeconfig FILE)`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := run(t.Context(), append(tc.args, hubArgs(ns)...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v\n%s", tc.want, err, out)
			}
		})
	}
	// An object sent into a namespace that does not exist: the error names the namespace and
	// the fix, not the API server's words about a chunk of the artifact.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: widget-operator
spec:
  selector: {matchLabels: {app: widget}}
  template:
    metadata: {labels: {app: widget}}
    spec:
      containers:
      - name: manager
        image: registry.example.com/widget:0a1b2c3
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t.Context(), "release", "create", "widget-v1", "--operator", "widget", "--version", "1.0.0", "--git-commit", "0a1b2c3",
		"--image", "registry.example.com/widget:0a1b2c3", "--manifests", dir, "--kubeconfig", env.Hub.Kubeconfig, "-n", "no-such-namespace")
	if err == nil || !strings.Contains(err.Error(), `namespace "no-such-namespace" does not exist in the hub: create it (kubectl create namespace no-such-namespace)`) {
		t.Errorf("release create into a missing namespace: %v\n%s", err, out)
	}
	// As a kubectl plugin, the hint says how to run the plugin.
	_, err = runAs(t.Context(), "kubectl-rewind", append([]string{"snapshot", "show", "nope"}, hubArgs(ns)...)...)
	if err == nil || !strings.Contains(err.Error(), "(list them with: kubectl rewind snapshot list -n "+ns+")") {
		t.Fatalf("kubectl-rewind snapshot show nope: %v", err)
	}
}

// completions runs `rewind __complete ARGS` and returns the names offered, without the
// required flags cobra offers too; it fails the test unless file names are ruled out
// (directive 4).
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := complete(t.Context(), "rewind", args...)
	if err != nil {
		t.Fatalf("__complete %v: %v\n%s", args, err, out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[len(lines)-1] != ":4" {
		t.Fatalf("__complete %v: directive %q, want :4 (no file names)\n%s", args, lines[len(lines)-1], out)
	}
	var names []string
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "--") {
			names = append(names, l)
		}
	}
	return names
}

func TestCompletionOfHubObjects(t *testing.T) {
	c := hubClient(t)
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	m := env.Members[0]
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add: %v\n%s", err, out)
	}
	src := releaseSources[0]
	if out, err := run(ctx, createArgs(ns, "widget-v1", src.version, src.image, src.args)...); err != nil {
		t.Fatalf("release create: %v\n%s", err, out)
	}
	createIdleRollout(t, ns, "mysql")
	for _, name := range []string{"snap-a", "snap-b"} {
		s := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.SnapshotSpec{Cluster: m.Name, Operator: "widget"}}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	hub := hubArgs(ns)
	cases := []struct {
		// words typed after `rewind`, the last one being completed.
		words []string
		// want is what is offered (when exact) or must be among it.
		want  []string
		exact bool
	}{
		{[]string{"snapshot", "show", ""}, []string{"snap-a", "snap-b"}, true},
		{[]string{"snapshot", "verify", "snap-b"}, []string{"snap-b"}, true},
		{[]string{"snapshot", "show", "snap-a", ""}, nil, true},
		{[]string{"snapshot", "diff", "snap-a", ""}, []string{"snap-a", "snap-b"}, true},
		{[]string{"snapshot", "restore", ""}, []string{"snap-a", "snap-b"}, true},
		{[]string{"rollout", "status", ""}, []string{"mysql"}, true},
		{[]string{"rollout", "approve", "mysql", ""}, []string{"canary", "rest"}, true},
		{[]string{"rollout", "pause", "my"}, []string{"mysql"}, true},
		{[]string{"history", ""}, []string{"mysql"}, true},
		{[]string{"rollback", "mysql", "--to", ""}, []string{"widget-v1"}, true},
		{[]string{"clusters", "check", "--expect", ""}, []string{"widget-v1"}, true},
		{[]string{"snapshot", "take", "--operator", ""}, []string{"widget"}, true},
		{[]string{"snapshot", "take", "--cluster", ""}, []string{m.Name}, false},
		{[]string{"snapshot", "restore", "snap-a", "--cluster", ""}, []string{m.Name}, false},
		{[]string{"snapshot", "list", "-n", ""}, []string{ns, "default", "kube-system"}, false},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.words, " "), func(t *testing.T) {
			// The hub flags come first: the last word is the one completed.
			got := completions(t, append(append([]string{}, hub...), tc.words...)...)
			if tc.exact && !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Fatalf("offered %q, want %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Fatalf("offered %q, want %q among them", got, w)
				}
			}
		})
	}

	// $KUBECONFIG with several files (the first missing) and --context reach the hub too.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing.yaml")+string(filepath.ListSeparator)+env.Hub.Kubeconfig)
	if got := completions(t, "--context", "hub", "-n", ns, "snapshot", "show", ""); !slices.Equal(got, []string{"snap-a", "snap-b"}) {
		t.Fatalf("with $KUBECONFIG and --context: offered %q", got)
	}

	// -o json and -o yaml print whole objects with their apiVersion and kind.
	out, err := run(ctx, "snapshot", "list", "-n", ns, "-o", "json")
	if err != nil {
		t.Fatalf("snapshot list -o json: %v\n%s", err, out)
	}
	var list struct {
		APIVersion, Kind string
		Items            []struct{ APIVersion, Kind string }
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.APIVersion != "rewind.dev/v1alpha1" || list.Kind != "SnapshotList" ||
		len(list.Items) != 2 || list.Items[0].Kind != "Snapshot" || list.Items[0].APIVersion != "rewind.dev/v1alpha1" {
		t.Fatalf("snapshot list -o json: %v %+v\n%s", err, list, out)
	}
	for _, step := range []struct {
		args   []string
		paused bool
	}{
		{[]string{"rollout", "resume", "mysql", "-n", ns, "-o", "yaml"}, false},
		{[]string{"rollout", "pause", "mysql", "-n", ns, "-o", "json"}, true},
	} {
		out, err := run(ctx, step.args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", step.args, err, out)
		}
		ro := &v1alpha1.Rollout{}
		if err := yaml.Unmarshal([]byte(out), ro); err != nil || ro.Kind != "Rollout" || ro.Name != "mysql" || ro.Spec.Paused != step.paused {
			t.Fatalf("%v must print the updated Rollout: %v\n%s", step.args, err, out)
		}
	}
	out, err = run(ctx, "rollout", "approve", "mysql", "rest", "-n", ns, "-o", "json")
	ro := &v1alpha1.Rollout{}
	if err != nil || json.Unmarshal([]byte(out), ro) != nil || ro.Annotations[v1alpha1.AnnotationApprovedPrefix+"rest"] != "3" {
		t.Fatalf("rollout approve -o json must approve wave rest for revision 3 (annotation %srest: \"3\"): %v\n%s", v1alpha1.AnnotationApprovedPrefix, err, out)
	}
}
