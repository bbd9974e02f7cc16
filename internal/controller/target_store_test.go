//go:build !unit

package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// The snapshot step of a RolloutTarget writes into the SnapshotStore its spec names, and waits
// for one that is not Ready, naming it, until it is.
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

	// Not Ready: the target waits at its snapshot step, naming the store, without failing
	// (nothing changes on the cluster without its snapshot).
	rt, err := run("refused", "broken")
	if err != nil {
		t.Fatal(err)
	}
	if rt.Status.Phase != v1alpha1.ClusterUpgrading || rt.Status.Step != target.StepSnapshot || rt.Status.Attempt != 0 ||
		rt.Status.WaitingFor != v1alpha1.ReasonSnapshotStoreUnavailable || rt.Status.WaitingSince == nil ||
		!strings.Contains(rt.Status.Message, "snapshot store "+ns+"/broken is not Ready (") ||
		!strings.Contains(rt.Status.Message, "no cluster changes without its snapshot") {
		t.Fatalf("target with a store that is not Ready: phase %s step %s attempt %d waiting for %q: %s",
			rt.Status.Phase, rt.Status.Step, rt.Status.Attempt, rt.Status.WaitingFor, rt.Status.Message)
	}
	// The store is mended: the target goes on by itself (here: to the crash the test injects
	// after the snapshot) once its wait is over.
	broken := &v1alpha1.SnapshotStore{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "broken"}, broken); err != nil {
		t.Fatal(err)
	}
	broken.Spec.Path = t.TempDir()
	if err := c.Update(ctx, broken); err != nil {
		t.Fatal(err)
	}
	if _, err := (&SnapshotStoreReconciler{Client: c}).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(broken)}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, rerr := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rt)})
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
			return false, err
		}
		return errors.Is(rerr, target.ErrCrash), nil
	})
	if err != nil || rt.Status.Snapshot != "refused-member1-r1" || rt.Status.WaitingFor != "" {
		t.Fatalf("once the store is Ready, the target takes its snapshot and goes on: %v, status %+v", err, rt.Status)
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

// A target puts on record, before it runs, only the steps a crash must resume at: not the
// quick idempotent ones (the apply stages after the CRDs, Record), which a restarted controller
// redoes from the journaled step before them, nor those that only read the cluster (Precheck,
// the health gate), whose finding is written anyway. An upgrade up to its gate's wait writes its
// status three times (it was five).
func TestTargetJournalsOnlyTheStepsItMustResumeAt(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	registerMember(t, c, ns)
	// A CRD and the operator's Deployment (which never becomes available here: this member
	// runs no controllers, so the target stops at its health gate). The operator's name is
	// its own: the member's record of another test's operator does not stop this one.
	image := testfixture.OperatorImage("1.0.0")
	dep := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "journal-operator"},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "journal"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "journal"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "manager", "image": image}}}}}}}
	canonical, err := release.Canonical([]*unstructured.Unstructured{testfixture.MySQLCRD(), dep})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Create(ctx, c, &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Name: "journal-v1", Namespace: ns}, Spec: v1alpha1.OperatorReleaseSpec{
		Operator: "journal-operator", Version: "1.0.0", GitCommit: testfixture.GitCommit, Image: image, Format: v1alpha1.FormatManifests, Digest: release.Digest(canonical),
	}}, canonical); err != nil {
		t.Fatal(err)
	}
	// Every status write, by the step it records.
	var mu sync.Mutex
	var written []string
	base, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	counting := interceptor.NewClient(base, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if rt, ok := obj.(*v1alpha1.RolloutTarget); ok && sub == "status" {
				mu.Lock()
				written = append(written, rt.Status.Step)
				mu.Unlock()
			}
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	r := &target.Reconciler{Client: counting, Hub: c, Members: &member.Cache{Hub: c}, Releases: &release.Cache{}}
	rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "journal", Namespace: ns}, Spec: v1alpha1.RolloutTargetSpec{
		Rollout: "journal", Cluster: "member1", Revision: 1, Path: v1alpha1.PathUpgrade, ToRelease: "journal-v1", Snapshot: "journal-member1-r1",
		Operator: "journal-operator", InstallNamespace: "journal-system", Start: true,
	}}
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	// One reconcile runs every step up to the health gate, which then waits.
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rt)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
		t.Fatal(err)
	}
	if rt.Status.Step != target.StepHealthGate || res.RequeueAfter <= 0 || !strings.Contains(rt.Status.Message, "waiting for health") {
		t.Fatalf("want the target waiting at its health gate, got %+v (requeue %s)", rt.Status, res.RequeueAfter)
	}
	mu.Lock()
	defer mu.Unlock()
	// The Snapshot and ApplyCRDs (the first change to the cluster) on record before they run;
	// Precheck and the health gate only read the cluster: the gate's first write is its wait.
	want := []string{target.StepSnapshot, target.StepApplyCRDs, target.StepHealthGate}
	if !slices.Equal(written, want) {
		t.Errorf("status writes up to the health gate, by the step each records: %v, want %v", written, want)
	}
	for _, s := range []string{target.StepPrecheck, target.StepApplyRBAC, target.StepApplyWorkloads, target.StepHealthGate, target.StepRecord} {
		if target.Journaled(s) {
			t.Errorf("step %s is journaled: it only reads the cluster or redoes idempotent writes", s)
		}
	}
}

// A restore waiting for the --restore-memory budget reads its Snapshot from the hub once, not
// at every try, and is woken when the memory it waits for is given back.
func TestTargetWaitingForMemoryAsksWithoutReadingTheHub(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	registerMember(t, c, ns)
	snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Name: "waiting-member1-r1", Namespace: ns},
		Spec: v1alpha1.SnapshotSpec{Cluster: "member1", Operator: "mysql-operator"}}
	if err := c.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	snap.Status.Bytes = 50
	if err := c.Status().Update(ctx, snap); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	snapshotReads := 0
	base, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: c.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	hub := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.Snapshot); ok {
				mu.Lock()
				snapshotReads++
				mu.Unlock()
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	budget := target.NewMemoryBudget(100)
	giveHolder, _ := budget.TryTake(types.NamespacedName{Namespace: ns, Name: "holder"}, "other", 100)
	r := &target.Reconciler{Client: c, Hub: hub, Members: &member.Cache{Hub: c}, Releases: &release.Cache{}, Restores: budget}
	rt := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: ns}, Spec: v1alpha1.RolloutTargetSpec{
		Rollout: "waiting", Cluster: "member1", Revision: 1, Path: v1alpha1.PathRestore, ToRelease: "mysql-a", Snapshot: snap.Name,
		Operator: "mysql-operator", InstallNamespace: "mysql-system", Start: true,
	}}
	if err := c.Create(ctx, rt); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rt)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rt), rt); err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter <= 0 || rt.Status.Step != target.StepRestore || !strings.Contains(rt.Status.Message, "waiting for memory") {
			t.Fatalf("want the restore waiting for memory, got %+v (requeue %s)", rt.Status, res.RequeueAfter)
		}
	}
	mu.Lock()
	if snapshotReads != 1 {
		t.Errorf("the waiting restore read its Snapshot %d times in 3 tries, want once", snapshotReads)
	}
	mu.Unlock()
	giveHolder()
	select {
	case ev := <-budget.Wakeups():
		if ev.Object.GetName() != rt.Name || ev.Object.GetNamespace() != ns {
			t.Fatalf("woke %s/%s, want %s/%s", ev.Object.GetNamespace(), ev.Object.GetName(), ns, rt.Name)
		}
	default:
		t.Fatal("the waiting restore was not woken when the memory was given back")
	}
}
