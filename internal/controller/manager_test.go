//go:build !unit

package controller

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
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
