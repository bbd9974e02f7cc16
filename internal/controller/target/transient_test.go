package target

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
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

// A hub that does not answer for a moment fails neither a snapshot nor a restore for good:
// the step is tried again with backoff. Only a store or snapshot that is gone ends it.
func TestHubReadErrorsAreRetriedUnlessNotFound(t *testing.T) {
	gone := apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "things"}, "x")
	for _, tc := range []struct {
		name     string
		err      error
		terminal bool
	}{
		{"unavailable", apierrors.NewServiceUnavailable("the hub is restarting"), false},
		{"timeout", apierrors.NewTimeoutError("request timed out", 1), false},
		{"not found", gone, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub := failingReader{err: tc.err}
			for step, s := range map[string]step{StepSnapshot: takeSnapshot{}, StepRestore: restoreSnapshot{}} {
				x := &execution{r: &Reconciler{Client: hub, Hub: hub}, t: &v1alpha1.RolloutTarget{
					ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns"},
					Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1", Snapshot: "snap", SnapshotStore: "store", Operator: "op",
						ToRelease: "rel", FromRelease: "old"}}}
				_, err := s.run(t.Context(), x)
				if err == nil {
					t.Fatalf("%s: a failed read must fail the step", step)
				}
				if isTerminal(err) != tc.terminal {
					t.Errorf("%s: %v: terminal %t, want %t", step, err, isTerminal(err), tc.terminal)
				}
			}
		})
	}
}
