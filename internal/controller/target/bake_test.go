package target

import (
	"testing"
	"time"
)

func TestNextBakeCheck(t *testing.T) {
	until := time.Date(2026, 12, 1, 16, 0, 10, 0, time.UTC)
	poll := 2 * time.Second
	cases := []struct {
		name string
		// now and last (zero: never checked) are the input.
		now, last time.Time
		// check says a check is due now; wait is how long until the next one (0: none).
		check bool
		wait  time.Duration
	}{
		{name: "the first check is made at once", now: until.Add(-5 * time.Second), check: true},
		{name: "a check is made every poll", now: until.Add(-5 * time.Second), last: until.Add(-6 * time.Second), wait: time.Second},
		{name: "a poll that is due is made", now: until.Add(-4 * time.Second), last: until.Add(-6 * time.Second), check: true},
		{name: "the check after the last poll inside the bake waits for its end, not a whole poll",
			now: until.Add(-500 * time.Millisecond), last: until.Add(-500 * time.Millisecond), wait: 500 * time.Millisecond},
		{name: "at the end of the bake, the final check is made", now: until, last: until.Add(-500 * time.Millisecond), check: true},
		{name: "a target woken after the end still makes the final check", now: until.Add(3 * time.Second), last: until.Add(-time.Second), check: true},
		{name: "a target first reconciled after the end checks once", now: until.Add(3 * time.Second), check: true},
		{name: "a check at the end passes the bake: nothing more", now: until.Add(time.Second), last: until},
		{name: "a check after the end passes the bake", now: until.Add(time.Minute), last: until.Add(time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check, wait := nextBakeCheck(tc.now, tc.last, until, poll)
			if check != tc.check || wait != tc.wait {
				t.Fatalf("nextBakeCheck = %t, %s; want %t, %s", check, wait, tc.check, tc.wait)
			}
		})
	}
}
