// Package target executes one member cluster's part of a Rollout: the RolloutTarget's state
// machine (precheck, snapshot, staged apply, health gate, record; or restore, apply, health
// gate, record), one step per file, journaled in the target's status before each step that is
// not quick and idempotent runs (see Journaled), so that a restarted controller resumes. Many
// targets run at once, each on its own worker: no cluster waits for another.
package target

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/analysis"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/metrics"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// MaxAttempts bounds the tries of one step that failed (not faults: those are retried until
// the member counts as unreachable) before the target fails.
const MaxAttempts = 5

// Backoff of a step that met a fault, and how often a waiting target looks again.
const (
	faultBackoffBase = time.Second
	faultBackoffMax  = 30 * time.Second
	waitPoll         = 5 * time.Second
	// faultsBeforeWaiting is how many faults in a row (about 3 minutes of backoff) make a
	// step that still meets them say that it waits (waitingFor RepeatedFaults).
	faultsBeforeWaiting = 10
)

// ErrCrash is returned when a test's CrashAt hook stops the reconciler at a step.
var ErrCrash = errors.New("crash injected")

// Reconciler executes RolloutTargets.
type Reconciler struct {
	// Client reads and writes the hub (RolloutTargets, Snapshots); Hub reads what the manager
	// does not cache (Secrets) straight from the API server.
	Client client.Client
	Hub    client.Reader
	// APIReader reads a target again, uncached, after a conflict of its status write (nil:
	// Client).
	APIReader client.Reader
	// Members gives access to member clusters.
	Members *member.Cache
	// Probes says which members the health probe finds unreachable (nil: none is).
	Probes *member.Prober
	// Releases caches releases' manifests.
	Releases *release.Cache
	// Recorder records Events on the Rollout.
	Recorder events.EventRecorder
	// Now is the clock.
	Now func() time.Time
	// GatePoll is how often an unhealthy cluster is re-checked (default 2s).
	GatePoll time.Duration
	// Workers is how many targets run at once (default 32).
	Workers int
	// Restores bounds the snapshot content running restores hold in memory (nil: unbounded).
	Restores *MemoryBudget
	// Measurer takes the health gates' metric measurements (nil: a default one).
	Measurer *analysis.Measurer
	// MetricErrorRetry is how soon a metric without interval is measured again after an
	// error measurement (default 10s).
	MetricErrorRetry time.Duration
	// CrashAt, when it returns true for a cluster and step, stops the reconciler right after
	// the step was recorded as started (tests of crash safety). It is also called, with
	// "Restore: <point>" as the step, at the restore's inner points (restore.Options.At), where
	// it cannot stop anything (tests of faults act there).
	CrashAt func(cluster, step string) bool
	// Local is set in a pull member's agent: the member it runs in. It runs the copies of that
	// member's targets (in the member's hub namespace) and nothing else. On the hub ("") the
	// targets of pull members are relayed to their agents (see relay), not run.
	Local string
	// KeyNamespace holds the snapshot key Secret ("": snapshot.KeyNamespace); an agent's is
	// its member's hub namespace.
	KeyNamespace string

	// copied remembers the inputs the relay copied for each pull member's copy.
	copied copiedInputs
	// relayed paces the relay's writes of pull members' targets' status.
	relayed relayedWrites
	// artifacts keeps the manifests and renderings the relay copies to pull members: each is
	// read once from the hub for every member a revision copies it to.
	artifacts artifact.Cache
	// credentials reads the Secrets the relay copies to pull members once per revision.
	credentials revisionSecrets
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) gatePoll() time.Duration {
	if r.GatePoll > 0 {
		return r.GatePoll
	}
	return 2 * time.Second
}

// +kubebuilder:rbac:groups=rewind.dev,resources=rollouttargets,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=rollouttargets/status,verbs=get;update;patch

