//go:build !unit

package target

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/analysis"
	"github.com/rewind-dev/rewind/internal/testbed/promtest"
)

// The metric gate of one target against a real Prometheus: a low error ratio passes, a high
// one fails the gate (a terminal failure: the failure policy acts), a success recorded for
// the revision before never passes this one, an unreachable Prometheus is an error retried up
// to consecutiveErrorLimit and then fails the gate, an empty result holds the cluster until
// the target is approved for its revision, and a missing credentials Secret names its field.
func TestMetricGateAgainstRealPrometheus(t *testing.T) {
	prom := promtest.Start(t)
	series := `app_error_ratio{cluster="member1",region="eu"}`
	prom.Set(series, 0.01)
	prom.WaitValue(series, 0.01)

	scheme := testHubScheme()
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "member1", Labels: map[string]string{"region": "eu"}}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mc).Build()
	now := time.Now()
	r := &Reconciler{Client: hub, Hub: hub, Now: func() time.Time { return now }, MetricErrorRetry: 5 * time.Second}

	metric := func(address string) v1alpha1.Metric {
		return v1alpha1.Metric{Name: "errors", SuccessCondition: "result[0] < 0.05", FailureCondition: "result[0] >= 0.05",
			ConsecutiveErrorLimit: ptr.To[int32](2),
			Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: address, Timeout: ptr.To[int64](5),
				Query: `app_error_ratio{cluster="{{.Cluster.Name}}",region="{{index .Cluster.Labels "region"}}"}`}}}
	}
	newTarget := func(revision int32, m v1alpha1.Metric) *execution {
		tg := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "mysql-member1", Generation: 3},
			Spec: v1alpha1.RolloutTargetSpec{Rollout: "mysql", Cluster: "member1", Revision: revision, Path: v1alpha1.PathUpgrade,
				ToRelease: "mysql-b", InstallNamespace: "ops", HealthGates: v1alpha1.HealthGates{Metrics: []v1alpha1.Metric{m}}},
			Status: v1alpha1.RolloutTargetStatus{Revision: revision, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterUpgrading, Step: StepHealthGate}}
		return r.newExecution(tg)
	}

	t.Run("a low error ratio passes", func(t *testing.T) {
		x := newTarget(2, metric(prom.URL))
		if wait, err := x.analyze(t.Context()); err != nil || wait != 0 {
			t.Fatalf("analyze: wait %s, %v; want a pass", wait, err)
		}
		if m := x.t.Status.Metrics; len(m) != 1 || m[0].Phase != v1alpha1.MetricSuccessful || m[0].Revision != 2 || m[0].Generation != 3 || m[0].Measurements[0].Value != "[0.01]" {
			t.Errorf("status.metrics %+v", m)
		}
	})

	prom.Set(series, 0.4)
	prom.WaitValue(series, 0.4)
	t.Run("a success of the revision before never passes this one", func(t *testing.T) {
		x := newTarget(3, metric(prom.URL))
		x.t.Status.Metrics = []v1alpha1.MetricResult{{Name: "errors", Revision: 2, Generation: 3, Phase: v1alpha1.MetricSuccessful, Count: 1, Successful: 1}}
		_, err := x.analyze(t.Context())
		if !isTerminal(err) || !strings.Contains(err.Error(), "metric errors is Failed") || !strings.Contains(err.Error(), "[0.4]") {
			t.Fatalf("analyze: %v; want the gate failed on the new measurement", err)
		}
		if m := x.t.Status.Metrics; len(m) != 1 || m[0].Revision != 3 || m[0].Phase != v1alpha1.MetricFailed || m[0].Failed != 1 {
			t.Errorf("status.metrics %+v: want only revision 3's failed result", m)
		}
	})

	t.Run("an unreachable Prometheus is an error retried up to consecutiveErrorLimit", func(t *testing.T) {
		x := newTarget(4, metric("http://127.0.0.1:"+strconv.Itoa(promtest.FreePort(t))))
		for i := 1; i <= 2; i++ {
			wait, err := x.analyze(t.Context())
			if err != nil || wait != 5*time.Second {
				t.Fatalf("error %d: wait %s, %v; want a retry after 5s", i, wait, err)
			}
			if wait, err := x.analyze(t.Context()); err != nil || wait != 5*time.Second || x.t.Status.Metrics[0].Error != int32(i) {
				t.Fatalf("before the retry is due nothing is measured: wait %s, %v, %+v", wait, err, x.t.Status.Metrics[0])
			}
			now = now.Add(5 * time.Second)
		}
		_, err := x.analyze(t.Context())
		if !isTerminal(err) || !strings.Contains(err.Error(), "3 errors in a row, more than consecutiveErrorLimit 2") {
			t.Fatalf("third error: %v; want the gate failed", err)
		}
		if m := x.t.Status.Metrics[0]; m.Error != 3 || len(m.Measurements) != 3 || m.Measurements[2].Phase != v1alpha1.MetricError {
			t.Errorf("status.metrics %+v", m)
		}
	})

	t.Run("an empty result holds until approved for the revision", func(t *testing.T) {
		m := metric(prom.URL)
		m.Provider.Prometheus.Query = `app_error_ratio{cluster="nowhere"}`
		x := newTarget(5, m)
		_, err := x.analyze(t.Context())
		var we *waitError
		if !errors.As(err, &we) || we.reason != v1alpha1.ReasonAwaitingApproval || !strings.Contains(err.Error(), "rewind rollout approve mysql") {
			t.Fatalf("analyze: %v; want a wait for approval", err)
		}
		x.t.Annotations = map[string]string{v1alpha1.AnnotationApprovedMetrics: "4"}
		if _, err := x.analyze(t.Context()); !errors.As(err, &we) {
			t.Fatalf("an approval of revision 4 passed revision 5: %v", err)
		}
		x.t.Annotations[v1alpha1.AnnotationApprovedMetrics] = "5"
		if wait, err := x.analyze(t.Context()); err != nil || wait != 0 {
			t.Fatalf("approved: wait %s, %v; want a pass", wait, err)
		}
		if x.t.Status.Metrics[0].Inconclusive != 1 {
			t.Errorf("the approval must not measure again: %+v", x.t.Status.Metrics[0])
		}
	})

	t.Run("a missing credentials Secret fails naming the field", func(t *testing.T) {
		m := metric(prom.URL)
		m.Provider.Prometheus.SecretRef = &v1alpha1.LocalSecretReference{Name: "prom-creds"}
		_, err := newTarget(6, m).analyze(t.Context())
		if !isTerminal(err) || !strings.Contains(err.Error(), "spec.healthGates.metrics[0].provider.prometheus.secretRef: Secret team-a/prom-creds") {
			t.Fatalf("analyze: %v", err)
		}
		if err := hub.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prom-creds"}, Data: map[string][]byte{"token": []byte("t0ken")}}); err != nil {
			t.Fatal(err)
		}
		x := newTarget(6, m)
		if _, err := x.analyze(t.Context()); !isTerminal(err) || strings.Contains(err.Error(), "t0ken") {
			t.Fatalf("analyze with credentials (error ratio 0.4): %v", err)
		}
	})

	t.Run("a rollback does not analyse", func(t *testing.T) {
		x := newTarget(7, metric("http://127.0.0.1:1"))
		x.t.Spec.Path = v1alpha1.PathRestore
		if wait, err := x.analyze(t.Context()); err != nil || wait != 0 || len(x.t.Status.Metrics) != 0 {
			t.Fatalf("restore path: wait %s, %v, %+v", wait, err, x.t.Status.Metrics)
		}
	})
	_ = analysis.DefaultErrorRetry
}
