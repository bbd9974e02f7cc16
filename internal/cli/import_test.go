//go:build !unit

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/internal/teststores"
)

// createS3Store creates, in namespace ns of the hub c, the credentials Secret and the
// SnapshotStore "backups" on the bucket of srv, with a KMS key.
func createS3Store(t *testing.T, c client.Client, ns string, srv *teststores.S3, keyURL string) {
	t.Helper()
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "backups-creds", Namespace: ns}, Data: map[string][]byte{
		snapstore.CredAccessKeyID: []byte(srv.AccessKey), snapstore.CredSecretAccessKey: []byte(srv.SecretKey),
	}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "backups", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderS3, Bucket: "dr-backups", Prefix: "fleet", Endpoint: srv.Endpoint, Region: srv.Region,
		CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "backups-creds"}, KeyRef: &v1alpha1.SnapshotKeyRef{KMS: keyURL},
	}}); err != nil {
		t.Fatal(err)
	}
}

// A snapshot taken through one hub into an S3 store survives the hub: a new hub imports it
// from the store and restores the member from it.
func TestDisasterRecoveryImportIntoANewHub(t *testing.T) {
	ctx := t.Context()
	srv := teststores.StartS3(t)
	kms := teststores.StartKMS(t)
	srv.CreateBucket(t, "dr-backups")
	keyURL := kms.CreateKey(t, "fleet")
	m := env.Members[1]

	// Hub 1: the package's hub. Register the member, install the release there, take a
	// snapshot into the store.
	c1 := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add: %v\n%s", err, out)
	}
	createMySQLRelease(t, ns)
	rel, objs := loadRelease(t, ns, "mysql-v1")
	installObjects(t, m, objs, "mysql-system", rel)
	if err := testfixture.Populate(ctx, m.RESTConfig(), testfixture.Options{Namespaces: []string{"dr-a"}, Count: 8, Children: true}); err != nil {
		t.Fatal(err)
	}
	createS3Store(t, c1, ns, srv, keyURL)
	out, err := run(ctx, append([]string{"snapshot", "take", "--cluster", m.Name, "--operator", "mysql-operator", "--name", "before-disaster", "--store", "backups"}, hubArgs(ns)...)...)
	if err != nil {
		t.Fatalf("snapshot take --store backups: %v\n%s", err, out)
	}

	// The member changes after the snapshot.
	dyn, err := dynamic.NewForConfig(m.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cr, err := dyn.Resource(testfixture.MySQLGVR).Namespace("dr-a").Get(ctx, "db-00002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(cr.Object, int64(9), "spec", "replicas")
	if _, err := dyn.Resource(testfixture.MySQLGVR).Namespace("dr-a").Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Resource(testfixture.MySQLGVR).Namespace("dr-a").Delete(ctx, "db-00005", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The disaster: every rewind object of hub 1 goes, with its namespace (Snapshots,
	// SnapshotStore, Secrets, releases).
	var snaps v1alpha1.SnapshotList
	if err := c1.List(ctx, &snaps, client.InNamespace(ns)); err != nil || len(snaps.Items) != 1 {
		t.Fatalf("hub 1 has %d snapshots (%v), want 1", len(snaps.Items), err)
	}
	for i := range snaps.Items {
		if err := c1.Delete(ctx, &snaps.Items[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := c1.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	// Hub 2: a new, empty hub (its own etcd and API server).
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	hub2, err := testbed.Start(startCtx, testbed.Options{})
	if err != nil {
		t.Fatalf("starting a second hub: %v", err)
	}
	t.Cleanup(func() { _ = hub2.Stop() })
	c2 := testenv.HubClient(t, hub2.Hub.RESTConfig())
	ns2 := testenv.Namespace(t, hub2.Hub.RESTConfig())
	args2 := []string{"--kubeconfig", hub2.Hub.Kubeconfig, "-n", ns2}
	if out, err := run(ctx, "clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", hub2.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters add in hub 2: %v\n%s", err, out)
	}
	createS3Store(t, c2, ns2, srv, keyURL)

	out, err = run(ctx, append([]string{"snapshot", "import", "--store", "backups", "-o", "json"}, args2...)...)
	if err != nil {
		t.Fatalf("snapshot import: %v\n%s", err, out)
	}
	var res struct{ Imported []string }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Imported) != 1 || res.Imported[0] != "before-disaster" {
		t.Fatalf("import -o json: %v\n%s", err, out)
	}
	snap := &v1alpha1.Snapshot{}
	if err := c2.Get(ctx, client.ObjectKey{Namespace: ns2, Name: "before-disaster"}, snap); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) || snap.Status.Store != "backups" ||
		snap.Spec.Cluster != m.Name || snap.Spec.Release != "mysql-v1" || snap.Status.Counts.CustomResources != 8 {
		t.Fatalf("the imported Snapshot: spec %+v status %+v", snap.Spec, snap.Status)
	}
	// Importing again imports nothing twice.
	if out, err := run(ctx, append([]string{"snapshot", "import", "--store", "backups"}, args2...)...); err != nil || !strings.Contains(out, "imported 0 snapshots") || !strings.Contains(out, "1 were already there") {
		t.Fatalf("a second import: %v\n%s", err, out)
	}
	if out, err := run(ctx, append([]string{"snapshot", "verify", "before-disaster"}, args2...)...); err != nil {
		t.Fatalf("verify in hub 2: %v\n%s", err, out)
	}

	// Restore the member from the imported snapshot, through hub 2.
	out, err = run(ctx, append([]string{"snapshot", "restore", "before-disaster", "--cluster", m.Name}, args2...)...)
	if err != nil || !strings.Contains(out, "restored to snapshot before-disaster") {
		t.Fatalf("restore from the imported snapshot: %v\n%s", err, out)
	}
	cr, err = dyn.Resource(testfixture.MySQLGVR).Namespace("dr-a").Get(ctx, "db-00002", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(cr.Object, "spec", "replicas"); r == 9 {
		t.Fatal("the changed CR was not restored")
	}
	if _, err := dyn.Resource(testfixture.MySQLGVR).Namespace("dr-a").Get(ctx, "db-00005", metav1.GetOptions{}); err != nil {
		t.Fatalf("the deleted CR was not recreated: %v", err)
	}
	// The member equals the snapshot: a second restore has nothing to do.
	out, err = run(ctx, append([]string{"snapshot", "restore", "before-disaster", "--cluster", m.Name}, args2...)...)
	if err != nil || !strings.Contains(out, "already equals snapshot before-disaster") {
		t.Fatalf("after the restore the member must equal the snapshot: %v\n%s", err, out)
	}
}
