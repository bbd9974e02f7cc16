package target

import "time"

// nextBakeCheck says whether a bake's health check is due at now, given when the last one was
// made (zero: none yet), and else how long until it is (0: the bake passed, no check is due
// any more). Checks come every poll while the bake lasts, and the last one at or after until:
// a check before it, up to one poll earlier, says nothing of the bake's last moments.
func nextBakeCheck(now, last, until time.Time, poll time.Duration) (check bool, wait time.Duration) {
	switch {
	case last.IsZero():
		return true, 0
	case !last.Before(until):
		return false, 0 // checked at or after the end: the bake passed
	}
	due := last.Add(poll)
	if due.After(until) {
		due = until
	}
	if wait := due.Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}
