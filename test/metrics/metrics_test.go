//go:build !unit

// Package metrics tests the health gates' metric analyses end to end: a real Prometheus
// (Debian's binary from the cache) scraping a target whose error ratio per cluster the test
// sets, a hub and two members, and rewind's controller.
package metrics

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/promtest"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

var suite fleet.Suite

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 2, Workloads: true}, &suite.Env)
}

func waves() []v1alpha1.Wave {
	return []v1alpha1.Wave{
		{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1},
		{Name: "rest", Clusters: []string{"member2"}, MaxConcurrency: 1},
	}
}

func ptr[T any](v T) *T { return &v }

// errorRatio is the metric of the README's "Metric gates" example: the error ratio of the
// cluster the gate runs on, from one Prometheus serving the fleet.
func errorRatio(address string) v1alpha1.Metric {
	return v1alpha1.Metric{
		Name:             "error-ratio",
		SuccessCondition: "size(result) == 1 && result[0] < 0.05",
		FailureCondition: "size(result) == 1 && result[0] >= 0.05",
		Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{
			Address: address,
			Query:   `max(app_error_ratio{cluster="{{.Cluster.Name}}"})`,
			Timeout: ptr[int64](5),
		}},
	}
}

func series(cluster string) string { return `app_error_ratio{cluster="` + cluster + `"}` }

// waitTarget waits until a cluster's target of a revision satisfies ok.
func waitTarget(t *testing.T, f *fleet.Fleet, cluster string, timeout time.Duration, ok func(*v1alpha1.RolloutTarget) bool) *v1alpha1.RolloutTarget {
	t.Helper()
	var tg *v1alpha1.RolloutTarget
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		tg = &v1alpha1.RolloutTarget{}
		if err := f.Hub().Get(ctx, client.ObjectKey{Namespace: f.NS, Name: f.Name + "-" + cluster}, tg); err != nil {
			return false, nil
		}
		return ok(tg), nil
	})
	if err != nil {
		t.Fatalf("target of %s: %+v", cluster, tg.Status)
	}
	return tg
}

func metricOf(tg *v1alpha1.RolloutTarget, name string) *v1alpha1.MetricResult {
	for i := range tg.Status.Metrics {
		if tg.Status.Metrics[i].Name == name {
			return &tg.Status.Metrics[i]
		}
	}
	return nil
}

// A release passes its metric gate while the error ratio is low; the next one fails it when
// the test raises the ratio after the change, the failure policy rolls the canary back and
// the second wave never starts; the failed measurement stays on the target and is shown by
// rewind rollout status.
func TestMetricGatePassesThenFailsAndRollsBack(t *testing.T) {
	prom := promtest.Start(t)
	for _, m := range []string{"member1", "member2"} {
		prom.Set(series(m), 0.01)
	}
	prom.WaitValue(series("member2"), 0.01)
	f := suite.New(t, waves())
	metric := errorRatio(prom.URL)
	metric.InitialDelay = &metav1.Duration{Duration: 8 * time.Second}
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Metrics = []v1alpha1.Metric{metric}
	})
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	for _, m := range []string{"member1", "member2"} {
		tg := f.Target(m)
		if r := metricOf(tg, "error-ratio"); r == nil || r.Phase != v1alpha1.MetricSuccessful || r.Revision != tg.Spec.Revision || r.Measurements[0].Value != "[0.01]" {
			t.Errorf("%s: metric %+v, want Successful with [0.01] for revision %d", m, r, tg.Spec.Revision)
		}
	}

	f.SetRelease("mysql-b", nil)
	// The change reaches member1's health gate, then its error ratio rises.
	waitTarget(t, f, "member1", 2*time.Minute, func(tg *v1alpha1.RolloutTarget) bool {
		return tg.Spec.ToRelease == "mysql-b" && tg.Status.Revision == tg.Spec.Revision && tg.Status.Step == target.StepHealthGate
	})
	prom.Set(series("member1"), 0.3)
	prom.WaitValue(`max(`+series("member1")+`)`, 0.3)
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if ro.Status.FailedRelease != "mysql-b" || !strings.Contains(ro.Status.FailureReason, "metric error-ratio is Failed") {
		t.Errorf("failed release %q, reason %q: want mysql-b failed by its metric", ro.Status.FailedRelease, ro.Status.FailureReason)
	}
	if rec := f.Record(suite.Env.Members[0]); rec == nil || rec.Release != "mysql-a" {
		t.Errorf("member1 record %+v, want mysql-a", rec)
	}
	if snaps := f.SnapshotsOf(ro.Status.History[len(ro.Status.History)-2].Revision); snaps["member2"] != "" {
		t.Errorf("the second wave must never start: member2 has snapshot %s", snaps["member2"])
	}
	tg := f.Target("member1")
	r := metricOf(tg, "error-ratio")
	if r == nil || r.Phase != v1alpha1.MetricFailed || r.Revision != tg.Spec.Revision-1 || r.Measurements[len(r.Measurements)-1].Value != "[0.3]" {
		t.Fatalf("member1 metric after the rollback (revision %d): %+v, want revision %d's Failed measurement [0.3]", tg.Spec.Revision, r, tg.Spec.Revision-1)
	}
	out := suite.Rewind(t, f.NS, "rollout", "status", f.Name)
	if !strings.Contains(out, fmt.Sprintf("member1 error-ratio (revision %d): Failed", r.Revision)) || !strings.Contains(out, "Failed [0.3]") {
		t.Errorf("rewind rollout status must show the failed measurement:\n%s", out)
	}
}

