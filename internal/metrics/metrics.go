// Package metrics holds rewind's Prometheus metrics, registered with controller-runtime's
// registry (served on the manager's metrics endpoint). Per-cluster metrics are labelled by the
// rollout's namespace and name and the cluster.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// RolloutDuration is the time from the start to the end of a rollout revision.
	RolloutDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rewind_rollout_duration_seconds", Help: "Time from the start to the end of a rollout revision, by outcome.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	}, []string{"namespace", "rollout", "outcome"})
	// WaveDuration is the time a wave took, from its first cluster's start to its last one's end.
	WaveDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rewind_wave_duration_seconds", Help: "Time a wave took, from the start of its first cluster to the end of its last (bake excluded).",
		Buckets: prometheus.ExponentialBuckets(0.5, 2, 14),
	}, []string{"namespace", "rollout", "wave"})
	// StepDuration is the time one run of a per-cluster step took.
	StepDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rewind_step_duration_seconds", Help: "Time one run of a per-cluster step took.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
	}, []string{"namespace", "rollout", "cluster", "step"})
	// ClusterDuration is the time a cluster's change took, from start to done.
	ClusterDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rewind_cluster_duration_seconds", Help: "Time one cluster's change took, by path (Upgrade, Restore, None).",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	}, []string{"namespace", "rollout", "cluster", "path"})
	// GateFailures counts health gates that failed.
	GateFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_health_gate_failures_total", Help: "Health gates that failed (at the gate or during a bake).",
	}, []string{"namespace", "rollout", "cluster"})
	// Restores counts restores of a cluster to a snapshot, by outcome.
	Restores = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_restores_total", Help: "Restores of a cluster to a snapshot, by outcome (Succeeded, Failed).",
	}, []string{"namespace", "rollout", "cluster", "outcome"})
	// Rollbacks counts rollbacks of a rollout, by reason.
	Rollbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_rollbacks_total", Help: "Rollbacks started, by reason (AutomaticRollback, ManualRollback, FailedClusterRestore).",
	}, []string{"namespace", "rollout", "reason"})
	// SnapshotBytes is the size of the last snapshot of a cluster.
	SnapshotBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_snapshot_bytes", Help: "Size of the last snapshot's canonical payload.",
	}, []string{"namespace", "rollout", "cluster"})
	// SnapshotFailures counts snapshot steps that failed an attempt.
	SnapshotFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_snapshot_failures_total", Help: "Attempts to take a snapshot that failed.",
	}, []string{"namespace", "rollout", "cluster"})
	// Transitions counts Events by reason (cluster and rollout phase transitions).
	Transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_cluster_phase_transitions_total", Help: "Per-cluster and rollout phase transitions, by event reason.",
	}, []string{"reason"})
	// RolloutPhase is 1 for the phase a rollout is in.
	RolloutPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_rollout_phase", Help: "1 for the phase each rollout is in, 0 for the others.",
	}, []string{"namespace", "rollout", "phase"})
	// RolloutStalled is 1 while a rollout is Stalled.
	RolloutStalled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_rollout_stalled", Help: "1 while the rollout is Stalled (a person must act), by reason.",
	}, []string{"namespace", "rollout", "reason"})
	// FaultRetries counts the faults per-cluster steps met and retried in place.
	FaultRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_fault_retries_total", Help: "Faults (reset or refused connections, timeouts, 429s, 5xx, API server restarts) a per-cluster step met and retried in place, by step.",
	}, []string{"namespace", "rollout", "cluster", "step"})
	// MemberRequestRetries counts requests to members sent again after a fault, by reason
	// (connection, or the status code answered).
	MemberRequestRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_member_request_retries_total", Help: "Requests to a member cluster sent again after a fault (a reset or refused connection, a timeout, a 429 or 5xx answer), by reason.",
	}, []string{"cluster", "reason"})
	// MemberProbeFailures is the consecutive failed health probes of each member (0 while it
	// answers).
	MemberProbeFailures = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_member_probe_consecutive_failures", Help: "Consecutive failed health probes of a member cluster (0 while it answers).",
	}, []string{"cluster"})
)

func init() {
	metrics.Registry.MustRegister(RolloutDuration, WaveDuration, StepDuration, ClusterDuration, GateFailures, Restores, Rollbacks,
		SnapshotBytes, SnapshotFailures, Transitions, RolloutPhase, RolloutStalled, FaultRetries, MemberProbeFailures, MemberRequestRetries)
}
