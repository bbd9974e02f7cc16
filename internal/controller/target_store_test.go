//go:build !unit

package controller

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// The snapshot step of a RolloutTarget writes into the SnapshotStore its spec names, and
// refuses, for good and naming the store, one that is not Ready.
func TestTargetSnapshotStepUsesTheSnapshotStore(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	registerMember(t, c, ns)
	objs := []*unstructured.Unstructured{testfixture.MySQLCRD()}
	canonical, err := release.Canonical(objs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Create(ctx, c, &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Name: "other-v1", Namespace: ns}, Spec: v1alpha1.OperatorReleaseSpec{
		Operator: "other-operator", Version: "1.0.0", GitCommit: testCommit, Image: "example.com/other:" + testCommit, Format: v1alpha1.FormatManifests, Digest: release.Digest(canonical),
	}}, canonical); err != nil {
		t.Fatal(err)
	}
	folder := t.TempDir()
	for name, path := range map[string]string{"good": folder, "broken": "/proc/no-such-folder"} {
		st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{Provider: v1alpha1.StoreProviderFolder, Path: path}}
		if err := c.Create(ctx, st); err != nil {
			t.Fatal(err)
		}
		if _, err := (&SnapshotStoreReconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(st)}); err != nil {
			t.Fatal(err)
		}
	}
	r := &target.Reconciler{Client: c, Hub: c, Members: &member.Cache{Hub: c}, Releases: &release.Cache{},
		CrashAt: func(_, step string) bool { return step == target.StepApplyCRDs }}
	run := func(name, store string) (*v1alpha1.RolloutTarget, error) {
		rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.RolloutTargetSpec{
			Rollout: name, Cluster: "member1", Revision: 1, Path: v1alpha1.PathUpgrade, ToRelease: "other-v1", Snapshot: name + "-member1-r1",
			Operator: "other-operator", InstallNamespace: "other-system", Start: true, SnapshotStore: store,
		}}
		if err := c.Create(ctx, rt); err != nil {
			t.Fatal(err)
		}
		_, rerr := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rt)})
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
			t.Fatal(err)
		}
		return rt, rerr
	}

	// Not Ready: the target fails at its snapshot step, at once, naming the store.
	rt, err := run("refused", "broken")
	if err != nil {
		t.Fatal(err)
	}
	if rt.Status.Phase != v1alpha1.ClusterFailed || rt.Status.Step != target.StepSnapshot || rt.Status.Attempt != 0 ||
		!strings.Contains(rt.Status.Message, "snapshot store "+ns+"/broken is not Ready (") ||
		!strings.Contains(rt.Status.Message, "the Rollout does not start a cluster whose snapshot cannot be stored") {
		t.Fatalf("target with a store that is not Ready: phase %s step %s attempt %d: %s", rt.Status.Phase, rt.Status.Step, rt.Status.Attempt, rt.Status.Message)
	}
	// Ready: the snapshot goes into the folder and records its store (the test stops the
	// target before it applies anything).
	rt, err = run("stored", "good")
	if !errors.Is(err, target.ErrCrash) || rt.Status.Snapshot != "stored-member1-r1" {
		t.Fatalf("target with a Ready store: %v, status %+v", err, rt.Status)
	}
	snap := &v1alpha1.Snapshot{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stored-member1-r1"}, snap); err != nil {
		t.Fatal(err)
	}
	if snap.Status.Store != "good" || !meta.IsStatusConditionTrue(snap.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("the snapshot: %+v", snap.Status)
	}
	for _, f := range []string{"stored-member1-r1", "stored-member1-r1.snapshot.json"} {
		if _, err := os.Stat(filepath.Join(folder, f)); err != nil {
			t.Fatalf("the store lacks %s: %v", f, err)
		}
	}
}
