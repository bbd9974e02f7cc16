package agent

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
)

// A heartbeat renews the agent's Lease with one write: the Lease is read before the first
// renewal and again only when it changed since the agent's last write (or was removed). Before,
// every heartbeat read it first: at 1,000 members, 33 reads a second on the hub.
func TestHeartbeatRenewsWithOneWrite(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = coordinationv1.AddToScheme(scheme)
	gets, writes := 0, 0
	hub := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			writes++
			return c.Update(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			writes++
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	a := &agent{o: Options{Cluster: "edge", Now: func() time.Time { return now }}, c: hub, id: "uid-1",
		lease: Heartbeat{Cluster: "edge", Holder: "edge/uid-1", Duration: DefaultLeaseDuration}}
	key := client.ObjectKey{Namespace: v1alpha1.MemberNamespace("edge"), Name: join.AgentLease}
	beat := func(wantGets, wantWrites int) {
		t.Helper()
		gets, writes = 0, 0
		now = now.Add(30 * time.Second)
		if err := a.heartbeat(context.Background()); err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{}
		if err := hub.Get(context.Background(), key, lease); err != nil {
			t.Fatal(err)
		}
		if !lease.Spec.RenewTime.Time.Equal(now) || *lease.Spec.HolderIdentity != "edge/uid-1" {
			t.Fatalf("Lease renewed at %v by %s, want %v by edge/uid-1", lease.Spec.RenewTime, *lease.Spec.HolderIdentity, now)
		}
		if gets != wantGets+1 || writes != wantWrites { // +1: the check above
			t.Fatalf("heartbeat: %d reads and %d writes, want %d and %d", gets-1, writes, wantGets, wantWrites)
		}
	}
	beat(1, 1) // created
	beat(0, 1)
	beat(0, 1)

	// Changed by someone else since: the write is refused (conflict), read again, written.
	lease := &coordinationv1.Lease{}
	if err := hub.Get(context.Background(), key, lease); err != nil {
		t.Fatal(err)
	}
	lease.Labels = map[string]string{"touched": "yes"}
	if err := hub.Update(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	beat(1, 2)
	beat(0, 1)

	// Removed: read (not found), created again.
	if err := hub.Delete(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	beat(1, 2)
	beat(0, 1)
}

// A heartbeat that failed is tried again within seconds, then less often at each failure in a
// row, never less often than the interval: at the 60 s interval a single lost beat (a reset, a
// 503) would otherwise cost a third of the default 3-minute grace period.
func TestNextBeat(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		failures int
		want     time.Duration
	}{
		{time.Minute, 0, time.Minute},
		{time.Minute, 1, 5 * time.Second},
		{time.Minute, 2, 10 * time.Second},
		{time.Minute, 3, 20 * time.Second},
		{time.Minute, 4, 40 * time.Second},
		{time.Minute, 5, time.Minute},
		{time.Minute, 50, time.Minute},
		{time.Second, 1, time.Second},
	} {
		if got := nextBeat(tc.interval, tc.failures); got != tc.want {
			t.Errorf("nextBeat(%s, %d) = %s, want %s", tc.interval, tc.failures, got, tc.want)
		}
	}
}
