package preflight

import (
	"strings"
	"testing"
	"time"
)

func TestEstimateCapture(t *testing.T) {
	m := &Measurement{Snapshot: "s1", Bytes: 100 << 10, Duration: 2 * time.Second} // 50 KiB/s
	cases := []struct {
		name  string
		bytes int64
		m     *Measurement
		want  time.Duration
		says  string
	}{
		{name: "at the measured rate", bytes: 25 << 10, m: m, want: 500 * time.Millisecond, says: "about 500ms at 50.0 KiB/s (snapshot s1: 100.0 KiB in 2s)"},
		{name: "larger than measured", bytes: 1 << 20, m: m, want: 20480 * time.Millisecond, says: "about 20.48s at 50.0 KiB/s"},
		{name: "nothing to capture", bytes: 0, m: m, want: 0, says: "about 0s"},
		{name: "no snapshot yet", bytes: 25 << 10, m: nil, says: "no measurement yet"},
		{name: "a snapshot without a duration is no measurement", bytes: 25 << 10, m: &Measurement{Snapshot: "old", Bytes: 1000}, says: "no measurement yet"},
		{name: "a snapshot without bytes is no measurement", bytes: 25 << 10, m: &Measurement{Snapshot: "empty", Duration: time.Second}, says: "no measurement yet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := EstimateCapture(tc.bytes, tc.m)
			if e.Duration != tc.want || e.Bytes != tc.bytes {
				t.Errorf("estimate %+v, want %v for %d bytes", e, tc.want, tc.bytes)
			}
			if !strings.Contains(e.String(), tc.says) {
				t.Errorf("says %q, want %q in it", e.String(), tc.says)
			}
			if (e.Measured == nil) != (e.Short() == "no measurement yet") {
				t.Errorf("short %q for measured %v", e.Short(), e.Measured)
			}
		})
	}
}
