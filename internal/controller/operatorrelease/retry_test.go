package operatorrelease

import (
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		// failing is how long the release has been Stalled.
		failing time.Duration
		want    time.Duration
	}{
		{0, 10 * time.Second},
		{3 * time.Second, 10 * time.Second},
		{40 * time.Second, 40 * time.Second},
		{time.Hour, 5 * time.Minute},
	}
	for _, tc := range cases {
		if got := retryAfter(start.Add(tc.failing), start); got != tc.want {
			t.Errorf("failing for %s: retry after %s, want %s", tc.failing, got, tc.want)
		}
	}
}
