package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	rolloutDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "rewind_rollout_duration_seconds", Help: "Time from the start to the end of a rollout revision.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	clusterPhaseTransitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_cluster_phase_transitions_total", Help: "Per-cluster and rollout phase transitions, by event reason.",
	}, []string{"reason"})
	rollbacksTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rewind_rollbacks_total", Help: "Completed rollbacks, by reason (ManualRollback or AutomaticRollback).",
	}, []string{"reason"})
	snapshotBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_snapshot_bytes", Help: "Size of the last snapshot's canonical payload, by cluster.",
	}, []string{"cluster"})
	snapshotObjects = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rewind_snapshot_objects", Help: "Objects in the last snapshot, by cluster.",
	}, []string{"cluster"})
	restoreDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "rewind_restore_duration_seconds", Help: "Time a restore of one cluster took.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	})
)

func init() {
	metrics.Registry.MustRegister(rolloutDuration, clusterPhaseTransitions, rollbacksTotal, snapshotBytes, snapshotObjects, restoreDuration)
}
