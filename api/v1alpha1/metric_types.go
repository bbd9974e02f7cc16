package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metric is one metric analysis of a health gate. Its fields carry Argo Rollouts'
// AnalysisTemplate metric names, so that an analysis carries over; where rewind differs:
//   - successCondition and failureCondition are CEL, not expr: `result[0] < 0.05` reads the
//     same, but `len(result)` is `size(result)`, and `isNaN(x)` is `x != x`;
//   - count defaults to 1 (a gate must end), also when an interval is set;
//   - a Prometheus query that returns no sample is Inconclusive (Argo evaluates the
//     condition on an empty list, an error), so that an empty result asks a person;
//   - an error that a retry cannot fix (a query Prometheus refuses, a 401 or 403) ends the
//     metric as Error at once, without using up consecutiveErrorLimit.
type Metric struct {
	// name of the metric, unique in the gate.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// interval between measurements (default: measurements follow each other at once; an
	// error measurement is retried after 10s).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	Interval *metav1.Duration `json:"interval,omitempty"`
	// initialDelay before the first measurement, counted from the moment every object of the
	// gate is healthy.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')",message="must be a duration such as 30s, 5m or 1h30m"
	InitialDelay *metav1.Duration `json:"initialDelay,omitempty"`
	// count is how many measurements (errors not counted) the metric takes before it passes.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Count *int32 `json:"count,omitempty"`
	// successCondition is a CEL expression over `result` that a successful measurement
	// makes true. Unset, a measurement succeeds unless failureCondition is true.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SuccessCondition string `json:"successCondition,omitempty"`
	// failureCondition is a CEL expression over `result` that a failed measurement makes
	// true. Unset, a measurement fails when successCondition is false. With both set, a
	// measurement for which neither is true is Inconclusive.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	FailureCondition string `json:"failureCondition,omitempty"`
	// failureLimit is how many failed measurements are tolerated: one more fails the gate.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	FailureLimit *int32 `json:"failureLimit,omitempty"`
	// inconclusiveLimit is how many inconclusive measurements are tolerated: one more holds
	// the cluster until a person approves (rewind rollout approve) or rolls back.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	InconclusiveLimit *int32 `json:"inconclusiveLimit,omitempty"`
	// consecutiveErrorLimit is how many error measurements in a row (an unreachable
	// Prometheus, a timeout) are retried: one more fails the gate.
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=0
	ConsecutiveErrorLimit *int32 `json:"consecutiveErrorLimit,omitempty"`
	// provider says where the measurement comes from.
	// +required
	Provider MetricProvider `json:"provider"`
}

// MetricProvider is where a metric's measurements come from: exactly one provider.
// +kubebuilder:validation:XValidation:rule="has(self.prometheus) != has(self.web)",message="set exactly one of prometheus and web"
type MetricProvider struct {
	// prometheus queries a Prometheus (or Thanos, Cortex, Mimir) HTTP API.
	// +optional
	Prometheus *PrometheusMetric `json:"prometheus,omitempty"`
	// web reads a JSON document from an HTTP endpoint.
	// +optional
	Web *WebMetric `json:"web,omitempty"`
}

// PrometheusMetric is an instant query. Its result is bound to `result`: a vector as a list of
// its samples' values (`result[0]`), a scalar as a number.
type PrometheusMetric struct {
	// address of the Prometheus server, e.g. http://prometheus.monitoring:9090.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	Address string `json:"address"`
	// query is a PromQL query, as a Go template with .Cluster.Name, .Cluster.Labels (index
	// .Cluster.Labels "region"), .Namespace (the install namespace), .Rollout, .Release and
	// .Revision, so one Prometheus or Thanos serves a fleet filtered by a cluster label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// timeout of a query in seconds (default 30).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	Timeout *int64 `json:"timeout,omitempty"`
	// headers are sent with every query (not secret: use secretRef for credentials).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Headers []WebMetricHeader `json:"headers,omitempty"`
	// secretRef names a Secret (the Rollout's namespace) with the credentials: `token` (a
	// bearer token) or `username` and `password` (basic authentication). Never logged.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
}

// WebMetric reads one value from a JSON document.
type WebMetric struct {
	// url to GET, a Go template with the same data as a Prometheus query.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// jsonPath selects the value bound to `result`, e.g. {$.data.errorRate} (default: the
	// whole document).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	JSONPath string `json:"jsonPath,omitempty"`
	// timeoutSeconds bounds the request (default 10).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
	// headers are sent with the request.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Headers []WebMetricHeader `json:"headers,omitempty"`
	// secretRef: as for prometheus.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`
}

// WebMetricHeader is one HTTP header.
type WebMetricHeader struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Key string `json:"key"`
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// Phases of a measurement and of a metric (Argo Rollouts' AnalysisPhase).
const (
	MetricRunning      = "Running"
	MetricSuccessful   = "Successful"
	MetricFailed       = "Failed"
	MetricInconclusive = "Inconclusive"
	MetricError        = "Error"
)

// AnnotationApprovedMetrics on a RolloutTarget approves the inconclusive metrics of one
// revision: approved.rewind.dev/metrics: "<revision>" (`rewind rollout approve`). An approval
// of an earlier revision does not count.
const AnnotationApprovedMetrics = "approved.rewind.dev/metrics"

// MaxMeasurements bounds the measurements kept per metric on a RolloutTarget.
const MaxMeasurements = 10

// MetricResult is one metric's analysis on one cluster for one revision: the counts and the
// last measurements. It belongs to the revision and target generation it was taken at; a
// gate counts only the results of its own revision and path.
type MetricResult struct {
	// name of the metric.
	// +required
	Name string `json:"name"`
	// revision of the Rollout the measurements were taken in.
	// +required
	Revision int32 `json:"revision"`
	// generation of the RolloutTarget when the analysis started.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// phase: Running, Successful, Failed, Inconclusive or Error.
	// +required
	Phase string `json:"phase"`
	// message explains the phase.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// count of measurements taken (errors not counted), and of each outcome.
	// +optional
	Count int32 `json:"count,omitempty"`
	// +optional
	Successful int32 `json:"successful,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	Inconclusive int32 `json:"inconclusive,omitempty"`
	// +optional
	Error int32 `json:"error,omitempty"`
	// +optional
	ConsecutiveError int32 `json:"consecutiveError,omitempty"`
	// startedAt is when the analysis started (every object of the gate healthy).
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// measurements are the last ones, oldest first (at most 10).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Measurements []Measurement `json:"measurements,omitempty"`
}

// Measurement is one query and its verdict.
type Measurement struct {
	// phase: Successful, Failed, Inconclusive or Error.
	// +required
	Phase string `json:"phase"`
	// value is the result, as text (a vector as [v1,v2]).
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Value string `json:"value,omitempty"`
	// message says why (the error of an error measurement).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// finishedAt is when it was taken.
	// +required
	FinishedAt metav1.Time `json:"finishedAt"`
}
