// Package history reads a Rollout's revision history as a person reads it: which revisions
// were upgrades and which were rollbacks, who rolled back (a person or the failure policy),
// and what became of each release. The controller records outcomes per revision; a rollback's
// own revision ends "Succeeded" when every cluster is restored, which is the rollback's
// success, never the release's: Describe says so.
package history

import (
	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// Kinds of revision.
const (
	KindUpgrade  = "Upgrade"
	KindRollback = "Rollback"
)

// Who rolled back.
const (
	ByPerson = "person"
	ByPolicy = "policy"
)

// Outcomes as recorded by the controller.
const (
	OutcomeSucceeded  = "Succeeded"
	OutcomeSuperseded = "Superseded"
	OutcomeRolledBack = "RolledBack"
	OutcomeFailed     = "Failed"
	OutcomeInProgress = "InProgress"
)

// Entry is one revision, described.
type Entry struct {
	v1alpha1.Revision
	// Kind is KindUpgrade or KindRollback (the revision returns to an earlier release).
	Kind string
	// By is who asked for a rollback: ByPerson or ByPolicy ("" for an upgrade).
	By string
	// Shown is the outcome as a person should read it: a rollback that restored every
	// cluster is "RolledBack", never "Succeeded"; a release a later rollback undid says who
	// undid it.
	Shown string
	// RolledBackBy is who rolled this release back by a later revision ("" when none did).
	RolledBackBy string
}

// Action is the Kind and By of an entry in a word or three: "upgrade", "rollback by a person",
// "rollback by the policy".
func (e Entry) Action() string {
	switch {
	case e.Kind == KindUpgrade:
		return "upgrade"
	case e.By == ByPolicy:
		return "rollback by the policy"
	default:
		return "rollback by a person"
	}
}

// Describe describes a Rollout's history, oldest first (as it is stored).
//
// A revision is a rollback when the failure policy started it (Automatic), or when it returns
// to a release that an earlier revision installed successfully and the revision before it ran
// another release: a person (or their Git repository) set spec.release back. A retry of a
// release that failed is an upgrade: the release never succeeded.
func Describe(h []v1alpha1.Revision) []Entry {
	out := make([]Entry, len(h))
	succeeded := map[string]bool{}
	for i, r := range h {
		e := Entry{Revision: r, Kind: KindUpgrade}
		switch {
		case r.Automatic:
			e.Kind, e.By = KindRollback, ByPolicy
		case i > 0 && h[i-1].Release != r.Release && succeeded[r.Release]:
			e.Kind, e.By = KindRollback, ByPerson
		}
		e.Shown = r.Outcome
		if e.Kind == KindRollback {
			switch r.Outcome {
			case OutcomeSucceeded:
				e.Shown = OutcomeRolledBack
			case OutcomeInProgress, "":
				e.Shown = "RollingBack"
			case OutcomeFailed:
				e.Shown = "RollbackFailed"
			}
		}
		if i > 0 && e.Kind == KindRollback {
			prev := &out[i-1]
			prev.RolledBackBy = e.By
			switch prev.Revision.Outcome {
			case OutcomeSuperseded, OutcomeRolledBack:
				prev.Shown = "RolledBack by " + who(e.By)
			case OutcomeSucceeded:
				prev.Shown = "Succeeded, then rolled back by " + who(e.By)
			case OutcomeFailed:
				prev.Shown = "Failed, then rolled back by " + who(e.By)
			}
		}
		if e.Kind == KindUpgrade && r.Outcome == OutcomeSucceeded {
			succeeded[r.Release] = true
		}
		if e.Kind == KindRollback && r.Outcome == OutcomeSucceeded {
			succeeded[r.Release] = true // it runs again, as it did
		}
		out[i] = e
	}
	return out
}

func who(by string) string {
	if by == ByPolicy {
		return "the policy"
	}
	return "a person"
}
