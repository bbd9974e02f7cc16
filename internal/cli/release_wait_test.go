package cli

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestWaitSettledRetriesFailedReads: reads of the release that fail (the hub briefly
// unreachable) do not end the wait; it goes on until the release is Ready, or reports the
// last failure when the time is up.
func TestWaitSettledRetriesFailedReads(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rel := &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Name: "mysql-operator-1.0.0", Namespace: "rewind"}}
	meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Stored"})
	unavailable := apierrors.NewServiceUnavailable("the hub is restarting")
	for _, tc := range []struct {
		// name says what the reads do.
		name string
		// failures is how many reads fail first (-1: all).
		failures int
		// ready is whether the wait should end with the release Ready.
		ready bool
		// timeout of the wait.
		timeout time.Duration
	}{
		{name: "two failed reads, then Ready", failures: 2, ready: true, timeout: time.Minute},
		{name: "every read fails", failures: -1, timeout: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(rel.DeepCopy()).WithStatusSubresource(rel).Build(), interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					reads++
					if tc.failures < 0 || reads <= tc.failures {
						return unavailable
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			got, lastErr, err := waitSettled(t.Context(), c, client.ObjectKeyFromObject(rel), 10*time.Millisecond, tc.timeout)
			if tc.ready {
				if err != nil || lastErr != nil || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
					t.Fatalf("after %d reads: err %v, last read %v, conditions %v; want Ready", reads, err, lastErr, got.Status.Conditions)
				}
				return
			}
			if err == nil || !errors.Is(lastErr, unavailable) || reads < 2 {
				t.Fatalf("after %d reads: err %v, last read %v; want a timeout, several reads and the last read's error", reads, err, lastErr)
			}
		})
	}
}
