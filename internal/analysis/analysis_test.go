package analysis

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func prom(q string) v1alpha1.MetricProvider {
	return v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: "http://prometheus:9090", Query: q}}
}

func ptr[T any](v T) *T { return &v }

// A query or a condition that cannot be used is refused, naming the field.
func TestCompileRefusesNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		// name says what is wrong.
		name string
		// metric is the spec.
		metric v1alpha1.Metric
		// want is in the error.
		want string
	}{
		{"template does not parse", v1alpha1.Metric{Name: "a", Provider: prom(`rate(x{cluster="{{.Cluster.Name"}[5m])`)}, "spec.healthGates.metrics[0].provider.prometheus.query"},
		{"template names a missing field", v1alpha1.Metric{Name: "a", Provider: prom(`x{cluster="{{.Cluster.Nmae}}"}`)}, "spec.healthGates.metrics[0].provider.prometheus.query"},
		{"success condition does not compile", v1alpha1.Metric{Name: "a", SuccessCondition: "result[0] <", Provider: prom("x")}, "spec.healthGates.metrics[0].successCondition"},
		{"failure condition does not compile", v1alpha1.Metric{Name: "a", FailureCondition: "len(result) > 0", Provider: prom("x")}, "spec.healthGates.metrics[0].failureCondition"},
		{"condition is not a bool", v1alpha1.Metric{Name: "a", SuccessCondition: "1 + 2", Provider: prom("x")}, "not a bool"},
		{"no provider", v1alpha1.Metric{Name: "a"}, "spec.healthGates.metrics[0].provider"},
		{"bad jsonPath", v1alpha1.Metric{Name: "a", Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{URL: "http://x", JSONPath: "{.a["}}}, "provider.web.jsonPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile([]v1alpha1.Metric{tc.metric})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if _, err := Compile([]v1alpha1.Metric{{Name: "a", SuccessCondition: "size(result) == 1 && result[0] < 0.05",
		Provider: prom(`sum(rate(errors{cluster="{{.Cluster.Name}}",region="{{index .Cluster.Labels "region"}}",ns="{{.Namespace}}",rev="{{.Revision}}"}[1m]))`)}}); err != nil {
		t.Fatalf("a valid metric is refused: %v", err)
	}
}