// Reconcile runs a target's steps until one must wait (a health gate polling, a backoff) or
// the target is done. Its status is patched before every journaled step and at the end.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	t := &v1alpha1.RolloutTarget{}
	if err := r.Client.Get(ctx, req.NamespacedName, t); err != nil {
		if apierrors.IsNotFound(err) {
			r.Restores.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Local != "" {
		if !IsCopy(t) || t.Spec.Cluster != r.Local {
			return ctrl.Result{}, nil // not this agent's work
		}
	} else {
		if IsCopy(t) {
			return ctrl.Result{}, nil // its member's agent runs it
		}
		mc, err := r.pullMember(ctx, t.Spec.Cluster)
		if err != nil {
			return ctrl.Result{}, err
		}
		switch {
		case mc != nil:
			return r.relay(ctx, t, mc)
		case controllerutil.ContainsFinalizer(t, FinalizerMemberCopy):
			// The member left mode Pull: its copy goes, and the target runs here.
			if err := r.dropCopy(ctx, t); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if !t.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	x := r.newExecution(t)
	ended := Terminal(t.Status.Phase) && t.Status.Revision == t.Spec.Revision && t.Status.Path == t.Spec.Path
	res, err := r.reconcile(ctx, x)
	if errors.Is(err, ErrCrash) {
		return ctrl.Result{}, err
	}
	if !ended && Terminal(t.Status.Phase) {
		x.clearMemberJournal(ctx) // once the end is written
	}
	// A conflict (another writer changed the journal since this read: a stale cache read)
	// records nothing: the target runs again from a fresh read.
	return patch.Result(ctx, res, err, x.patch(ctx))
}

func (r *Reconciler) reconcile(ctx context.Context, x *execution) (ctrl.Result, error) {
	t := x.t
	st := &t.Status
	gen := t.Generation
	if st.Revision != t.Spec.Revision && StalePlan(t.Spec.Basis, st) {
		// The journal changed the cluster after the Rollout read it to plan this revision: the
		// plan may leave the cluster changed ("nothing to roll back"). It is not run; the
		// journal stays as it is, and the Rollout plans the cluster again from it.
		st.ObservedGeneration = t.Generation
		msg := fmt.Sprintf("revision %d was planned from this cluster's revision %d at %s (%s), but that revision has since reached %s (%s) and may have changed the cluster: the rollout plans it again",
			t.Spec.Revision, t.Spec.Basis.Revision, dash(t.Spec.Basis.Step), dash(t.Spec.Basis.Phase), dash(st.Step), st.Phase)
		if st.WaitingFor != v1alpha1.ReasonStalePlan {
			now := metav1.NewTime(r.now())
			st.WaitingFor, st.WaitingSince = v1alpha1.ReasonStalePlan, &now
			x.waitingEvent(msg)
		}
		st.Message = msg
		return ctrl.Result{}, nil
	}
	if st.Revision != t.Spec.Revision || st.Path != t.Spec.Path {
		// A new plan (a new revision, or a path the Rollout's failure policy changed): a new
		// journal. The metric results are kept, each stamped with its revision, so that the
		// rollback of a revision that failed its metrics still shows why; they never count
		// for another revision (analyze drops them before it measures).
		*st = v1alpha1.RolloutTargetStatus{Revision: t.Spec.Revision, Path: t.Spec.Path, Phase: v1alpha1.ClusterPending, Metrics: st.Metrics}
	}
	if st.ToRelease == "" {
		// The journal says what it changes (a journal an older controller started says it
		// from now on).
		st.FromRelease, st.ToRelease, st.FromManifests, st.Manifests = t.Spec.FromRelease, t.Spec.ToRelease, t.Spec.FromManifests, t.Spec.Manifests
	}
	st.ObservedGeneration = t.Generation
	if !t.Spec.Start {
		if Active(st.Phase) {
			st.Message = "held before " + st.Step + ": the rollout is paused"
		}
		return ctrl.Result{}, nil
	}
	if st.Phase == v1alpha1.ClusterPending {
		now := metav1.NewTime(r.now())
		st.Phase, st.Step, st.StartedAt, st.StepStartedAt = v1alpha1.ClusterUpgrading, FirstStep(t.Spec.Path), &now, &now
		if t.Spec.Path == v1alpha1.PathRestore {
			st.Phase = v1alpha1.ClusterRollingBack
			st.Snapshot = t.Spec.Snapshot
		}
		x.startedEvent()
	}
	if Terminal(st.Phase) {
		return r.bake(ctx, x)
	}
	for {
		if st.NextAttemptAt != nil {
			if wait := st.NextAttemptAt.Sub(r.now()); wait > 0 {
				return ctrl.Result{RequeueAfter: wait}, nil
			}
		}
		if st.Step == StepDone {
			r.finish(x)
			return ctrl.Result{}, nil
		}
		// A journaled step is on record before it runs: a crash resumes it. An unjournaled one
		// is resumed from the journaled step before it (all are idempotent).
		if Journaled(st.Step) {
			if err := x.patch(ctx); err != nil {
				return ctrl.Result{}, err // patched again, and folded, by Reconcile
			}
			if t.Generation != gen {
				// The spec changed under this reconcile (the write went through over a fresh
				// read that holds it): the step is on record but does not run on an old
				// spec. The next reconcile starts from the new one (and refuses a new plan
				// made before this step was on record: StalePlan).
				return ctrl.Result{RequeueAfter: patch.ConflictRequeue}, nil
			}
		}
		if r.CrashAt != nil && r.CrashAt(t.Spec.Cluster, st.Step) {
			return ctrl.Result{}, ErrCrash
		}
		name := st.Step
		started := time.Now()
		wait, err := r.runStep(ctx, x)
		metrics.StepDuration.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster, name).Observe(time.Since(started).Seconds())
		var we *waitError
		switch {
		case ctx.Err() != nil:
			return ctrl.Result{}, ctx.Err() // shutting down: the journal resumes
		case err == nil && wait > 0:
			r.resumed(x)
			return ctrl.Result{RequeueAfter: wait}, nil // still waiting (a health gate)
		case err == nil:
			r.resumed(x)
			r.stepDone(x)
			continue
		case isTerminal(err):
			r.fail(x, err.Error())
			return ctrl.Result{}, nil
		case errors.As(err, &we):
			return r.wait(x, we.reason, we.Error(), waitPoll), nil
		case fault.IsTransient(err) || apierrors.IsConflict(err):
			return r.fault(ctx, x, err), nil
		}
		r.resumed(x)
		st.Attempt++
		st.Message = fmt.Sprintf("%s failed (attempt %d of %d): %v", st.Step, st.Attempt, MaxAttempts, err)
		if st.Attempt >= MaxAttempts {
			r.fail(x, st.Message)
			return ctrl.Result{}, nil
		}
		backoff := min(time.Duration(math.Pow(2, float64(st.Attempt)))*500*time.Millisecond, 30*time.Second)
		// Rounded up to the second, as status times are stored: the wait is never shorter.
		next := metav1.NewTime(r.now().Add(backoff).Truncate(time.Second).Add(time.Second))
		st.NextAttemptAt = &next
		return ctrl.Result{RequeueAfter: next.Sub(r.now())}, nil
	}
}

// runStep runs the current step against the target's member.
func (r *Reconciler) runStep(ctx context.Context, x *execution) (time.Duration, error) {
	s, ok := steps[x.t.Status.Step]
	if !ok {
		return 0, terminalf("unknown step %q", x.t.Status.Step)
	}
	cl, err := r.Members.Get(ctx, x.t.Spec.Cluster)
	if err != nil {
		var se *member.SecretError
		if errors.As(err, &se) || apierrors.IsNotFound(err) {
			return 0, terminalf("%v", err)
		}
		return 0, err
	}
	x.cl = cl
	wait, err := s.run(ctx, x)
	switch {
	case apierrors.IsForbidden(err):
		// Retrying does not grant a permission: say which one is missing, at once.
		return 0, terminalf("%v (the controller's identity lacks this permission on the hub or on member %s: see docs/install.md#permissions)", err, x.t.Spec.Cluster)
	}
	return wait, err
}

func (r *Reconciler) stepDone(x *execution) {
	st := &x.t.Status
	now := metav1.NewTime(r.now())
	next := NextStep(x.t.Spec.Path, st.Step)
	if x.skipTo != "" {
		next, x.skipTo = x.skipTo, ""
	}
	st.Step, st.StepStartedAt, st.Attempt, st.Faults, st.NextAttemptAt, st.Message = next, &now, 0, 0, nil, ""
}

// fault handles an error the world caused (fault.IsTransient, or an optimistic-lock
// conflict): the step is tried again after a jittered backoff, as often as it takes, and the
// attempt is not counted. Only a member the health probe has found unreachable for longer
// than its unreachableTimeout stops that: the target then waits for it, or fails with the
// Rollout's spec.unreachablePolicy Fail.
func (r *Reconciler) fault(ctx context.Context, x *execution, err error) ctrl.Result {
	t, st := x.t, &x.t.Status
	st.Faults++
	step := st.Step
	x.afterWrite(func() { metrics.FaultRetries.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster, step).Inc() })
	if since, lastErr, ok := r.Probes.Unreachable(t.Spec.Cluster); ok {
		mc := &v1alpha1.MemberCluster{}
		if gerr := r.Client.Get(ctx, client.ObjectKey{Name: t.Spec.Cluster}, mc); gerr == nil || apierrors.IsNotFound(gerr) {
			if timeout := member.UnreachableTimeout(mc); r.now().Sub(since) >= timeout {
				msg := fmt.Sprintf("member %s has been unreachable since %s (longer than its unreachableTimeout %s): %s",
					t.Spec.Cluster, since.UTC().Format(time.RFC3339), timeout, lastErr)
				if t.Spec.UnreachablePolicy == v1alpha1.UnreachablePolicyFail {
					r.fail(x, msg+" (spec.unreachablePolicy Fail)")
					return ctrl.Result{}
				}
				return r.wait(x, v1alpha1.ReasonMemberUnreachable, msg+"; the cluster waits until it answers (spec.unreachablePolicy Hold)", waitPoll)
			}
		}
	}
	backoff := fault.Backoff(int(st.Faults), faultBackoffBase, faultBackoffMax)
	msg := fmt.Sprintf("%s met a fault, retried in %s (fault %d of this step; faults never fail a release): %v",
		step, backoff.Round(100*time.Millisecond), st.Faults, err)
	if st.Faults >= faultsBeforeWaiting {
		// The member answers its probe, but this step keeps meeting faults (a webhook the
		// member's API server cannot call, an overloaded etcd): say so where people look.
		return r.wait(x, v1alpha1.ReasonRepeatedFaults, msg, backoff)
	}
	st.Message = msg
	return r.retryAfter(x, backoff)
}

// retryAfter schedules the current step again after d, rounded up to the second as status
// times are stored (the wait is never shorter).
func (r *Reconciler) retryAfter(x *execution, d time.Duration) ctrl.Result {
	next := metav1.NewTime(r.now().Add(d).Truncate(time.Second).Add(time.Second))
	x.t.Status.NextAttemptAt = &next
	return ctrl.Result{RequeueAfter: next.Sub(r.now())}
}

// wait holds a target on something outside the release (reason: an unreachable member, an
// unavailable snapshot store, repeated faults) without failing it; it tries again after
// retry and goes on by itself once the cause is gone.
func (r *Reconciler) wait(x *execution, reason, msg string, retry time.Duration) ctrl.Result {
	st := &x.t.Status
	if st.WaitingFor != reason {
		now := metav1.NewTime(r.now())
		st.WaitingFor, st.WaitingSince = reason, &now
		x.waitingEvent(msg)
	}
	st.Message = msg
	return r.retryAfter(x, retry)
}

// resumed ends a wait once a step ran again without a fault. A health gate's timeout counts
// from there when the member was unreachable: the release is judged on the time it had.
func (r *Reconciler) resumed(x *execution) {
	st := &x.t.Status
	if st.WaitingFor == "" {
		return
	}
	if st.WaitingFor == v1alpha1.ReasonMemberUnreachable && st.Step == StepHealthGate {
		now := metav1.NewTime(r.now())
		st.StepStartedAt = &now
	}
	x.resumedEvent(st.Step, st.WaitingSince, st.WaitingFor)
	st.WaitingFor, st.WaitingSince = "", nil
}

// finish ends a target whose steps are all done.
func (r *Reconciler) finish(x *execution) {
	t, st := x.t, &x.t.Status
	if Terminal(st.Phase) {
		return
	}
	now := metav1.NewTime(r.now())
	st.FinishedAt, st.NextAttemptAt = &now, nil
	switch {
	case t.Spec.Path == v1alpha1.PathRestore:
		st.Phase = v1alpha1.ClusterRolledBack
		st.Message = fmt.Sprintf("restored to snapshot %s and %s", t.Spec.Snapshot, t.Spec.ToRelease)
		x.afterWrite(func() {
			metrics.Restores.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster, "Succeeded").Inc()
		})
	case t.Spec.Path == v1alpha1.PathNone:
		st.Phase = v1alpha1.ClusterSucceeded
		if st.Message == "" {
			st.Message = fmt.Sprintf("already runs %s", t.Spec.ToRelease)
		}
	default:
		st.Phase = v1alpha1.ClusterSucceeded
		st.Message = fmt.Sprintf("runs %s", t.Spec.ToRelease)
	}
	if st.StartedAt != nil {
		took := now.Sub(st.StartedAt.Time).Seconds()
		x.afterWrite(func() {
			metrics.ClusterDuration.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster, t.Spec.Path).Observe(took)
		})
	}
	x.endedEvent(st.Phase, st.Message)
}

// fail ends a target as Failed.
func (r *Reconciler) fail(x *execution, msg string) {
	t, st := x.t, &x.t.Status
	now := metav1.NewTime(r.now())
	st.Phase, st.Message, st.FinishedAt, st.NextAttemptAt = v1alpha1.ClusterFailed, msg, &now, nil
	st.WaitingFor, st.WaitingSince = "", nil
	if st.Step == StepHealthGate {
		x.afterWrite(func() { metrics.GateFailures.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster).Inc() })
	}
	if t.Spec.Path == v1alpha1.PathRestore {
		x.afterWrite(func() { metrics.Restores.WithLabelValues(t.Namespace, t.Spec.Rollout, t.Spec.Cluster, "Failed").Inc() })
	}
	x.endedEvent(v1alpha1.ClusterFailed, msg)
}

// bake re-checks a Succeeded target's health while its wave bakes (spec.healthyUntil), and a
// last time at or after its end: the Rollout opens the next wave only on that check
// (status.healthCheckedAt >= spec.healthyUntil). A health lost meanwhile fails it.
func (r *Reconciler) bake(ctx context.Context, x *execution) (ctrl.Result, error) {
	t, st := x.t, &x.t.Status
	if st.Phase != v1alpha1.ClusterSucceeded || t.Spec.Path == v1alpha1.PathNone || t.Spec.HealthyUntil == nil {
		return ctrl.Result{}, nil
	}
	now := r.now()
	var last time.Time
	if st.HealthCheckedAt != nil {
		last = st.HealthCheckedAt.Time
	}
	if check, wait := nextBakeCheck(now, last, t.Spec.HealthyUntil.Time, r.gatePoll()); !check {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	cl, err := r.Members.Get(ctx, t.Spec.Cluster)
	if err != nil {
		if fault.IsTransient(err) {
			return ctrl.Result{RequeueAfter: r.gatePoll()}, nil
		}
		return ctrl.Result{}, err
	}
	x.cl = cl
	res, err := x.checkHealth(ctx)
	if err != nil {
		if fault.IsTransient(err) {
			return ctrl.Result{RequeueAfter: r.gatePoll()}, nil // a fault does not fail a bake
		}
		return ctrl.Result{}, err
	}
	checked := metav1.NewTime(now)
	st.HealthCheckedAt = &checked
	if !res.Healthy() {
		st.Step = StepHealthGate
		r.fail(x, "health lost during bake: "+res.Summary())
		return ctrl.Result{}, nil
	}
	_, wait := nextBakeCheck(now, now, t.Spec.HealthyUntil.Time, r.gatePoll())
	return ctrl.Result{RequeueAfter: wait}, nil
}

// execution carries one reconcile of a target.
type execution struct {
	r  *Reconciler
	t  *v1alpha1.RolloutTarget
	h  *patch.Helper
	cl *member.Cluster
	// skipTo, set by a step that succeeds, is the step to go to instead of the next one.
	skipTo string
}

// newExecution starts a reconcile of t, as read.
func (r *Reconciler) newExecution(t *v1alpha1.RolloutTarget) *execution {
	return &execution{r: r, t: t, h: patch.NewHelper(t, r.Client, patch.WithReader(r.APIReader))}
}

// afterWrite holds fn (an Event, a metric) until the status write that records what it
// reports went through: a reconcile run again after a conflict never emits it twice.
func (x *execution) afterWrite(fn func()) { x.h.OnPatched(fn) }

// patch writes the journal if it changed, with the resourceVersion read (optimistic lock:
// a merge patch from a stale read, the cache behind this reconciler's own last write, would
// leave out the fields that read already had), through the one status helper every
// reconciler uses; the Events and metrics of what it records follow it.
func (x *execution) patch(ctx context.Context) error {
	return x.h.Patch(ctx, x.t)
}

// release loads a release of the target's namespace (cached: releases are immutable).
func (x *execution) release(ctx context.Context, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	return x.r.Releases.Load(ctx, x.r.Hub, x.t.Namespace, name)
}

// releaseFor loads a release and the manifests a cluster runs of it: the cluster's own
// rendering (digest, from the Rollout's spec.valuesFrom) when set, else the release's.
func (x *execution) releaseFor(ctx context.Context, name, digest string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	rel, objs, err := x.release(ctx, name)
	if err != nil || digest == "" || digest == release.ManifestDigest(rel) {
		return rel, objs, err
	}
	objs, err = x.r.Releases.Manifests(ctx, x.r.Hub, x.t.Namespace, digest)
	return rel, objs, err
}

// to is the release the target moves to, with the manifests this cluster applies.
func (x *execution) to(ctx context.Context) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	return x.releaseFor(ctx, x.t.Spec.ToRelease, x.t.Spec.Manifests)
}

// from is the release the cluster runs before the change, with its manifests on this cluster.
func (x *execution) from(ctx context.Context) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	return x.releaseFor(ctx, x.t.Spec.FromRelease, x.t.Spec.FromManifests)
}

// manifestDigest is the digest of the manifests this cluster applies of the target release.
func (x *execution) manifestDigest(rel *v1alpha1.OperatorRelease) string {
	if x.t.Spec.Manifests != "" {
		return x.t.Spec.Manifests
	}
	return release.ManifestDigest(rel)
}

func (x *execution) hub() *snapshot.Hub {
	return &snapshot.Hub{Client: client.WithFieldOwner(readThrough{Client: x.r.Client, reader: x.r.Hub}, "rewind"), KeyNamespace: x.r.KeyNamespace}
}

// event records an Event on the target's Rollout (where people look), naming the target.
func (x *execution) event(typ, reason, format string, args ...any) {
	x.afterWrite(func() { x.emit(typ, reason, format, args...) })
}

// note records what a step reports besides its phase: in status.notes (each once, the first
// MaxTargetNotes of the revision; the rest are dropped), and as an Event on the Rollout once
// the status write went through. An agent records no Event (it may not write the Rollout's namespace): the hub
// records its notes when it relays the status (relayEvents), with the same reasons and notes.
func (x *execution) note(typ, reason, format string, args ...any) {
	n := v1alpha1.TargetNote{Type: typ, Reason: reason, Message: eventNote(fmt.Sprintf(format, args...))}
	st := &x.t.Status
	if slices.Contains(st.Notes, n) || len(st.Notes) >= v1alpha1.MaxTargetNotes {
		// The step ran again (a retry, a resumed restore): reported once. Past the bound,
		// neither (as the relay records only the notes written): a step that runs again
		// would report its note each time.
		return
	}
	st.Notes = append(st.Notes, n)
	x.event(n.Type, n.Reason, "%s", n.Message)
}

// newNotes are the notes of want that have does not show yet (have: the status written
// before, of the same plan or not).
func newNotes(have, want *v1alpha1.RolloutTargetStatus) []v1alpha1.TargetNote {
	if have.Revision != want.Revision || have.Path != want.Path {
		return want.Notes
	}
	var out []v1alpha1.TargetNote
	for _, n := range want.Notes {
		if !slices.Contains(have.Notes, n) {
			out = append(out, n)
		}
	}
	return out
}

// eventNote is s cut to what events.k8s.io/v1 takes as a note (1 KiB; a longer one is
// refused, and the Event lost), as status.notes takes it too.
func eventNote(s string) string {
	if len(s) > 1024 {
		return strings.ToValidUTF8(s[:1021], "") + "..."
	}
	return s
}

// The Events of a cluster's phases, recorded alike for a push member (by its steps) and a pull
// member (by the relay, relayEvents): the same reasons and notes.

func (x *execution) startedEvent() {
	t := x.t
	x.event("Normal", "ClusterStarted", "%s: %s %s -> %s", t.Spec.Cluster, t.Spec.Path, dash(t.Spec.FromRelease), t.Spec.ToRelease)
}

func (x *execution) waitingEvent(msg string) {
	x.event("Warning", "ClusterWaiting", "%s: %s", x.t.Spec.Cluster, msg)
}

