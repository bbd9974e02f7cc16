//go:build !unit

package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// table asks the API server for the `kubectl get` table of one object, as kubectl does.
func table(t *testing.T, resource, ns, name string) *metav1.Table {
	t.Helper()
	cfg := rest.CopyConfig(env.Hub.RESTConfig())
	cfg.GroupVersion = &v1alpha1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = clientgoscheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := rc.Get().Resource(resource).Name(name).Param("includeObject", "None").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if ns != "" {
		req = req.Namespace(ns)
	}
	raw, err := req.DoRaw(t.Context())
	if err != nil {
		t.Fatalf("table of %s %s: %v", resource, name, err)
	}
	tab := &metav1.Table{}
	if err := json.Unmarshal(raw, tab); err != nil {
		t.Fatal(err)
	}
	if len(tab.Rows) != 1 {
		t.Fatalf("table of %s %s has %d rows", resource, name, len(tab.Rows))
	}
	return tab
}

// columns returns the table's column names (those of the wide view marked "+wide") and its
// cells by column name (Age aside).
func columns(tab *metav1.Table) (names []string, cells map[string]string) {
	cells = map[string]string{}
	for i, c := range tab.ColumnDefinitions {
		if c.Priority > 0 {
			names = append(names, c.Name+" +wide")
		} else {
			names = append(names, c.Name)
		}
		if c.Name != "Age" {
			cells[c.Name] = fmt.Sprint(tab.Rows[0].Cells[i])
		}
	}
	return names, cells
}

// TestPrinterColumns checks what `kubectl get` shows for each kind, status included.
func TestPrinterColumns(t *testing.T) {
	c := hub(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()

	ro := goodRollout()
	ro.Name, ro.Namespace = "printed", ns
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	ro.Status = v1alpha1.RolloutStatus{
		Phase: v1alpha1.RolloutProgressing, CurrentWave: 1, CurrentRelease: "mysql-v2", ClustersDone: "1/2",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Progressing", Message: "wave rest", LastTransitionTime: metav1.Now()}},
		Targets:    v1alpha1.TargetCounts{Total: 2, Succeeded: 1, InProgress: 1},
	}
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatal(err)
	}

	rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "printed-member2", Namespace: ns},
		Spec: v1alpha1.RolloutTargetSpec{Rollout: "printed", Cluster: "member2", Revision: 2, Wave: 1, Path: v1alpha1.PathUpgrade,
			FromRelease: "mysql-v1", ToRelease: "mysql-v2", Operator: "mysql-operator", InstallNamespace: "mysql-system"}}
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	rt.Status = v1alpha1.RolloutTargetStatus{Revision: 2, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: "HealthGate", Message: "waiting for health"}
	if err := c.Status().Update(ctx, rt); err != nil {
		t.Fatal(err)
	}

	snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "member1-before-v2", Namespace: ns},
		Spec: v1alpha1.SnapshotSpec{Cluster: "member1", Operator: "mysql-operator", Release: "mysql-v1"}}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	snap.Status = v1alpha1.SnapshotStatus{Counts: v1alpha1.ObjectCounts{CRDs: 1, CustomResources: 42}, Bytes: 12345, Checksum: "sha256:abc"}
	if err := c.Status().Update(ctx, snap); err != nil {
		t.Fatal(err)
	}

	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "printed-" + ns},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: ns, Name: "kc", Key: "kubeconfig"}}}
	if err := c.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, mc) })
	mc.Status = v1alpha1.MemberClusterStatus{ServerVersion: "v1.37.2", ClusterID: "uid-1",
		Conditions: []metav1.Condition{{Type: "Reachable", Status: metav1.ConditionTrue, Reason: "Connected", Message: "ok", LastTransitionTime: metav1.Now()}}}
	if err := c.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}

	rel := goodRelease()
	rel.Name, rel.Namespace = "mysql-v2", ns
	if err := c.Create(ctx, rel); err != nil {
		t.Fatal(err)
	}
	rel.Status = v1alpha1.OperatorReleaseStatus{Format: v1alpha1.FormatManifests, Digest: digest,
		Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Stored", Message: "3 manifests stored", LastTransitionTime: metav1.Now()}}}
	if err := c.Status().Update(ctx, rel); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		resource, ns, name string
		obj                client.Object
		columns            []string
		cells              map[string]string
	}{
		{"rollouts", ns, ro.Name, ro,
			[]string{"Name", "Operator", "Release", "Phase", "Wave", "Ready", "Clusters", "Age"},
			map[string]string{"Name": "printed", "Operator": "mysql-operator", "Release": "mysql-v2", "Phase": v1alpha1.RolloutProgressing,
				"Wave": "1", "Ready": "False", "Clusters": "1/2"}},
		{"rollouttargets", ns, rt.Name, rt,
			[]string{"Name", "Rollout", "Cluster", "Wave", "Path", "Phase", "Step", "From +wide", "To", "Message +wide", "Age"},
			map[string]string{"Name": rt.Name, "Rollout": "printed", "Cluster": "member2", "Wave": "1", "Path": v1alpha1.PathUpgrade,
				"Phase": v1alpha1.ClusterUpgrading, "Step": "HealthGate", "From": "mysql-v1", "To": "mysql-v2", "Message": "waiting for health"}},
		{"snapshots", ns, snap.Name, snap,
			[]string{"Name", "Cluster", "Operator", "Release", "CRs", "Bytes +wide", "Checksum +wide", "Age"},
			map[string]string{"Name": snap.Name, "Cluster": "member1", "Operator": "mysql-operator", "Release": "mysql-v1",
				"CRs": "42", "Bytes": "12345", "Checksum": "sha256:abc"}},
		{"memberclusters", "", mc.Name, mc,
			[]string{"Name", "Mode", "Reachable", "Version", "Cluster ID +wide", "Message +wide", "Age"},
			map[string]string{"Name": mc.Name, "Mode": v1alpha1.ModePush, "Reachable": "True", "Version": "v1.37.2", "Cluster ID": "uid-1", "Message": "ok"}},
		{"operatorreleases", ns, rel.Name, rel,
			[]string{"Name", "Operator", "Version", "Image +wide", "Format", "Ready", "Digest +wide", "Message +wide", "Age"},
			map[string]string{"Name": rel.Name, "Operator": "mysql-operator", "Version": "1.2.3", "Image": rel.Spec.Image,
				"Format": v1alpha1.FormatManifests, "Ready": "True", "Digest": digest, "Message": "3 manifests stored"}},
	}
	for _, tc := range cases {
		t.Run(tc.resource, func(t *testing.T) {
			names, cells := columns(table(t, tc.resource, tc.ns, tc.name))
			if !reflect.DeepEqual(names, tc.columns) {
				t.Errorf("columns %q, want %q", names, tc.columns)
			}
			if !reflect.DeepEqual(cells, tc.cells) {
				t.Errorf("cells %v, want %v", cells, tc.cells)
			}
		})
	}
}
