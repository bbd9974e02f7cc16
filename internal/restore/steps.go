package restore

import "context"

// step is one action of a restore; each lives in its own file, named after it. A step is
// idempotent: the journal records it only once it is complete, so a step interrupted half way
// (a crash, or a fault that outlasted the in-place retries of its requests) runs again from
// its start and must end as if it had run once.
type step interface {
	run(ctx context.Context, r *restorer) error
}

// reporter is a step whose part of the report is rebuilt, reading only, when a resumed
// restore finds the step done already (its report was lost with the run that did it).
type reporter interface {
	report(ctx context.Context, r *restorer) error
}

// steps maps every step name to its action (see Steps for their order).
var steps = map[string]step{
	StepQuiesce:      quiesceStep{},
	StepCRDs:         crdsStep{},
	StepCRs:          crsStep{},
	StepAssociated:   associatedStep{},
	StepCreatedSince: createdSinceStep{},
	StepResume:       resumeStep{},
}