func (x *execution) resumedEvent(step string, since *metav1.Time, reason string) {
	at := ""
	if since != nil {
		at = since.UTC().Format(time.RFC3339)
	}
	x.event("Normal", "ClusterResumed", "%s: %s goes on after waiting since %s (%s)", x.t.Spec.Cluster, step, at, reason)
}

// endedEvent records a terminal phase (Succeeded, RolledBack, Failed: a Warning).
func (x *execution) endedEvent(phase, msg string) {
	typ := "Normal"
	if phase == v1alpha1.ClusterFailed {
		typ = "Warning"
	}
	x.event(typ, "Cluster"+phase, "%s: %s", x.t.Spec.Cluster, msg)
}

func (x *execution) emit(typ, reason, format string, args ...any) {
	metrics.Transitions.WithLabelValues(reason).Inc()
	if x.r.Recorder == nil {
		return
	}
	ro := &v1alpha1.Rollout{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Rollout"},
		ObjectMeta: metav1.ObjectMeta{Namespace: x.rolloutNamespace(), Name: x.t.Spec.Rollout}}
	for _, o := range x.t.OwnerReferences {
		if o.Kind == "Rollout" && o.Name == x.t.Spec.Rollout {
			ro.UID = o.UID
		}
	}
	note := eventNote(fmt.Sprintf(format, args...))
	x.r.Recorder.Eventf(ro, runtime.Object(x.t), typ, reason, "Reconcile", "%s", note)
}