// An unreachable Prometheus is an error measurement, retried up to consecutiveErrorLimit,
// then the gate fails and the fleet is rolled back.
func TestUnreachablePrometheusIsRetriedThenFails(t *testing.T) {
	f := suite.New(t, waves())
	suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	metric := errorRatio("http://127.0.0.1:" + strconv.Itoa(promtest.FreePort(t)))
	metric.Interval = &metav1.Duration{Duration: time.Second}
	metric.ConsecutiveErrorLimit = ptr[int32](2)
	f.SetRelease("mysql-b", func(s *v1alpha1.RolloutSpec) { s.HealthGates.Metrics = []v1alpha1.Metric{metric} })
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutRolledBack, 3*time.Minute)
	if !strings.Contains(ro.Status.FailureReason, "3 errors in a row, more than consecutiveErrorLimit 2") {
		t.Errorf("failure reason %q", ro.Status.FailureReason)
	}
	r := metricOf(f.Target("member1"), "error-ratio")
	if r == nil || r.Phase != v1alpha1.MetricError || r.Error != 3 || r.Count != 0 || len(r.Measurements) != 3 {
		t.Fatalf("member1 metric %+v: want 3 error measurements", r)
	}
	for _, m := range r.Measurements {
		if m.Phase != v1alpha1.MetricError || !strings.Contains(m.Message, "connection refused") {
			t.Errorf("measurement %+v: want an error naming the refused connection", m)
		}
	}
}

// An empty result holds the wave for a person: the Rollout says it waits for approval, and
// rewind rollout approve lets it go on. A query that cannot be parsed is refused before any
// cluster changes, naming the field.
func TestEmptyResultHoldsForApprovalAndBadQueryIsRefused(t *testing.T) {
	prom := promtest.Start(t)
	f := suite.New(t, waves())
	bad := errorRatio(prom.URL)
	bad.Provider.Prometheus.Query = `max(app_error_ratio{cluster="{{.Cluster.Name"})`
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) { s.HealthGates.Metrics = []v1alpha1.Metric{bad} })
	suite.StartManager(t, f.NS, controller.Options{})
	c := f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonInvalidSpec, time.Minute)
	if !strings.Contains(c.Message, "spec.healthGates.metrics[0].provider.prometheus.query") {
		t.Errorf("Stalled must name the field: %s", c.Message)
	}
	var targets v1alpha1.RolloutTargetList
	if err := f.Hub().List(t.Context(), &targets, client.InNamespace(f.NS)); err != nil || len(targets.Items) != 0 {
		t.Fatalf("no cluster may be planned: %d targets (%v)", len(targets.Items), err)
	}

	// No sample for this cluster: inconclusive.
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) { s.HealthGates.Metrics = []v1alpha1.Metric{errorRatio(prom.URL)} })
	c = f.WaitCondition(v1alpha1.ConditionWaiting, metav1.ConditionTrue, v1alpha1.ReasonAwaitingApproval, 3*time.Minute)
	if !strings.Contains(c.Message, "member1") {
		t.Errorf("Waiting must name the held cluster: %s", c.Message)
	}
	tg := f.Target("member1")
	if r := metricOf(tg, "error-ratio"); r == nil || r.Phase != v1alpha1.MetricInconclusive || !strings.Contains(r.Measurements[0].Message, "no sample") {
		t.Errorf("member1 metric %+v: want Inconclusive for no sample", r)
	}
	if ph := f.Target("member2").Status.Phase; ph != "" && ph != v1alpha1.ClusterPending {
		t.Errorf("the wave must hold: member2 is %s", ph)
	}
	out := suite.Rewind(t, f.NS, "rollout", "approve", f.Name)
	if !strings.Contains(out, "inconclusive metrics of cluster member1 approved") {
		t.Errorf("rewind rollout approve:\n%s", out)
	}
	// member2 has a sample from now on: its gate passes by itself.
	prom.Set(series("member2"), 0.01)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 3*time.Minute)
	if r := metricOf(f.Target("member2"), "error-ratio"); r == nil || r.Phase != v1alpha1.MetricSuccessful {
		t.Errorf("member2 metric %+v", r)
	}
}
