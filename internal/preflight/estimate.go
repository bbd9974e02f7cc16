package preflight

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// Measurement is a capture rewind timed on a cluster: the bytes of a snapshot's payload and
// how long it took (Snapshot status.bytes and status.captureDuration).
type Measurement struct {
	Snapshot string        `json:"snapshot"`
	Bytes    int64         `json:"bytes"`
	Duration time.Duration `json:"duration"`
}

// Rate is the measured capture rate in bytes per second.
func (m Measurement) Rate() float64 { return float64(m.Bytes) / m.Duration.Seconds() }

// Estimate is the time a snapshot of Bytes would take at a measured rate.
type Estimate struct {
	// Bytes estimated.
	Bytes int64 `json:"bytes"`
	// Measured is the capture the rate comes from (nil: no measurement yet).
	Measured *Measurement `json:"measured,omitempty"`
	// Duration estimated (0 without a measurement).
	Duration time.Duration `json:"duration,omitempty"`
}

// EstimateCapture estimates the time to capture bytes at the rate of m; with no usable
// measurement (nil, no bytes or no duration) the estimate has none and says so, never a
// number made up.
func EstimateCapture(bytes int64, m *Measurement) Estimate {
	e := Estimate{Bytes: bytes}
	if m == nil || m.Bytes <= 0 || m.Duration <= 0 {
		return e
	}
	e.Measured = m
	e.Duration = time.Duration(float64(bytes) / m.Rate() * float64(time.Second))
	return e
}

// String says the estimate in a line: "about 1.2s at 310.5 KiB/s (snapshot s1: 62.1 KiB in
// 200ms)" or "no measurement yet".
func (e Estimate) String() string {
	if e.Measured == nil {
		return "no measurement yet (no snapshot of this cluster records its capture duration)"
	}
	m := e.Measured
	return fmt.Sprintf("about %s at %.1f KiB/s (snapshot %s: %.1f KiB in %s)",
		roundDuration(e.Duration), m.Rate()/1024, m.Snapshot, float64(m.Bytes)/1024, roundDuration(m.Duration))
}

// Short says the estimate in a table cell: "~1.2s" or "no measurement yet".
func (e Estimate) Short() string {
	if e.Measured == nil {
		return "no measurement yet"
	}
	return "~" + roundDuration(e.Duration).String()
}

// roundDuration keeps two or three significant digits.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

// LastMeasurement returns the capture rate rewind measured on a cluster for an operator: the
// newest Ready Snapshot in namespace labelled with both that records its bytes and capture
// duration; nil when there is none.
func LastMeasurement(ctx context.Context, hub client.Reader, namespace, cluster, operator string) (*Measurement, error) {
	var list v1alpha1.SnapshotList
	if err := hub.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabels{snapshot.LabelCluster: cluster, snapshot.LabelOperator: operator}); err != nil {
		return nil, fmt.Errorf("reading the snapshots of %s: %w", cluster, err)
	}
	var best *v1alpha1.Snapshot
	for i := range list.Items {
		s := &list.Items[i]
		st := s.Status
		if st.CaptureDuration == nil || st.CaptureDuration.Duration <= 0 || st.Bytes <= 0 || st.CapturedAt == nil ||
			!meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) {
			continue
		}
		if best == nil || st.CapturedAt.After(best.Status.CapturedAt.Time) ||
			(st.CapturedAt.Equal(best.Status.CapturedAt) && s.Name > best.Name) {
			best = s
		}
	}
	if best == nil {
		return nil, nil
	}
	return &Measurement{Snapshot: best.Name, Bytes: best.Status.Bytes, Duration: best.Status.CaptureDuration.Duration}, nil
}
