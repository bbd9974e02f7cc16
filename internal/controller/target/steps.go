package target

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
)

// Steps of the per-cluster state machines.
const (
	StepPrecheck       = "Precheck"
	StepSnapshot       = "Snapshot"
	StepApplyCRDs      = "ApplyCRDs"
	StepApplyRBAC      = "ApplyRBAC"
	StepApplyConfig    = "ApplyConfig"
	StepApplyWebhooks  = "ApplyWebhooks"
	StepApplyWorkloads = "ApplyWorkloads"
	StepApplyOthers    = "ApplyOthers"
	StepHealthGate     = "HealthGate"
	StepRecord         = "Record"
	StepDone           = "Done"
	// The restore path: back to the snapshot, then the release it was taken under.
	StepRestore      = "Restore"
	StepApplyRelease = "ApplyRelease"
)

// UpgradeSteps and RestoreSteps are the per-cluster state machines, in order.
var (
	UpgradeSteps = []string{StepPrecheck, StepSnapshot, StepApplyCRDs, StepApplyRBAC, StepApplyConfig, StepApplyWebhooks, StepApplyWorkloads, StepApplyOthers, StepHealthGate, StepRecord, StepDone}
	RestoreSteps = []string{StepRestore, StepApplyRelease, StepHealthGate, StepRecord, StepDone}
)

// unjournaled are the steps not put on record before they run. Each is either quick,
// idempotent and after a journaled step with nothing expensive between (the later apply
// stages after ApplyCRDs, Record after HealthGate), or only reads the cluster (Precheck before
// the Snapshot, HealthGate after the applies): a crash at one resumes from the last step on
// record (or from Pending) and redoes only reads and idempotent writes. What a read-only
// step finds is written anyway: a failure, a gate's wait ("waiting for health" with the step
// and its start), or the next journaled step. Every other step is patched into the target's
// status before it runs, ApplyCRDs (the first change to the cluster) above all; a step's
// failure is always recorded. This leaves three writes before the end of an upgrade
// (Snapshot, ApplyCRDs, and a gate's wait) of the nine steps: the target status writes are the
// hub API server's main cost in a fleet wave, twice over for a pull member (its agent's write
// of the copy, the relay's of the target).
var unjournaled = map[string]bool{
	StepPrecheck: true, StepApplyRBAC: true, StepApplyConfig: true, StepApplyWebhooks: true, StepApplyWorkloads: true,
	StepApplyOthers: true, StepHealthGate: true, StepRecord: true,
}

// Journaled says whether a step is put on record in the target's status before it runs.
func Journaled(step string) bool { return !unjournaled[step] }

// step is one idempotent action of a target's state machine. Each lives in its own file.
type step interface {
	// run does the step once. A positive wait means "not done yet: run again after wait".
	run(ctx context.Context, x *execution) (wait time.Duration, err error)
}

// steps maps every step name to its action.
var steps = map[string]step{
	StepPrecheck:       precheck{},
	StepSnapshot:       takeSnapshot{},
	StepApplyCRDs:      applyStages{apply.StageCRDs},
	StepApplyRBAC:      applyStages{apply.StageNamespaces, apply.StageRBAC},
	StepApplyConfig:    applyStages{apply.StageConfig},
	StepApplyWebhooks:  applyStages{apply.StageWebhooks},
	StepApplyWorkloads: applyStages{apply.StageWorkloads},
	StepApplyOthers:    applyStages{apply.StageOthers},
	StepApplyRelease:   applyStages(apply.Stages),
	StepHealthGate:     healthGate{},
	StepRecord:         record{},
	StepRestore:        restoreSnapshot{},
}

// NextStep returns the step after step on a path.
func NextStep(path, step string) string {
	seq := UpgradeSteps
	if path == v1alpha1.PathRestore {
		seq = RestoreSteps
	}
	i := slices.Index(seq, step)
	if i < 0 || i+1 >= len(seq) {
		return StepDone
	}
	return seq[i+1]
}

// FirstStep is where a path starts.
func FirstStep(path string) string {
	switch path {
	case v1alpha1.PathRestore:
		return StepRestore
	case v1alpha1.PathNone:
		return StepDone
	}
	return StepPrecheck
}

// Changed says whether a target's path (possibly) changed its cluster: an upgrade that got
// past its snapshot, or any restore that started.
func Changed(path, phase, step string) bool {
	switch path {
	case v1alpha1.PathRestore:
		return phase != "" && phase != v1alpha1.ClusterPending
	case v1alpha1.PathUpgrade:
		return slices.Index(UpgradeSteps, step) > slices.Index(UpgradeSteps, StepSnapshot) || phase == v1alpha1.ClusterSucceeded
	}
	return false
}

// StalePlan says whether a plan made from basis (what the Rollout read of the journal) no
// longer holds for the journal st: the journal has (possibly) changed the cluster, and the
// Rollout did not see that journal change it. A plan made from a cluster seen unchanged (a
// RollbackAll's "nothing to roll back", an upgrade from the release it ran) would leave it on
// what its journal applied. A journal that changed nothing since, or whose change the Rollout
// saw, keeps the plan; so does a plan without a basis (a target written by hand).
func StalePlan(basis *v1alpha1.PlanBasis, st *v1alpha1.RolloutTargetStatus) bool {
	if basis == nil || !Changed(st.Path, st.Phase, st.Step) {
		return false
	}
	sameJournal := basis.Revision == st.Revision && basis.Path == st.Path
	return !sameJournal || !Changed(basis.Path, basis.Phase, basis.Step)
}

// Refused says whether t's executor refused its current plan as stale (StalePlan): the
// Rollout plans the cluster again.
func Refused(t *v1alpha1.RolloutTarget) bool {
	return t.Status.WaitingFor == v1alpha1.ReasonStalePlan && t.Status.Revision != t.Spec.Revision &&
		t.Status.ObservedGeneration == t.Generation
}

// Terminal says whether a phase is final for its revision.
func Terminal(phase string) bool {
	switch phase {
	case v1alpha1.ClusterSucceeded, v1alpha1.ClusterFailed, v1alpha1.ClusterRolledBack:
		return true
	}
	return false
}

// Active says whether a target is changing its cluster.
func Active(phase string) bool {
	return phase == v1alpha1.ClusterUpgrading || phase == v1alpha1.ClusterRollingBack
}

// stepError is a step failure that only a person can fix: the target fails at once instead of
// retrying.
type stepError struct{ err error }

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func terminalf(format string, args ...any) error {
	return &stepError{err: fmt.Errorf(format, args...)}
}

func isTerminal(err error) bool {
	var se *stepError
	return errors.As(err, &se)
}

// waitError says a step cannot go on for a cause outside the release (reason, e.g. an
// unavailable snapshot store): the target waits, without failing, and tries again.
type waitError struct {
	reason string
	err    error
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }
