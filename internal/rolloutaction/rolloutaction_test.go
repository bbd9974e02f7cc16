package rolloutaction

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// lostAnswers is a client whose first Update of a Rollout is done and then answered with a
// conflict, as a write whose answer was lost and that the client's transport sent again (with
// the resourceVersion the first write used up) is. It counts the Updates done.
func lostAnswers(t *testing.T, objs ...client.Object) (client.Client, *int) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	done := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Rollout{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := c.Update(ctx, obj, opts...); err != nil {
					return err
				}
				done++
				if done == 1 {
					return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("rollouts").GroupResource(), obj.GetName(), nil)
				}
				return nil
			},
		}).Build()
	return c, &done
}

// TestChangesWhoseAnswerIsLostAreDoneOnce: a rollback or a retry whose write was done but
// whose answer was lost (the second try met a conflict) is done, once. Before, the rollback
// read the Rollout again and refused ("rollout mysql already wants mysql-v1"), and the retry
// wrote a second request to retry.
func TestChangesWhoseAnswerIsLostAreDoneOnce(t *testing.T) {
	ctx := t.Context()
	ro := func() *v1alpha1.Rollout {
		return &v1alpha1.Rollout{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql"},
			Spec:       v1alpha1.RolloutSpec{Operator: "mysql-operator", Release: "mysql-v2"},
			Status:     v1alpha1.RolloutStatus{FailedRelease: "mysql-v2", PreviousRelease: "mysql-v1"},
		}
	}
	rel := &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql-v1"}}

	c, done := lostAnswers(t, ro(), rel)
	got, from, to, err := Rollback(ctx, c, "team-a", "mysql", "", "a lost answer")
	if err != nil {
		t.Fatalf("rollback whose answer was lost: %v", err)
	}
	if from != "mysql-v2" || to != "mysql-v1" || got.Spec.Release != "mysql-v1" || !strings.HasPrefix(got.Annotations[v1alpha1.AnnotationRollbackReason], "a lost answer (at ") {
		t.Fatalf("rollback from %q to %q: rollout wants %q, reason %q", from, to, got.Spec.Release, got.Annotations[v1alpha1.AnnotationRollbackReason])
	}
	if *done != 1 {
		t.Fatalf("the rollback was written %d times, want once", *done)
	}

	c, done = lostAnswers(t, ro(), rel)
	got, what, err := Retry(ctx, c, "team-a", "mysql", "rewind")
	if err != nil || what != "mysql-v2" || got.Annotations[v1alpha1.AnnotationRetry] == "" {
		t.Fatalf("retry whose answer was lost: %q, %v", what, err)
	}
	if *done != 1 {
		t.Fatalf("the retry was written %d times, want once", *done)
	}
}
