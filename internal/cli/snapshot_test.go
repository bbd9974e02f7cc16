//go:build !unit

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

func TestSnapshotCommands(t *testing.T) {
	ctx := t.Context()
	hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	m := env.Members[0]
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add: %v\n%s", err, out)
	}
	// A release that ships the MySQLCluster CRD, installed on member1 with 12 CRs.
	createMySQLRelease(t, ns)
	// installDirectly applies into widget-system; this release installs into mysql-system.
	rel, objs := loadRelease(t, ns, "mysql-v1")
	installObjects(t, m, objs, "mysql-system", rel)
	if err := testfixture.Populate(ctx, m.RESTConfig(), testfixture.Options{Namespaces: []string{"team-a", "team-b"}, Count: 12, Children: true}); err != nil {
		t.Fatal(err)
	}

	out, err := run(ctx, append([]string{"snapshot", "take", "--cluster", m.Name, "--operator", "mysql-operator", "--name", "before", "-o", "json"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("snapshot take: %v\n%s", err, out)
	}
	var snap map[string]any
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("take -o json: %v\n%s", err, out)
	}
	counts, _, _ := unstructured.NestedMap(snap, "status", "counts")
	if counts["customResources"] != float64(12) || counts["associated"] != float64(48+1) {
		t.Fatalf("counts %v (want 12 CRs; 48 children + the operator Deployment)", counts)
	}

	out, err = run(ctx, append([]string{"snapshot", "list"}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "before") || !strings.Contains(out, "mysql-v1") {
		t.Fatalf("snapshot list: %v\n%s", err, out)
	}
	out, err = run(ctx, append([]string{"snapshot", "show", "before"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("snapshot show: %v\n%s", err, out)
	}
	if !strings.Contains(out, "db-00003-credentials") || !strings.Contains(out, "keys password (values redacted)") {
		t.Fatalf("show must list Secrets with their keys only:\n%s", out)
	}
	if strings.Contains(out, testfixture.SecretValue("db-00003")) {
		t.Fatal("show printed a Secret value")
	}
	out, err = run(ctx, append([]string{"snapshot", "verify", "before"}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "verified") {
		t.Fatalf("snapshot verify: %v\n%s", err, out)
	}
	out, err = run(ctx, append([]string{"snapshot", "diff", "before", "--live"}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "No changes") {
		t.Fatalf("diff of an unchanged cluster: %v\n%s", err, out)
	}

	// Change one CR's status and one Secret: diff names both, without the Secret's value.
	dyn, err := dynamic.NewForConfig(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cr, err := dyn.Resource(testfixture.MySQLGVR).Namespace("team-b").Get(ctx, "db-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cr.Object, "Degraded", "status", "phase")
	if _, err := dyn.Resource(testfixture.MySQLGVR).Namespace("team-b").UpdateStatus(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec, err := dyn.Resource(secretsGVR).Namespace("team-a").Get(ctx, "db-00000-credentials", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(sec.Object, "bmV3LXNlY3JldC12YWx1ZQ==", "data", "password")
	if _, err := dyn.Resource(secretsGVR).Namespace("team-a").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err = run(ctx, append([]string{"snapshot", "diff", "before", "--live"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("diff: %v\n%s", err, out)
	}
	if !strings.Contains(out, "2 objects differ") || !strings.Contains(out, "MySQLCluster.database.example.com team-b/db-00001") ||
		!strings.Contains(out, `status.phase: "Ready" -> "Degraded"`) || !strings.Contains(out, "data.password: <redacted> -> <redacted>") {
		t.Fatalf("diff must name the CR's status.phase and the Secret's key, redacted:\n%s", out)
	}
	if strings.Contains(out, "bmV3LXNlY3JldC12YWx1ZQ") {
		t.Fatal("diff printed a Secret value")
	}
	// A second snapshot, and a diff between the two.
	if out, err := run(ctx, append([]string{"snapshot", "take", "--cluster", m.Name, "--operator", "mysql-operator", "--name", "after"}, hubArgs(ns)...)...); err != nil {
		t.Fatalf("snapshot take: %v\n%s", err, out)
	}
	out, err = run(ctx, append([]string{"snapshot", "diff", "before", "after", "-o", "json"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("diff: %v\n%s", err, out)
	}
	var changes []map[string]any
	if err := json.Unmarshal([]byte(out), &changes); err != nil || len(changes) != 2 {
		t.Fatalf("diff -o json: %v\n%s", err, out)
	}

	// The member's record says another release runs (as after an upgrade).
	mcl := testenv.Member(t, m).Client
	if err := member.WriteRecord(ctx, mcl, member.Record{Operator: "mysql-operator", Release: "mysql-v2", Version: "2.0.0", Image: "example.com/mysql-operator:2.0.0"}); err != nil {
		t.Fatal(err)
	}
	// Restore brings the member back to "before"; a second restore does nothing.
	out, err = run(ctx, append([]string{"snapshot", "restore", "before", "--cluster", m.Name}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "restored to snapshot before") {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	// The record says the snapshot's release runs again, as its image does.
	if rec, err := member.ReadRecord(ctx, mcl, "mysql-operator"); err != nil || rec == nil || rec.Release != "mysql-v1" || rec.Version != rel.Spec.Version ||
		rec.Image != release.OperatorImageIn(objs, rel.Spec.Image) || rec.Snapshot != "before" || rec.Namespace != "mysql-system" {
		t.Errorf("after the restore the record is %+v (%v), want release mysql-v1 and its image", rec, err)
	}
	out, err = run(ctx, append([]string{"snapshot", "diff", "before", "--live"}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "No changes") {
		t.Fatalf("after the restore the member must equal the snapshot: %v\n%s", err, out)
	}
	out, err = run(ctx, append([]string{"snapshot", "restore", "before", "--cluster", m.Name}, hubArgs(ns)...)...)
	if err != nil || !strings.Contains(out, "already equals snapshot before") {
		t.Fatalf("a second restore must be a no-op: %v\n%s", err, out)
	}
}

// createMySQLRelease creates the release mysql-v1 of mysql-operator in the hub namespace ns:
// the MySQLCluster CRD and the operator's Deployment.
func createMySQLRelease(t *testing.T, ns string) {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir+"/crd.yaml", testfixture.MySQLCRDYAML)
	writeFile(t, dir+"/deploy.yaml", `apiVersion: apps/v1
kind: Deployment
metadata:
  name: mysql-operator
spec:
  selector: {matchLabels: {app: mysql-operator}}
  template:
    metadata: {labels: {app: mysql-operator}}
    spec:
      containers:
      - name: manager
        image: example.com/mysql-operator:`+testCommit+`
`)
	args := append([]string{"release", "create", "mysql-v1", "--operator", "mysql-operator", "--version", "1.0.0",
		"--git-commit", testCommit, "--image", "example.com/mysql-operator:" + testCommit, "--manifests", dir}, hubArgs(ns)...)
	if out, err := run(t.Context(), args...); err != nil {
		t.Fatalf("release create: %v\n%s", err, out)
	}
}

// snapshot verify records its outcome on the Snapshot as the Verified condition: True when
// the payload matches its checksum, False naming the problem when it is corrupted or gone.
func TestSnapshotVerifyRecordsTheOutcome(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	m := env.Members[0]
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add: %v\n%s", err, out)
	}
	createMySQLRelease(t, ns)
	store := t.TempDir()
	out, err := run(ctx, append([]string{"snapshot", "take", "--cluster", m.Name, "--operator", "mysql-operator", "--release", "mysql-v1",
		"--name", "checked", "--store", "dir://" + store}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("snapshot take: %v\n%s", err, out)
	}
	verified := func() *metav1.Condition {
		t.Helper()
		snap := &v1alpha1.Snapshot{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "checked"}, snap); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(snap.Status.Conditions, v1alpha1.ConditionVerified)
		if cond == nil {
			t.Fatalf("no Verified condition: %+v", snap.Status.Conditions)
		}
		if !meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
			t.Fatalf("recording Verified must keep Ready: %+v", snap.Status.Conditions)
		}
		return cond
	}
	verify := func() (string, error) {
		return run(ctx, append([]string{"snapshot", "verify", "checked"}, hubArgs(ns)...)...)
	}

	// Intact: True.
	if out, err := verify(); err != nil || !strings.Contains(out, "verified") {
		t.Fatalf("snapshot verify: %v\n%s", err, out)
	}
	cond := verified()
	if cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonChecksumMatched || !strings.Contains(cond.Message, "sha256:") {
		t.Fatalf("an intact payload: Verified %s %s %q", cond.Status, cond.Reason, cond.Message)
	}

	// One byte of the stored payload flipped: False, ChecksumMismatch.
	file := filepath.Join(store, "checked")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(); err == nil || !strings.Contains(err.Error(), "FAILED verification") {
		t.Fatalf("verify of a corrupted payload must fail: %v\n%s", err, out)
	}
	cond = verified()
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonChecksumMismatch || !strings.Contains(cond.Message, "corrupted") {
		t.Fatalf("a corrupted payload: Verified %s %s %q", cond.Status, cond.Reason, cond.Message)
	}

	// The payload gone: False, PayloadUnavailable.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(); err == nil {
		t.Fatalf("verify of a missing payload must fail:\n%s", out)
	}
	cond = verified()
	if cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonPayloadUnavailable || !strings.Contains(cond.Message, "not found") {
		t.Fatalf("a missing payload: Verified %s %s %q", cond.Status, cond.Reason, cond.Message)
	}
}
