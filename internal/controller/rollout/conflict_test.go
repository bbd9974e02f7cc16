package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/metrics"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// A revision's start whose status write conflicts (another writer changed the Rollout's status
// since the reconcile read it) is not on record: its RevisionStarted Event and metric are not
// emitted, and the reconcile is requeued without an error. The reconcile that starts it again
// from a fresh read emits them once. (Before, the Event and the metric were emitted before the
// write, so both were repeated, and the conflict was returned as a reconcile error.)
//
// The fake client stands in for the API server here (with the status subresource and its
// resourceVersion check); the optimistic lock itself is shown against a real API server in
// internal/patch.
func TestRevisionStartedOnceAfterAStatusConflict(t *testing.T) {
	ctx := t.Context()
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: "fleet", UID: "rollout-uid"},
		Spec: v1alpha1.RolloutSpec{Operator: "mysql-operator", Release: "mysql-1", InstallNamespace: "mysql-operator-system",
			Waves: []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1"}}}},
	}
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member1"}}
	conflicts := 0
	c := fake.NewClientBuilder().WithScheme(s).
		WithStatusSubresource(&v1alpha1.Rollout{}, &v1alpha1.RolloutTarget{}, &v1alpha1.OperatorRelease{}, &v1alpha1.MemberCluster{}).
		WithObjects(ro, mc).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*v1alpha1.Rollout); ok && conflicts == 0 {
					// Another writer records something in the status first: the reconcile's
					// write, made with the resourceVersion it read, conflicts.
					conflicts++
					cur := &v1alpha1.Rollout{}
					if err := cl.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
						return err
					}
					cur.Status.LastHandledRetry = "handled-by-another-writer"
					if err := cl.Status().Update(ctx, cur); err != nil {
						return err
					}
				}
				return cl.Status().Patch(ctx, obj, p, opts...)
			},
		}).Build()
	if err := testfixture.CreateRelease(ctx, c, t.TempDir(), "fleet", "mysql-1", "1.0.0", ""); err != nil {
		t.Fatal(err)
	}
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: c, Hub: c, Live: c, Releases: &release.Cache{}, Recorder: recorder,
		Now: func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) }}
	started := metrics.Transitions.WithLabelValues("RevisionStarted")
	before := testutil.ToFloat64(started)
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ro)}

	res, err := r.Reconcile(ctx, req)
	if err != nil {
		t.Errorf("a status write that conflicts is returned as a reconcile error: %v", err)
	}
	if conflicts != 1 || (err == nil && res.RequeueAfter <= 0) {
		t.Errorf("%d conflicts, requeue after %s; want 1 and a requeue", conflicts, res.RequeueAfter)
	}
	early := countEvents(recorder, "RevisionStarted")
	if early != 0 {
		t.Errorf("%d RevisionStarted Events after a status write that did not go through; want 0", early)
	}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Rollout{}
	if err := c.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Revision != 1 || got.Status.CurrentRelease != "mysql-1" || got.Status.LastHandledRetry != "handled-by-another-writer" {
		t.Errorf("status revision %d, release %q, lastHandledRetry %q; want revision 1 of mysql-1 and the other writer's field kept",
			got.Status.Revision, got.Status.CurrentRelease, got.Status.LastHandledRetry)
	}
	if n := early + countEvents(recorder, "RevisionStarted"); n != 1 {
		t.Errorf("%d RevisionStarted Events in all once the revision is on record; want 1", n)
	}
	if d := testutil.ToFloat64(started) - before; d != 1 {
		t.Errorf("the RevisionStarted metric grew by %v; want 1", d)
	}
}

// countEvents drains the Events recorded so far and counts those of reason.
func countEvents(r *events.FakeRecorder, reason string) int {
	n := 0
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, " "+reason+" ") {
				n++
			}
		default:
			return n
		}
	}
}
