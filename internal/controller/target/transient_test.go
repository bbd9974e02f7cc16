package target

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// failingReader answers every read with err.
type failingReader struct {
	client.Client
	err error
}

func (f failingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return f.err
}

func (f failingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return f.err
}

// A hub that does not answer for a moment fails neither a snapshot nor a restore: the error
// is a fault, tried again. A snapshot store that is not there makes the cluster wait for it
// (nothing changes without a snapshot); only a snapshot to restore that is gone ends a restore.
func TestHubReadErrorsAreRetriedUnlessNotFound(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "things"}, "x")
	const (
		retried  = "retried"
		waits    = "waits"
		terminal = "terminal"
	)
	for _, tc := range []struct {
		name string
		err  error
		// want is what each step's error makes of the target.
		want map[string]string
	}{
		{"unavailable", apierrors.NewServiceUnavailable("the hub is restarting"), map[string]string{StepSnapshot: retried, StepRestore: retried}},
		{"timeout", apierrors.NewTimeoutError("request timed out", 1), map[string]string{StepSnapshot: retried, StepRestore: retried}},
		{"not found", gone, map[string]string{StepSnapshot: waits, StepRestore: terminal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := failingReader{err: tc.err}
			for step, s := range map[string]step{StepSnapshot: takeSnapshot{}, StepRestore: restoreSnapshot{}} {
				x := (&Reconciler{Client: hub, Hub: hub}).newExecution(&v1alpha1.RolloutTarget{
					ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
					Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1", Snapshot: "snap", SnapshotStore: "store", Operator: "op",
						ToRelease: "rel", FromRelease: "old"}})
				_, err := s.run(t.Context(), x)
				if err == nil {
					t.Fatalf("%s: a failed read must fail the step", step)
				}
				var we *waitError
				got := retried
				switch {
				case isTerminal(err):
					got = terminal
				case errors.As(err, &we):
					got = waits
					if we.reason != v1alpha1.ReasonSnapshotStoreUnavailable {
						t.Errorf("%s: waits for %s, want %s", step, we.reason, v1alpha1.ReasonSnapshotStoreUnavailable)
					}
				case !fault.IsTransient(err):
					got = "a failed attempt"
				}
				if got != tc.want[step] {
					t.Errorf("%s: %v: %s, want %s", step, err, got, tc.want[step])
				}
			}
		})
	}
}