// The query template sees the cluster, its labels, the namespace and the revision.
func TestRender(t *testing.T) {
	ms, err := Compile([]v1alpha1.Metric{{Name: "a", Provider: prom(`e{cluster="{{.Cluster.Name}}",region="{{index .Cluster.Labels "region"}}",ns="{{.Namespace}}",rel="{{.Release}}",rev="{{.Revision}}"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ms[0].Render(Data{Cluster: Cluster{Name: "m1", Labels: map[string]string{"region": "eu"}}, Namespace: "ops", Release: "r2", Revision: 3})
	if want := `e{cluster="m1",region="eu",ns="ops",rel="r2",rev="3"}`; err != nil || got != want {
		t.Fatalf("Render = %q, %v; want %q", got, err, want)
	}
}

// Evaluate follows Argo Rollouts' rules for one, the other or both conditions.
func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		// success and failure are the conditions.
		success, failure string
		// result is the measured value.
		result any
		// want is the phase.
		want string
	}{
		{"", "", []float64{1}, v1alpha1.MetricSuccessful},
		{"result[0] < 0.05", "", []float64{0.01}, v1alpha1.MetricSuccessful},
		{"result[0] < 0.05", "", []float64{0.5}, v1alpha1.MetricFailed},
		{"", "result[0] >= 0.05", []float64{0.01}, v1alpha1.MetricSuccessful},
		{"", "result[0] >= 0.05", []float64{0.5}, v1alpha1.MetricFailed},
		{"result[0] < 0.05", "result[0] > 0.2", []float64{0.1}, v1alpha1.MetricInconclusive},
		{"result[0] < 0.05", "result[0] > 0.2", []float64{0.3}, v1alpha1.MetricFailed},
		{"result < 0.05", "", 0.01, v1alpha1.MetricSuccessful},
		{"result[0] < 0.05", "", []float64{}, v1alpha1.MetricError},
		{"result.ok == true", "", map[string]any{"ok": true}, v1alpha1.MetricSuccessful},
		{"size(result) == 2", "", []float64{1, 2}, v1alpha1.MetricSuccessful},
	} {
		ms, err := Compile([]v1alpha1.Metric{{Name: "a", SuccessCondition: tc.success, FailureCondition: tc.failure, Provider: prom("x")}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := ms[0].Evaluate(tc.result); got != tc.want {
			t.Errorf("success %q failure %q on %v: %s, want %s", tc.success, tc.failure, tc.result, got, tc.want)
		}
	}
}

// Record and Assess: the limits of Argo Rollouts, errors retried up to consecutiveErrorLimit,
// a permanent error at once, bounded measurements.
func TestRecordAndAssess(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	meas := func(phase string) v1alpha1.Measurement {
		return v1alpha1.Measurement{Phase: phase, FinishedAt: metav1.NewTime(now)}
	}
	for _, tc := range []struct {
		// name says what happens.
		name string
		// spec is the metric.
		spec v1alpha1.Metric
		// phases are the measurements, in order; permanent marks the last one permanent.
		phases    []string
		permanent bool
		// want is the phase after them.
		want string
	}{
		{"one success passes (count 1)", v1alpha1.Metric{}, []string{"Successful"}, false, "Successful"},
		{"count 3 runs until three", v1alpha1.Metric{Count: ptr[int32](3)}, []string{"Successful", "Successful"}, false, "Running"},
		{"errors are not counted", v1alpha1.Metric{Count: ptr[int32](2)}, []string{"Successful", "Error", "Successful"}, false, "Successful"},
		{"one failure fails (failureLimit 0)", v1alpha1.Metric{Count: ptr[int32](3)}, []string{"Successful", "Failed"}, false, "Failed"},
		{"failureLimit 1 tolerates one", v1alpha1.Metric{Count: ptr[int32](3), FailureLimit: ptr[int32](1)}, []string{"Failed", "Successful"}, false, "Running"},
		{"inconclusive past the limit", v1alpha1.Metric{Count: ptr[int32](3)}, []string{"Inconclusive"}, false, "Inconclusive"},
		{"four errors in a row are retried", v1alpha1.Metric{}, []string{"Error", "Error", "Error", "Error"}, false, "Running"},
		{"the fifth error fails", v1alpha1.Metric{}, []string{"Error", "Error", "Error", "Error", "Error"}, false, "Error"},
		{"a success resets the errors in a row", v1alpha1.Metric{Count: ptr[int32](2), ConsecutiveErrorLimit: ptr[int32](1)}, []string{"Error", "Successful", "Error"}, false, "Running"},
		{"consecutiveErrorLimit 0: the first error fails", v1alpha1.Metric{ConsecutiveErrorLimit: ptr[int32](0)}, []string{"Error"}, false, "Error"},
		{"a permanent error fails at once", v1alpha1.Metric{}, []string{"Error"}, true, "Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Start("a", 2, 1, now)
			for i, p := range tc.phases {
				Record(tc.spec, &r, meas(p), tc.permanent && i == len(tc.phases)-1)
			}
			if r.Phase != tc.want {
				t.Errorf("phase %s (%s), want %s", r.Phase, r.Message, tc.want)
			}
		})
	}
	r := Start("a", 2, 1, now)
	for range 30 {
		Record(v1alpha1.Metric{ConsecutiveErrorLimit: ptr[int32](100)}, &r, meas("Error"), false)
	}
	if len(r.Measurements) != v1alpha1.MaxMeasurements || r.Error != 30 {
		t.Errorf("%d measurements kept, %d errors counted: want %d kept, 30 counted", len(r.Measurements), r.Error, v1alpha1.MaxMeasurements)
	}
}

// Due: initialDelay from the start, interval between measurements, an error retried after
// the error retry when there is no interval.
func TestDue(t *testing.T) {
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := Start("a", 1, 1, start)
	spec := v1alpha1.Metric{InitialDelay: &metav1.Duration{Duration: time.Minute}}
	if got := Due(spec, r, 10*time.Second); !got.Equal(start.Add(time.Minute)) {
		t.Errorf("first measurement due %s, want after the initial delay", got)
	}
	r.Measurements = []v1alpha1.Measurement{{Phase: "Error", FinishedAt: metav1.NewTime(start.Add(2 * time.Minute))}}
	if got := Due(spec, r, 10*time.Second); !got.Equal(start.Add(2*time.Minute + 10*time.Second)) {
		t.Errorf("error retried at %s, want 10s after it", got)
	}
	spec.Interval = &metav1.Duration{Duration: 30 * time.Second}
	if got := Due(spec, r, 10*time.Second); !got.Equal(start.Add(2*time.Minute + 30*time.Second)) {
		t.Errorf("next measurement due %s, want an interval after the last", got)
	}
}

// A result of another revision is never counted: the gate of revision 2 does not pass on a
// success of revision 1 (argo-cd#29410 is that bug).
func TestStaleResultsNeverPass(t *testing.T) {
	metrics := []v1alpha1.Metric{{Name: "errors", Provider: prom("x")}}
	old := []v1alpha1.MetricResult{{Name: "errors", Revision: 1, Generation: 1, Phase: v1alpha1.MetricSuccessful}}
	if got := Current(old, metrics, 2, 3); len(got) != 0 {
		t.Errorf("Current kept a result of revision 1 for revision 2: %+v", got)
	}
	if phase, _ := Verdict(old, metrics, 2); phase != v1alpha1.MetricRunning {
		t.Errorf("Verdict of revision 2 on a success of revision 1: %s, want Running", phase)
	}
	if phase, _ := Verdict(old, metrics, 1); phase != v1alpha1.MetricSuccessful {
		t.Errorf("Verdict of revision 1: %s, want Successful", phase)
	}
	future := []v1alpha1.MetricResult{{Name: "errors", Revision: 2, Generation: 9, Phase: v1alpha1.MetricSuccessful}}
	if got := Current(future, metrics, 2, 3); len(got) != 0 {
		t.Errorf("Current kept a result of a later generation: %+v", got)
	}
}

// Verdict: a failure wins over an inconclusive one, which wins over running ones.
func TestVerdict(t *testing.T) {
	metrics := []v1alpha1.Metric{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	res := func(phases ...string) []v1alpha1.MetricResult {
		var out []v1alpha1.MetricResult
		for i, p := range phases {
			out = append(out, v1alpha1.MetricResult{Name: metrics[i].Name, Revision: 1, Phase: p})
		}
		return out
	}
	for _, tc := range []struct {
		results []v1alpha1.MetricResult
		want    string
	}{
		{res("Successful", "Successful", "Successful"), "Successful"},
		{res("Successful", "Running", "Successful"), "Running"},
		{res("Successful", "Successful"), "Running"},
		{res("Inconclusive", "Running", "Successful"), "Inconclusive"},
		{res("Inconclusive", "Error", "Successful"), "Failed"},
		{res("Successful", "Successful", "Failed"), "Failed"},
	} {
		if got, msg := Verdict(tc.results, metrics, 1); got != tc.want {
			t.Errorf("Verdict(%+v) = %s (%s), want %s", tc.results, got, msg, tc.want)
		}
	}
}
