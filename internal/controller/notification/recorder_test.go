//go:build !unit

package notification

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// The record's path to the API server under injected faults: a record write answered 503
// (not applied), one applied but answered with a timeout, one that meets another writer (a
// real 409 from the API server), a read of the record reset. Every notification still reaches
// the receiver once, and the record says each was delivered.
func TestRecorderUnderAPIServerFaults(t *testing.T) {
	cfg := env.Hub.RESTConfig()
	c := testenv.HubClient(t, cfg)
	ns := testenv.Namespace(t, cfg)
	ctx := t.Context()

	var mu sync.Mutex
	accepted := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepted[r.Header.Get(v1alpha1.HeaderIdempotencyKey)]++
		mu.Unlock()
	}))
	defer srv.Close()

	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "op", Release: "a", InstallNamespace: "op", Waves: []v1alpha1.Wave{{Name: "canary", Clusters: []string{"m1"}, MaxConcurrency: 1}}}}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ro.Status = v1alpha1.RolloutStatus{Revision: 1, CurrentWave: 1, Phase: v1alpha1.RolloutSucceeded, CurrentRelease: "a",
		History: []v1alpha1.Revision{{Revision: 1, Release: "a", StartedAt: &now, FinishedAt: &now, Outcome: "Succeeded"}}}
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, StringData: map[string]string{"url": srv.URL}}); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.NotificationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ops", Namespace: ns}, Spec: v1alpha1.NotificationPolicySpec{
		Events:       []v1alpha1.NotificationEvent{v1alpha1.EventRevisionStarted, v1alpha1.EventRevisionFinished, v1alpha1.EventWaveStarted, v1alpha1.EventWaveFinished},
		Destinations: []v1alpha1.NotificationDestination{{Name: "hook", Type: v1alpha1.DestinationWebhook, URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	// Faults on the writes that record a delivery (the status writes after the first two,
	// which make the record and list its notifications), and on the first read of the record.
	other := testenv.HubClient(t, cfg) // another writer
	var writes, injected503, injectedTimeout, conflicts, resets int
	base, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	faulty := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.NotificationRecord); !ok || sub != "status" {
				return cl.SubResource(sub).Update(ctx, obj, opts...)
			}
			writes++
			switch writes {
			case 3:
				injected503++
				return apierrors.NewServiceUnavailable("injected: the API server is shutting down")
			case 5:
				// Applied, but the answer is lost.
				if err := cl.SubResource(sub).Update(ctx, obj, opts...); err != nil {
					return err
				}
				injectedTimeout++
				return apierrors.NewTimeoutError("injected: the answer was lost", 1)
			case 7:
				// Another writer changes the record first: the API server answers 409.
				rec := &v1alpha1.NotificationRecord{}
				if err := other.Get(ctx, client.ObjectKeyFromObject(obj), rec); err != nil {
					return err
				}
				rec.Labels["touched"] = "yes"
				if err := other.Update(ctx, rec); err != nil {
					return err
				}
				err := cl.SubResource(sub).Update(ctx, obj, opts...)
				if fault.IsConflict(err) {
					conflicts++
				}
				return err
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	reader := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*v1alpha1.NotificationRecord); ok && resets == 0 {
				resets++
				return &url.Error{Op: "Get", URL: "https://hub/", Err: syscall.ECONNRESET}
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
	r := &Reconciler{Client: faulty, Reader: reader}
	d := &Deliverer{Client: faulty, Reader: reader}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: ro.Name}}
	recReq := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: RecordName("ops", "db")}}
	reconcile := func(ctx context.Context) error {
		if _, err := r.Reconcile(ctx, req); err != nil {
			return err
		}
		_, err := d.Reconcile(ctx, recReq)
		return err
	}
	var reconcileErrs []error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := reconcile(ctx); err != nil {
			reconcileErrs = append(reconcileErrs, err)
			if !fault.IsTransient(err) {
				return false, err
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) == 4, nil
	})
	if err != nil {
		t.Fatalf("not every notification was delivered: %v (accepted %v)", err, accepted)
	}
	if injected503 != 1 || injectedTimeout != 1 || conflicts != 1 || resets != 1 {
		t.Fatalf("faults injected: 503 %d, lost answer %d, conflict %d, reset %d; want one of each", injected503, injectedTimeout, conflicts, resets)
	}
	if len(reconcileErrs) != 1 || !errors.Is(reconcileErrs[0], syscall.ECONNRESET) {
		t.Errorf("only the reset read fails a reconcile (it is retried); the write faults are retried in place: %v", reconcileErrs)
	}
	// Reconciles that follow send nothing again.
	for range 3 {
		if err := reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	for k, n := range accepted {
		if n != 1 {
			t.Errorf("%s accepted %d times, want once", k, n)
		}
	}
	mu.Unlock()
	rec := &v1alpha1.NotificationRecord{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: RecordName("ops", "db")}, rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Status.Notifications) != 4 {
		t.Fatalf("record: %+v", rec.Status.Notifications)
	}
	for _, n := range rec.Status.Notifications {
		if d := n.Deliveries[0]; d.DeliveredAt == nil || d.Attempts != 1 {
			t.Errorf("%s: %+v, want delivered at the first attempt", n.Key, d)
		}
	}
	if len(rec.OwnerReferences) != 1 || rec.OwnerReferences[0].UID != ro.UID {
		t.Errorf("the record must be owned by its Rollout (deleted with it): %+v", rec.OwnerReferences)
	}
}

