//go:build !unit

package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// The manager runs the SnapshotStore reconciler: a store becomes Ready by itself.
func TestManagerProbesSnapshotStores(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	mgr, err := NewManager(env.Hub.RESTConfig(), Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	ctx := t.Context()
	st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "folder", Namespace: ns}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderFolder, Path: t.TempDir()}}
	if err := c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(st), st); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(st.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("the store never became Ready: %v (conditions %+v)", err, st.Status.Conditions)
	}
	if len(st.Finalizers) != 1 || st.Finalizers[0] != FinalizerSnapshotsStored {
		t.Fatalf("finalizers %v", st.Finalizers)
	}
}

// A hub without every rewind.dev CRD: the manager refuses to start and names the missing kinds
// and the fix, instead of exiting minutes later when an informer gives up. On its own hub, as
// the shared one has every CRD.
func TestManagerRefusesAHubWithoutItsCRDs(t *testing.T) {
	tb, err := testbed.Start(t.Context(), testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Stop() })
	cfg := tb.Hub.RESTConfig()
	opts := Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true}
	wait0 := crdWait
	crdWait = time.Second // not the 10 s a real start waits for discovery to catch up
	t.Cleanup(func() { crdWait = wait0 })

	_, err = NewManager(cfg, opts)
	if err == nil || !strings.Contains(err.Error(), "MemberCluster, NotificationPolicy, NotificationRecord, OperatorRelease, Rollout, RolloutTarget, Snapshot, SnapshotSchedule, SnapshotStore") ||
		!strings.Contains(err.Error(), "rewind install --crds-only") {
		t.Fatalf("no CRDs: %v", err)
	}

	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	var some []*unstructured.Unstructured
	for _, crd := range crds {
		if !strings.HasPrefix(crd.GetName(), "snapshotst") { // leaves out SnapshotStore
			some = append(some, crd)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme}) // not testenv.HubClient: it installs every CRD
	if err != nil {
		t.Fatal(err)
	}
	if err := install.Apply(t.Context(), c, some, install.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err = NewManager(cfg, opts)
		return err != nil && strings.Contains(err.Error(), "serve rewind.dev/v1alpha1 SnapshotStore:"), nil
	})
	if err != nil {
		_, last := NewManager(cfg, opts)
		t.Fatalf("SnapshotStore's CRD missing: %v (last: %v)", err, last)
	}

	if err := install.Apply(t.Context(), c, crds, install.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := NewManager(cfg, opts)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("every CRD installed, the manager still refuses: %v", err)
	}
}
