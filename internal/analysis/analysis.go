// Package analysis runs the metric analyses of a health gate: Argo Rollouts' metric model
// (count, interval, initialDelay, failureLimit, inconclusiveLimit, consecutiveErrorLimit)
// with CEL conditions over `result`, and measurements from Prometheus or a JSON endpoint.
//
// The evaluation (Compile, Evaluate, Record, Assess, Verdict, Current) is pure and does no
// I/O; Measure is the one call that queries a provider. Results are kept per revision: a
// result of another revision is never counted (Current drops it), so a measurement taken for
// the release before never passes the gate of the next one.
package analysis

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/jsonpath"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Defaults of Argo Rollouts where rewind keeps them (count differs: see v1alpha1.Metric).
const (
	DefaultCount                 = 1
	DefaultConsecutiveErrorLimit = 4
	// DefaultErrorRetry is how long after an error measurement the next one is taken when the
	// metric has no interval (Argo Rollouts' DefaultErrorRetryInterval).
	DefaultErrorRetry = 10 * time.Second
)

// Data is what a query (or a web URL) template sees.
type Data struct {
	// Cluster is the member cluster: its name and labels.
	Cluster Cluster
	// Namespace is the operator's install namespace on the member.
	Namespace string
	// Rollout, Release and Revision say what is being released.
	Rollout  string
	Release  string
	Revision int32
}

// Cluster is the member cluster a query is about.
type Cluster struct {
	Name   string
	Labels map[string]string
}

// Metric is a metric ready to be measured: its query template parsed and its conditions
// compiled.
type Metric struct {
	Spec v1alpha1.Metric
	// Field is the metric's place in the spec, e.g. spec.healthGates.metrics[0].
	Field            string
	query            *template.Template
	success, failure cel.Program
}

// Compile parses every metric's query (or URL) template and compiles its conditions. An error
// names the field and what is wrong; nothing is measured then.
func Compile(metrics []v1alpha1.Metric) ([]*Metric, error) {
	if len(metrics) == 0 {
		return nil, nil
	}
	env, err := cel.NewEnv(cel.Variable("result", cel.DynType))
	if err != nil {
		return nil, err
	}
	var out []*Metric
	var errs []error
	seen := map[string]bool{}
	for i, spec := range metrics {
		m := &Metric{Spec: spec, Field: fmt.Sprintf("spec.healthGates.metrics[%d]", i)}
		if seen[spec.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q is used twice", m.Field, spec.Name))
		}
		seen[spec.Name] = true
		var text, field string
		switch p := spec.Provider; {
		case p.Prometheus != nil && p.Web == nil:
			text, field = p.Prometheus.Query, m.Field+".provider.prometheus.query"
		case p.Web != nil && p.Prometheus == nil:
			text, field = p.Web.URL, m.Field+".provider.web.url"
		default:
			errs = append(errs, fmt.Errorf("%s.provider: set exactly one of prometheus and web", m.Field))
			continue
		}
		if strings.TrimSpace(text) == "" {
			errs = append(errs, fmt.Errorf("%s: must not be empty", field))
		} else if m.query, err = template.New(spec.Name).Option("missingkey=error").Parse(text); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a valid template: %w", field, text, err))
		} else if _, err := m.Render(sampleData); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q cannot be rendered: %w", field, text, err))
		}
		if w := spec.Provider.Web; w != nil && w.JSONPath != "" {
			if err := jsonpath.New(spec.Name).Parse(w.JSONPath); err != nil {
				errs = append(errs, fmt.Errorf("%s.provider.web.jsonPath: %q does not parse: %w", m.Field, w.JSONPath, err))
			}
		}
		if m.success, err = compileCondition(env, spec.SuccessCondition); err != nil {
			errs = append(errs, fmt.Errorf("%s.successCondition: %q does not compile: %w", m.Field, spec.SuccessCondition, err))
		}
		if m.failure, err = compileCondition(env, spec.FailureCondition); err != nil {
			errs = append(errs, fmt.Errorf("%s.failureCondition: %q does not compile: %w", m.Field, spec.FailureCondition, err))
		}
		out = append(out, m)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// sampleData renders templates at compile time: a template that names a field Data lacks
// is refused before any cluster changes. Labels are empty maps, so `index .Cluster.Labels "x"`
// renders (to "") and a missing label is the query's business.
var sampleData = Data{Cluster: Cluster{Name: "cluster", Labels: map[string]string{}}, Namespace: "ns", Rollout: "rollout", Release: "release", Revision: 1}