// TestAPolicyMadeLaterSendsFromItsRevisionThroughAFault: a policy made after its Rollout
// has a history sends the events of the Rollout's current revision on, even when the record's
// first status write (right after its creation) meets a fault. Before, the revision to send
// from was only in that status write: the next reconcile found the record without it and
// queued every event of the Rollout's history (here revision 1's, from before the policy).
func TestAPolicyMadeLaterSendsFromItsRevisionThroughAFault(t *testing.T) {
	cfg := env.Hub.RESTConfig()
	c := testenv.HubClient(t, cfg)
	ns := testenv.Namespace(t, cfg)
	ctx := t.Context()

	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "op", Release: "b", InstallNamespace: "op", Waves: []v1alpha1.Wave{{Name: "canary", Clusters: []string{"m1"}, MaxConcurrency: 1}}}}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ro.Status = v1alpha1.RolloutStatus{Revision: 2, CurrentWave: 1, Phase: v1alpha1.RolloutSucceeded, CurrentRelease: "b", History: []v1alpha1.Revision{
		{Revision: 1, Release: "a", StartedAt: &now, FinishedAt: &now, Outcome: "Succeeded"},
		{Revision: 2, Release: "b", StartedAt: &now, FinishedAt: &now, Outcome: "Succeeded"},
	}}
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	p := &v1alpha1.NotificationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ops", Namespace: ns}, Spec: v1alpha1.NotificationPolicySpec{
		Events:       []v1alpha1.NotificationEvent{v1alpha1.EventRevisionStarted, v1alpha1.EventRevisionFinished},
		Destinations: []v1alpha1.NotificationDestination{{Name: "hook", Type: v1alpha1.DestinationWebhook, URLSecretRef: v1alpha1.SecretKeyReference{Name: "hook", Key: "url"}}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}

	base, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	injected := 0
	faulty := interceptor.NewClient(base, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if _, ok := obj.(*v1alpha1.NotificationRecord); ok && sub == "status" && injected == 0 {
				injected++
				return apierrors.NewServiceUnavailable("injected: the API server is shutting down")
			}
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r := &Reconciler{Client: faulty, Reader: base}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: ro.Name}}
	if _, err := r.Reconcile(ctx, req); !fault.IsTransient(err) {
		t.Fatalf("the first reconcile: %v, want the injected fault", err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	rec := &v1alpha1.NotificationRecord{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: RecordName("ops", "db")}, rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Status.Notifications) == 0 {
		t.Fatal("the record holds no notification of the current revision")
	}
	for _, n := range rec.Status.Notifications {
		if n.Revision < 2 {
			t.Errorf("notification %s of revision %d, from before the policy, is queued", n.Key, n.Revision)
		}
	}
}
