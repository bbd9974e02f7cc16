package operatorrelease

import (
	"fmt"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/release"
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

func TestMergeValues(t *testing.T) {
	dst := map[string]interface{}{"replicas": 1, "image": map[string]interface{}{"repository": "r", "digest": "d1"}, "extraArgs": []interface{}{"a"}}
	dst = release.MergeValues(dst, map[string]interface{}{"image": map[string]interface{}{"digest": "d2"}, "extraArgs": []interface{}{"b"}, "new": true})
	want := map[string]interface{}{"replicas": 1, "image": map[string]interface{}{"repository": "r", "digest": "d2"}, "extraArgs": []interface{}{"b"}, "new": true}
	if got, w := sprint(dst), sprint(want); got != w {
		t.Errorf("merged %s, want %s (maps merge, lists and scalars are replaced)", got, w)
	}
}

func sprint(v interface{}) string { return fmt.Sprint(v) }