func dash(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// readThrough reads through the API reader and writes through the manager's client.
type readThrough struct {
	client.Client
	reader client.Reader
}

func (d readThrough) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return d.reader.Get(ctx, key, obj, opts...)
}

func (d readThrough) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return d.reader.List(ctx, list, opts...)
}

// openedFirst enqueues a target as handler.EnqueueRequestForObject does (which already
// lowers the cache's first list and unchanged updates), but with low priority while the target
// is not opened (spec.start false): a revision writes every cluster's target at once and opens
// a wave later; the relay of an opened target (a wave, a rollback) goes before the copies of
// every other cluster's target that the revision's write queued (they are only made ready
// ahead of their wave). A target opened with a new spec (a wave opening, a rollback's
// restore) goes first of all, before the status its executor or a pull member's agent
// reports (which reaches the queue at the default priority, through sourceOf): the cluster
// is told what to do next before the hub records what it did.
type openedFirst struct {
	handler.EnqueueRequestForObject
}

// tellPriority is the priority of a target opened with a new spec (openedFirst). A
// RollbackAll of 1,000 pull members queued each copy to tell behind the relay of the failed
// upgrade's statuses: 640 items deep, 2.2 s waited on average (bench-hub).
const tellPriority = 10

// enqueueByOpening enqueues o with low priority when o is a target not opened, with
// tellPriority when it is one opened with a new spec (fresh: created or a new generation, not
// from the cache's first list), and says whether it did (only into a priority queue).
func enqueueByOpening(o client.Object, fresh bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) bool {
	t, ok := o.(*v1alpha1.RolloutTarget)
	if !ok || t.Spec.Start && !fresh {
		return false
	}
	prio := tellPriority
	if !t.Spec.Start {
		prio = handler.LowPriority
	}
	return addAt(q, prio, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
}

// addAt adds reqs to q with priority prio and says so when q is a priority queue (else it
// adds nothing: the caller enqueues as the handler it wraps does).
func addAt(q workqueue.TypedRateLimitingInterface[reconcile.Request], prio int, reqs ...reconcile.Request) bool {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok || len(reqs) == 0 {
		return false
	}
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(prio)}, reqs...)
	return true
}