func compileCondition(env *cel.Env, expr string) (cel.Program, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("it returns %s, not a bool", t)
	}
	return env.Program(ast)
}

// Render fills the metric's query (or URL) template in.
func (m *Metric) Render(d Data) (string, error) {
	var b bytes.Buffer
	if err := m.query.Execute(&b, d); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Evaluate says what a measured result means (Argo Rollouts' EvaluateResult): with no
// condition a measurement succeeds; with only successCondition, false is a failure; with
// only failureCondition, false is a success; with both, neither true is Inconclusive. A
// condition that cannot be evaluated on the result (an index out of range, a result that is
// not a number) is an error.
func (m *Metric) Evaluate(result any) (string, error) {
	success, failure := false, false
	var err error
	if m.success != nil {
		if success, err = eval(m.success, result); err != nil {
			return v1alpha1.MetricError, fmt.Errorf("successCondition: %w", err)
		}
	}
	if m.failure != nil {
		if failure, err = eval(m.failure, result); err != nil {
			return v1alpha1.MetricError, fmt.Errorf("failureCondition: %w", err)
		}
	}
	switch {
	case m.success == nil && m.failure == nil:
		return v1alpha1.MetricSuccessful, nil
	case m.failure == nil:
		failure = !success
	case m.success == nil:
		success = !failure
	}
	switch {
	case failure:
		return v1alpha1.MetricFailed, nil
	case success:
		return v1alpha1.MetricSuccessful, nil
	}
	return v1alpha1.MetricInconclusive, nil
}

func eval(p cel.Program, result any) (bool, error) {
	out, _, err := p.Eval(map[string]any{"result": result})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the expression returns %s, not a bool", out.Type())
	}
	return bool(b), nil
}

// Limits are a metric's limits with Argo Rollouts' defaults filled in (the API server
// defaults them too; a spec built in code may not have them).
func Limits(spec v1alpha1.Metric) (count, failure, inconclusive, consecutiveErrors int32) {
	count, failure, inconclusive, consecutiveErrors = DefaultCount, 0, 0, DefaultConsecutiveErrorLimit
	if spec.Count != nil && *spec.Count > 0 {
		count = *spec.Count
	}
	if spec.FailureLimit != nil {
		failure = *spec.FailureLimit
	}
	if spec.InconclusiveLimit != nil {
		inconclusive = *spec.InconclusiveLimit
	}
	if spec.ConsecutiveErrorLimit != nil {
		consecutiveErrors = *spec.ConsecutiveErrorLimit
	}
	return
}

// Start is a metric's result at the start of its analysis in a revision.
func Start(name string, revision int32, generation int64, now time.Time) v1alpha1.MetricResult {
	at := metav1.NewTime(now)
	return v1alpha1.MetricResult{Name: name, Revision: revision, Generation: generation, Phase: v1alpha1.MetricRunning, StartedAt: &at}
}

// Record adds a measurement to a running result and assesses it again. permanent says the
// measurement's error cannot go away by retrying (a query Prometheus refuses, credentials
// refused): the metric ends as Error at once.
func Record(spec v1alpha1.Metric, r *v1alpha1.MetricResult, m v1alpha1.Measurement, permanent bool) {
	if r.Phase != v1alpha1.MetricRunning && r.Phase != "" {
		return
	}
	switch m.Phase {
	case v1alpha1.MetricSuccessful:
		r.Successful++
		r.Count++
		r.ConsecutiveError = 0
	case v1alpha1.MetricFailed:
		r.Failed++
		r.Count++
		r.ConsecutiveError = 0
	case v1alpha1.MetricInconclusive:
		r.Inconclusive++
		r.Count++
		r.ConsecutiveError = 0
	default:
		m.Phase = v1alpha1.MetricError
		r.Error++
		r.ConsecutiveError++
	}
	r.Measurements = append(r.Measurements, m)
	if n := len(r.Measurements) - v1alpha1.MaxMeasurements; n > 0 {
		r.Measurements = append([]v1alpha1.Measurement(nil), r.Measurements[n:]...)
	}
	r.Phase, r.Message = Assess(spec, *r)
	if permanent && m.Phase == v1alpha1.MetricError {
		r.Phase, r.Message = v1alpha1.MetricError, "a retry cannot fix this error: "+m.Message
	}
	r.Message = truncate(r.Message, 1024)
}

// Assess is a result's phase (Argo Rollouts' assessMetricStatus): Failed past failureLimit,
// Inconclusive past inconclusiveLimit, Error past consecutiveErrorLimit, Successful once count
// measurements were taken, else Running.
func Assess(spec v1alpha1.Metric, r v1alpha1.MetricResult) (phase, message string) {
	count, failureLimit, inconclusiveLimit, errorLimit := Limits(spec)
	last := ""
	if n := len(r.Measurements); n > 0 {
		last = describe(r.Measurements[n-1])
	}
	switch {
	case r.Failed > failureLimit:
		return v1alpha1.MetricFailed, fmt.Sprintf("%d failed measurements, more than failureLimit %d; last %s", r.Failed, failureLimit, last)
	case r.Inconclusive > inconclusiveLimit:
		return v1alpha1.MetricInconclusive, fmt.Sprintf("%d inconclusive measurements, more than inconclusiveLimit %d; last %s", r.Inconclusive, inconclusiveLimit, last)
	case r.ConsecutiveError > errorLimit:
		return v1alpha1.MetricError, fmt.Sprintf("%d errors in a row, more than consecutiveErrorLimit %d; last %s", r.ConsecutiveError, errorLimit, last)
	case r.Count >= count:
		return v1alpha1.MetricSuccessful, fmt.Sprintf("%d of %d measurements taken (%d successful); last %s", r.Count, count, r.Successful, last)
	}
	return v1alpha1.MetricRunning, fmt.Sprintf("%d of %d measurements taken; last %s", r.Count, count, last)
}

func describe(m v1alpha1.Measurement) string {
	s := m.Phase
	if m.Value != "" {
		s += " with result " + m.Value
	}
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}

// Due says when a running result's next measurement is due: initialDelay after the analysis
// started for the first, then interval after the last (an error: interval, or 10s without).
func Due(spec v1alpha1.Metric, r v1alpha1.MetricResult, errorRetry time.Duration) time.Time {
	n := len(r.Measurements)
	if n == 0 {
		var start time.Time
		if r.StartedAt != nil {
			start = r.StartedAt.Time
		}
		if spec.InitialDelay != nil {
			start = start.Add(spec.InitialDelay.Duration)
		}
		return start
	}
	last := r.Measurements[n-1]
	var interval time.Duration
	if spec.Interval != nil {
		interval = spec.Interval.Duration
	}
	if last.Phase == v1alpha1.MetricError && interval == 0 {
		interval = errorRetry
	}
	return last.FinishedAt.Add(interval)
}

// Current keeps the results of this revision of the metrics the gate has, in the gate's
// order. A result of another revision (or a generation after this one: not possible for a
// target that only moves forward) is dropped, never counted.
func Current(results []v1alpha1.MetricResult, metrics []v1alpha1.Metric, revision int32, generation int64) []v1alpha1.MetricResult {
	var out []v1alpha1.MetricResult
	for _, m := range metrics {
		for _, r := range results {
			if r.Name == m.Name && r.Revision == revision && r.Generation <= generation {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// Verdict sums the metrics up: Failed when one failed or erred (the failing one's message),
// else Inconclusive when one is, else Running while one runs, else Successful. Results are
// counted only for the given revision; a metric without a result of it is Running.
func Verdict(results []v1alpha1.MetricResult, metrics []v1alpha1.Metric, revision int32) (phase, message string) {
	var inconclusive, running []string
	for _, m := range metrics {
		var r *v1alpha1.MetricResult
		for i := range results {
			if results[i].Name == m.Name && results[i].Revision == revision {
				r = &results[i]
			}
		}
		switch {
		case r == nil || r.Phase == v1alpha1.MetricRunning || r.Phase == "":
			running = append(running, m.Name)
		case r.Phase == v1alpha1.MetricFailed || r.Phase == v1alpha1.MetricError:
			return v1alpha1.MetricFailed, fmt.Sprintf("metric %s is %s: %s", m.Name, r.Phase, r.Message)
		case r.Phase == v1alpha1.MetricInconclusive:
			inconclusive = append(inconclusive, fmt.Sprintf("metric %s is Inconclusive: %s", m.Name, r.Message))
		}
	}
	switch {
	case len(inconclusive) > 0:
		return v1alpha1.MetricInconclusive, strings.Join(inconclusive, "; ")
	case len(running) > 0:
		return v1alpha1.MetricRunning, "metrics running: " + strings.Join(running, ", ")
	}
	return v1alpha1.MetricSuccessful, fmt.Sprintf("%d metrics successful", len(metrics))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
