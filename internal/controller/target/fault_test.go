package target

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/metrics"
)

// A fault is retried with backoff and never counted as an attempt; only a member the probe
// has found unreachable for longer than its unreachableTimeout makes the target wait (policy
// Hold) or fail (policy Fail); a step that runs again ends the wait.
func TestFaultsAreRetriedUntilTheProbeSaysUnreachable(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member1"},
		Spec: v1alpha1.MemberClusterSpec{UnreachableTimeout: &metav1.Duration{Duration: time.Minute}}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc).WithStatusSubresource(&v1alpha1.RolloutTarget{}).Build()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	reset := errors.New("read: connection reset by peer") // untyped: a failed attempt
	typedReset := apierrors.NewServiceUnavailable("the API server is shutting down")

	i := 0
	for _, tc := range []struct {
		// name says what happens.
		name string
		// policy is the target's spec.unreachablePolicy.
		policy string
		// probeFailsFor is how long the member's probe has failed (0: it answers).
		probeFailsFor time.Duration
		// wantPhase, wantWaiting are the target's phase and waitingFor after the fault.
		wantPhase, wantWaiting string
	}{
		{"a fault on a member that answers its probe is retried", v1alpha1.UnreachablePolicyFail, 0, v1alpha1.ClusterUpgrading, ""},
		{"unreachable for less than the timeout: retried", v1alpha1.UnreachablePolicyFail, 30 * time.Second, v1alpha1.ClusterUpgrading, ""},
		{"unreachable past the timeout, policy Hold: waits", v1alpha1.UnreachablePolicyHold, 2 * time.Minute, v1alpha1.ClusterUpgrading, v1alpha1.ReasonMemberUnreachable},
		{"unreachable past the timeout, no policy (Hold): waits", "", 2 * time.Minute, v1alpha1.ClusterUpgrading, v1alpha1.ReasonMemberUnreachable},
		{"unreachable past the timeout, policy Fail: fails", v1alpha1.UnreachablePolicyFail, 2 * time.Minute, v1alpha1.ClusterFailed, ""},
	} {
		i++
		t.Run(tc.name, func(t *testing.T) {
			probes := &member.Prober{Now: func() time.Time { return now.Add(-tc.probeFailsFor) }, FailureThreshold: 3}
			if tc.probeFailsFor > 0 {
				for range 3 {
					probes.Record("member1", typedReset)
				}
			} else {
				probes.Record("member1", nil)
			}
			r := &Reconciler{Client: hub, Probes: probes, Now: clock}
			rt := &v1alpha1.RolloutTarget{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d", i), Namespace: "ns"},
				Spec:       v1alpha1.RolloutTargetSpec{Cluster: "member1", Rollout: "ro", UnreachablePolicy: tc.policy},
			}
			if err := hub.Create(t.Context(), rt); err != nil {
				t.Fatal(err)
			}
			rt.Status = v1alpha1.RolloutTargetStatus{Phase: v1alpha1.ClusterUpgrading, Step: StepApplyWorkloads}
			if err := hub.Status().Update(t.Context(), rt); err != nil {
				t.Fatal(err)
			}
			x := r.newExecution(rt)
			retries := metrics.FaultRetries.WithLabelValues("ns", "ro", "member1", StepApplyWorkloads)
			before := testutil.ToFloat64(retries)
			res := r.fault(t.Context(), x, typedReset)
			if err := x.patch(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(retries) - before; got != 1 {
				t.Errorf("the fault is counted in rewind_fault_retries_total once its status is written: %v", got)
			}
			st := x.t.Status
			if st.Phase != tc.wantPhase || st.WaitingFor != tc.wantWaiting {
				t.Fatalf("phase %s, waiting for %q (%s); want %s, %q", st.Phase, st.WaitingFor, st.Message, tc.wantPhase, tc.wantWaiting)
			}
			if st.Attempt != 0 || st.Faults != 1 {
				t.Errorf("a fault counts as a fault (%d), never as an attempt (%d)", st.Faults, st.Attempt)
			}
			if st.Phase == v1alpha1.ClusterFailed {
				if !strings.Contains(st.Message, "unreachable") || !strings.Contains(st.Message, "unreachablePolicy Fail") {
					t.Errorf("the failure must say the member is unreachable and which policy failed it: %s", st.Message)
				}
				return
			}
			if st.NextAttemptAt == nil || res.RequeueAfter <= 0 || !st.NextAttemptAt.After(now) {
				t.Errorf("the step must be tried again later: next %v, requeue %v", st.NextAttemptAt, res.RequeueAfter)
			}
			if tc.wantWaiting == "" {
				return
			}
			if st.WaitingSince == nil || !st.WaitingSince.Time.Equal(now) {
				t.Errorf("waitingSince %v, want %v", st.WaitingSince, now)
			}
			// The member answers again: the step ran without a fault, the wait ends.
			x.t.Status.Step = StepHealthGate
			r.resumed(x)
			if st := x.t.Status; st.WaitingFor != "" || st.WaitingSince != nil || st.StepStartedAt == nil || !st.StepStartedAt.Time.Equal(now) {
				t.Errorf("after the member is back: waiting for %q since %v, gate started %v; want no wait and the gate's time counted from now",
					st.WaitingFor, st.WaitingSince, st.StepStartedAt)
			}
		})
	}

	// Faults in a row back off, with jitter, up to the cap; a plain error is not a fault.
	r := &Reconciler{Client: hub, Now: clock}
	x := r.newExecution(&v1alpha1.RolloutTarget{Spec: v1alpha1.RolloutTargetSpec{Cluster: "member1"},
		Status: v1alpha1.RolloutTargetStatus{Phase: v1alpha1.ClusterRollingBack, Step: StepRestore}})
	var last time.Duration
	for i := 1; i <= faultsBeforeWaiting+2; i++ {
		res := r.fault(t.Context(), x, typedReset)
		if res.RequeueAfter > faultBackoffMax*5/4+time.Second {
			t.Fatalf("fault %d waits %v, more than the cap %v", i, res.RequeueAfter, faultBackoffMax)
		}
		last = res.RequeueAfter
	}
	if last < faultBackoffMax*3/4 {
		t.Errorf("after %d faults the backoff is %v, want about %v", x.t.Status.Faults, last, faultBackoffMax)
	}
	if x.t.Status.WaitingFor != v1alpha1.ReasonRepeatedFaults || x.t.Status.Phase != v1alpha1.ClusterRollingBack {
		t.Errorf("a step that keeps meeting faults waits (never fails): %+v", x.t.Status)
	}
	if !apierrors.IsServiceUnavailable(typedReset) || errors.Is(reset, typedReset) {
		t.Fatal("test errors are not what they seem")
	}
}
