package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestParseScheduleNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		// spec is the schedule and time zone.
		spec v1alpha1.SnapshotScheduleSpec
		// want is in the error ("" for none).
		want string
	}{
		{spec: v1alpha1.SnapshotScheduleSpec{Schedule: "0 3 * * *"}},
		{spec: v1alpha1.SnapshotScheduleSpec{Schedule: "@every 6h", TimeZone: "Europe/Paris"}},
		{spec: v1alpha1.SnapshotScheduleSpec{Schedule: "0 3 * *"}, want: `spec.schedule "0 3 * *"`},
		{spec: v1alpha1.SnapshotScheduleSpec{Schedule: "61 * * * *"}, want: "use 5 cron fields"},
		{spec: v1alpha1.SnapshotScheduleSpec{Schedule: "@hourly", TimeZone: "Mars/Olympus"}, want: `spec.timeZone "Mars/Olympus"`},
	} {
		_, _, err := ParseSchedule(tc.spec)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
}

func TestDue(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name     string
		schedule string
		loc      *time.Location
		// last run (or creation), now.
		last, now string
		// wantDue is "" when nothing is due.
		wantDue, wantNext string
	}{
		{name: "not yet", schedule: "0 * * * *", loc: time.UTC, last: "2026-11-30T10:00:00Z", now: "2026-11-30T10:59:59Z", wantNext: "2026-11-30T11:00:00Z"},
		{name: "exactly due", schedule: "0 * * * *", loc: time.UTC, last: "2026-11-30T10:00:00Z", now: "2026-11-30T11:00:00Z", wantDue: "2026-11-30T11:00:00Z", wantNext: "2026-11-30T12:00:00Z"},
		{name: "missed runs are not made up", schedule: "0 * * * *", loc: time.UTC, last: "2026-11-30T10:00:00Z", now: "2026-11-30T15:30:00Z", wantDue: "2026-11-30T15:00:00Z", wantNext: "2026-11-30T16:00:00Z"},
		{name: "time zone", schedule: "0 3 * * *", loc: paris, last: "2026-11-29T12:00:00Z", now: "2026-11-30T02:30:00Z", wantDue: "2026-11-30T02:00:00Z", wantNext: "2026-12-01T02:00:00Z"},
		{name: "every", schedule: "@every 6h", loc: time.UTC, last: "2026-11-30T00:00:00Z", now: "2026-11-30T07:00:00Z", wantDue: "2026-11-30T06:00:00Z", wantNext: "2026-11-30T12:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := ParseSchedule(v1alpha1.SnapshotScheduleSpec{Schedule: tc.schedule})
			if err != nil {
				t.Fatal(err)
			}
			due, next, ok := Due(s, tc.loc, at(tc.last), at(tc.now))
			if ok != (tc.wantDue != "") || ok && !due.Equal(at(tc.wantDue)) || !next.Equal(at(tc.wantNext)) {
				t.Fatalf("due %s (%v), next %s; want due %q, next %s", due, ok, next, tc.wantDue, tc.wantNext)
			}
		})
	}
}

func TestCaptureFailedMessageIsBounded(t *testing.T) {
	due := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	failures := func(n int) []string {
		var f []string
		for i := range n {
			f = append(f, fmt.Sprintf("c%d: boom", i))
		}
		return f
	}
	for _, tc := range []struct {
		// failed is how many clusters failed, of total.
		failed, total int
		// want is the whole message.
		want string
	}{
		{failed: 1, total: 3, want: "1 of 3 clusters not captured at 2026-11-30T03:00:00Z: c0: boom"},
		{failed: 5, total: 5, want: "5 of 5 clusters not captured at 2026-11-30T03:00:00Z: c0: boom; c1: boom; c2: boom; c3: boom; c4: boom"},
		{failed: 6, total: 9, want: "6 of 9 clusters not captured at 2026-11-30T03:00:00Z: c0: boom; c1: boom; c2: boom; c3: boom; c4: boom; and 1 more"},
		{failed: 1000, total: 1000, want: "1000 of 1000 clusters not captured at 2026-11-30T03:00:00Z: c0: boom; c1: boom; c2: boom; c3: boom; c4: boom; and 995 more"},
	} {
		if got := captureFailedMessage(failures(tc.failed), tc.total, due); got != tc.want {
			t.Errorf("%d of %d failed:\n got %q\nwant %q", tc.failed, tc.total, got, tc.want)
		}
	}
}
