package member

import (
	"errors"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One failed probe never makes a member unreachable: the threshold of failures in a row does,
// and a single success resets it. The verdict's changes are reported once each.
func TestProber(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := &Prober{FailureThreshold: 3, Now: func() time.Time { return now }}
	down := errors.New("probing: connection refused")
	step := func(err error) bool {
		now = now.Add(5 * time.Second)
		return p.Record("m", err)
	}
	if _, _, ok := p.Unreachable("m"); ok {
		t.Fatal("a member never probed is not unreachable")
	}
	if !step(nil) {
		t.Error("the first verdict is a change")
	}
	answered := now
	if step(down) || step(down) {
		t.Error("fewer failures than the threshold change nothing")
	}
	if _, _, ok := p.Unreachable("m"); ok {
		t.Fatal("two failures in a row are below the threshold of 3")
	}
	firstFailure := answered.Add(5 * time.Second)
	if !step(down) {
		t.Error("the third failure in a row makes the member unreachable: a change")
	}
	since, msg, ok := p.Unreachable("m")
	if !ok || !since.Equal(firstFailure) || msg != down.Error() {
		t.Fatalf("Unreachable = %v, %q, %v; want since the first failure %v with its message", since, msg, ok, firstFailure)
	}
	if step(down) {
		t.Error("a fourth failure changes nothing")
	}
	if pr, _ := p.Get("m"); pr.ConsecutiveFailures != 4 || !pr.LastSuccess.Equal(answered) {
		t.Errorf("probe state %+v", pr)
	}
	if !step(nil) {
		t.Error("an answer makes the member reachable again: a change")
	}
	if pr, _ := p.Get("m"); pr.ConsecutiveFailures != 0 || !pr.LastSuccess.Equal(now) || !pr.FailingSince.IsZero() {
		t.Errorf("after an answer: %+v", pr)
	}
	if _, _, ok := p.Unreachable("m"); ok {
		t.Error("a member that answered is reachable")
	}

	if d := UnreachableTimeout(&v1alpha1.MemberCluster{}); d != DefaultUnreachableTimeout {
		t.Errorf("default unreachable timeout %v", d)
	}
	mc := &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{UnreachableTimeout: &metav1.Duration{Duration: 20 * time.Second}}}
	if d := UnreachableTimeout(mc); d != 20*time.Second {
		t.Errorf("unreachable timeout %v, want the spec's 20s", d)
	}
}