func (h *openedFirst) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !enqueueByOpening(e.Object, !e.IsInInitialList, q) {
		h.EnqueueRequestForObject.Create(ctx, e, q)
	}
}

func (h *openedFirst) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if !enqueueByOpening(e.ObjectNew, e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration(), q) {
		h.EnqueueRequestForObject.Update(ctx, e, q)
	}
}

// failurePriority is the priority of a copy's report of a failure (its agent wrote phase
// Failed): the relay puts it on the target before anything else, since the Rollout acts on it
// (a RollbackAll tells every cluster to restore). At 1,000 pull members the failed gate waited
// behind the wave's other reports, 676 deep (bench-hub): the rollback's first write came 8 s
// after the gate failed.
const failurePriority = 20

// copyReports enqueues the target a copy copies (sourceOf) when the copy changes, as
// handler.EnqueueRequestsFromMapFunc does, and a newly reported failure with failurePriority.
type copyReports struct {
	handler.TypedEventHandler[client.Object, reconcile.Request]
}

func newCopyReports() *copyReports {
	return &copyReports{TypedEventHandler: handler.EnqueueRequestsFromMapFunc(sourceOf)}
}

func (h *copyReports) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	old, ok1 := e.ObjectOld.(*v1alpha1.RolloutTarget)
	cur, ok2 := e.ObjectNew.(*v1alpha1.RolloutTarget)
	if ok1 && ok2 && failedNow(&old.Status, &cur.Status) && addAt(q, failurePriority, sourceOf(ctx, cur)...) {
		return
	}
	h.TypedEventHandler.Update(ctx, e, q)
}

// failedNow says whether cur reports a failure that old did not.
func failedNow(old, cur *v1alpha1.RolloutTargetStatus) bool {
	return cur.Phase == v1alpha1.ClusterFailed && (old.Phase != v1alpha1.ClusterFailed || old.Revision != cur.Revision || old.Path != cur.Path)
}

// SetupWithManager registers the reconciler with Workers workers. Only spec changes (a new
// generation) and annotation changes (an approval of inconclusive metrics) trigger a
// reconcile: the target writes its own status.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	workers := r.Workers
	if workers <= 0 {
		workers = 32
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("rollouttarget").
		Watches(&v1alpha1.RolloutTarget{}, &openedFirst{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(fault.ControllerOptions(workers))
	if r.Local == "" {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.RolloutTarget{}, indexCluster, func(o client.Object) []string {
			if t := o.(*v1alpha1.RolloutTarget); !IsCopy(t) {
				return []string{t.Spec.Cluster}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("indexing RolloutTargets by spec.cluster: %w", err)
		}
		// A pull member's target follows its copy's status, and the member's heartbeat.
		b = b.Watches(&v1alpha1.RolloutTarget{}, newCopyReports()).
			Watches(&v1alpha1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.targetsOf),
				builder.WithPredicates(predicate.Funcs{
					CreateFunc: func(e event.CreateEvent) bool {
						return e.Object.(*v1alpha1.MemberCluster).Spec.Mode == v1alpha1.ModePull
					},
					DeleteFunc: func(e event.DeleteEvent) bool {
						return e.Object.(*v1alpha1.MemberCluster).Spec.Mode == v1alpha1.ModePull
					},
					UpdateFunc:  livenessChanged,
					GenericFunc: func(event.GenericEvent) bool { return false },
				})).
			// A pull member's copy of a SnapshotStore follows its source (its Ready condition).
			Watches(&v1alpha1.SnapshotStore{}, handler.EnqueueRequestsFromMapFunc(r.storeUsers))
	}
	if r.Restores != nil {
		// Restores waiting for memory are woken when their turn may have come.
		b = b.WatchesRawSource(source.Channel(r.Restores.Wakeups(), &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}
