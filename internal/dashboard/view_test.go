package dashboard

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// A Secret's diff hides every value, its annotations' too (kubectl's last-applied
// configuration holds the data); other objects show theirs.
func TestRedactedChangesHideEverySecretValue(t *testing.T) {
	obj := func(kind, name, anno, value string) snapshot.Entry {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": "db", "annotations": map[string]any{"last-applied": anno}},
			"data":     map[string]any{"password": value}}}
		return snapshot.Entry{Section: "associated", Object: u}
	}
	from := []snapshot.Entry{obj("Secret", "creds", `{"data":{"password":"old-secret-value"}}`, "b2xkLXNlY3JldC12YWx1ZQ=="),
		obj("ConfigMap", "conf", "a", "old-config")}
	to := []snapshot.Entry{obj("Secret", "creds", `{"data":{"password":"new-secret-value"}}`, "bmV3LXNlY3JldC12YWx1ZQ=="),
		obj("ConfigMap", "conf", "a", "new-config")}
	changes := redactedChanges(from, to)
	var all strings.Builder
	secretFields, configShown := 0, false
	for _, c := range changes {
		for _, f := range c.Fields {
			all.WriteString(c.Object + " " + f.Path + " " + f.Old + " " + f.New + "\n")
			if strings.HasPrefix(c.Object, "Secret ") {
				secretFields++
			}
			if strings.HasPrefix(c.Object, "ConfigMap ") && f.New == `"new-config"` {
				configShown = true
			}
		}
	}
	for _, v := range []string{"old-secret-value", "new-secret-value", "b2xkLXNlY3JldC12YWx1ZQ==", "bmV3LXNlY3JldC12YWx1ZQ=="} {
		if strings.Contains(all.String(), v) {
			t.Errorf("a Secret value reached the diff:\n%s", all.String())
		}
	}
	if secretFields != 2 || !configShown {
		t.Errorf("want the Secret's 2 changed paths (redacted) and the ConfigMap's value:\n%s", all.String())
	}
}

// A cell reads a target as `rewind rollout status` does: Pending until its executor has seen
// the current plan, and no snapshot before an upgrade took it.
func TestTargetCell(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "mysql"}}
	cases := []struct {
		// name says what the target is.
		name string
		// spec and status are the target's.
		spec   v1alpha1.RolloutTargetSpec
		status v1alpha1.RolloutTargetStatus
		// phase, step and snapshot are what the cell shows.
		phase, step, snapshot string
		// notes is how many notes it shows.
		notes int
	}{
		{"planned, not seen", v1alpha1.RolloutTargetSpec{Cluster: "m1", Revision: 2, Path: v1alpha1.PathUpgrade, Snapshot: "s2"},
			v1alpha1.RolloutTargetStatus{Revision: 1, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterSucceeded, Step: "Done", Snapshot: "s1",
				Notes: []v1alpha1.TargetNote{{Type: "Warning", Reason: "KeptSinceSnapshot", Message: "of the plan before"}}},
			v1alpha1.ClusterPending, "", "", 0},
		{"upgrading", v1alpha1.RolloutTargetSpec{Cluster: "m1", Revision: 2, Path: v1alpha1.PathUpgrade, Snapshot: "s2"},
			v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: "HealthGate", Snapshot: "s2"},
			v1alpha1.ClusterUpgrading, "HealthGate", "s2", 0},
		{"restoring", v1alpha1.RolloutTargetSpec{Cluster: "m1", Revision: 3, Path: v1alpha1.PathRestore, Snapshot: "s2"},
			v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathRestore, Phase: v1alpha1.ClusterRollingBack, Step: "Restore",
				Notes: []v1alpha1.TargetNote{{Type: "Warning", Reason: "KeptSinceSnapshot", Message: "kept 1 object created since the snapshot"}}},
			v1alpha1.ClusterRollingBack, "Restore", "s2", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := targetCell(ro, &v1alpha1.RolloutTarget{Spec: tc.spec, Status: tc.status})
			if c.Phase != tc.phase || c.Step != tc.step || c.Snapshot != tc.snapshot || c.ID != "cell-m1" || len(c.Notes) != tc.notes {
				t.Errorf("cell %+v, want phase %s step %q snapshot %q and %d notes", c, tc.phase, tc.step, tc.snapshot, tc.notes)
			}
		})
	}
}

// TestCellShowsTheNotes renders a cluster's cell with the notes its executor recorded: each
// note's reason and message, a warning marked as one, the text escaped.
func TestCellShowsTheNotes(t *testing.T) {
	p, err := loadPages()
	if err != nil {
		t.Fatal(err)
	}
	c := cellView{ID: "cell-m1", Cluster: "m1", Phase: v1alpha1.ClusterRolledBack, Notes: []v1alpha1.TargetNote{
		{Type: "Warning", Reason: "KeptSinceSnapshot", Message: "kept MySQLCluster db/<new> created since the snapshot"},
		{Type: "Normal", Reason: "MetricsApproved", Message: "error rate 0.1 <= 1"},
	}}
	html := p.fragment("cell", c)
	for _, want := range []string{
		`<div class="note note-warning" title="kept MySQLCluster db/&lt;new&gt; created since the snapshot">KeptSinceSnapshot: kept MySQLCluster db/&lt;new&gt; created since the snapshot</div>`,
		`<div class="note note-normal" title="error rate 0.1 &lt;= 1">MetricsApproved: error rate 0.1 &lt;= 1</div>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the cell does not show %s:\n%s", want, html)
		}
	}
	if html := p.fragment("cell", cellView{ID: "cell-m2", Cluster: "m2"}); strings.Contains(html, "note") {
		t.Errorf("a cell without notes shows one:\n%s", html)
	}
}
