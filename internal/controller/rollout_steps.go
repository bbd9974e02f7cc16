package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/drift"
	"github.com/rewind-dev/rewind/internal/health"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// conn returns the member's access layer (clients and discovery, cached by credentials).
func (r *RolloutReconciler) conn(ctx context.Context, name string) (*member.Cluster, error) {
	return r.Members.Get(ctx, name)
}

// stepError is a per-cluster step failure. Terminal ones fail the cluster at once.
type stepError struct {
	err      error
	terminal bool
}

func (e *stepError) Error() string { return e.err.Error() }

func terminalf(format string, args ...any) error {
	return &stepError{err: fmt.Errorf(format, args...), terminal: true}
}

// advance runs the current step of one cluster. The step is recorded in status before it
// runs (so a crash resumes it), and each step is idempotent.
func (r *RolloutReconciler) advance(ctx context.Context, s *scope, name string) (time.Duration, error) {
	c := s.cluster(name)
	if c.Step == StepDone {
		return 0, nil
	}
	// A failed attempt waits out its backoff, however often the Rollout is reconciled meanwhile
	// (every status write triggers a reconcile).
	if c.NextAttemptAt != nil {
		if wait := c.NextAttemptAt.Sub(r.now()); wait > 0 {
			return wait, nil
		}
	}
	// Record the step (and a fresh snapshot name) before any long work.
	if c.Step == StepSnapshot && c.Snapshot == "" {
		c.Snapshot = fmt.Sprintf("%s-%s-r%d", s.ro.Name, name, s.ro.Status.Revision)
	}
	if err := s.patch(ctx); err != nil {
		return 0, err
	}
	if r.CrashAt != nil && r.CrashAt(name, c.Step) {
		return 0, ErrCrash
	}
	requeue, err := r.runStep(ctx, s, c)
	if err == nil {
		if requeue > 0 {
			return requeue, nil // still waiting (health gate)
		}
		r.stepDone(s, c)
		return 10 * time.Millisecond, nil
	}
	var se *stepError
	if errors.As(err, &se) && se.terminal {
		r.failCluster(s, c, err.Error())
		return 10 * time.Millisecond, nil
	}
	c.Attempt++
	c.Message = fmt.Sprintf("%s failed (attempt %d of %d): %v", c.Step, c.Attempt, MaxAttempts, err)
	if c.Attempt >= MaxAttempts {
		meta.SetStatusCondition(&s.ro.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonRetriesExhausted, Message: fmt.Sprintf("cluster %s: %s", name, c.Message), ObservedGeneration: s.ro.Generation})
		r.failCluster(s, c, c.Message)
		return 10 * time.Millisecond, nil
	}
	backoff := min(time.Duration(math.Pow(2, float64(c.Attempt)))*500*time.Millisecond, 30*time.Second)
	// Rounded up to the second, as status times are stored: the wait is never shorter.
	next := metav1.NewTime(r.now().Add(backoff).Truncate(time.Second).Add(time.Second))
	c.NextAttemptAt = &next
	return backoff, nil
}

func (r *RolloutReconciler) stepDone(s *scope, c *v1alpha1.ClusterProgress) {
	next := nextStep(c.Path, c.Step)
	now := metav1.NewTime(r.now())
	c.Step, c.StepStartedAt, c.Attempt, c.NextAttemptAt = next, &now, 0, nil
	if next == StepDone {
		c.FinishedAt = &now
		if c.Phase == v1alpha1.ClusterRollingBack {
			c.Phase = v1alpha1.ClusterRolledBack
			c.Message = fmt.Sprintf("restored to snapshot %s and %s", c.Snapshot, c.ToRelease)
		} else {
			c.Phase = v1alpha1.ClusterSucceeded
			if c.Path == v1alpha1.PathNone {
				c.Message = fmt.Sprintf("already runs %s", c.ToRelease)
			} else {
				c.Message = fmt.Sprintf("runs %s", c.ToRelease)
			}
		}
		r.event(s, "Normal", "Cluster"+c.Phase, "%s: %s", c.Cluster, c.Message)
	} else {
		c.Message = ""
	}
}

func (r *RolloutReconciler) failCluster(s *scope, c *v1alpha1.ClusterProgress, msg string) {
	now := metav1.NewTime(r.now())
	c.Phase, c.Message, c.FinishedAt, c.NextAttemptAt = v1alpha1.ClusterFailed, msg, &now, nil
	r.event(s, "Warning", "ClusterFailed", "%s: %s", c.Cluster, msg)
}

// runStep performs one step. A positive duration means "not done yet, check again then".
func (r *RolloutReconciler) runStep(ctx context.Context, s *scope, c *v1alpha1.ClusterProgress) (time.Duration, error) {
	mc, err := r.conn(ctx, c.Cluster)
	if err != nil {
		var se *member.SecretError
		if errors.As(err, &se) {
			return 0, terminalf("%s", se.Message)
		}
		return 0, err
	}
	ns := s.ro.Spec.InstallNamespace
	switch c.Step {
	case StepPrecheck:
		return 0, r.precheck(ctx, s, c, mc)
	case StepSnapshot:
		return 0, r.takeSnapshot(ctx, s, c, mc)
	case StepApplyCRDs, StepApplyRBAC, StepApplyConfig, StepApplyWebhooks, StepApplyWorkloads, StepApplyOthers:
		_, err := apply.Objects(ctx, mc, s.objs, apply.Options{Namespace: ns, Stages: stagesOf[c.Step]})
		if err != nil {
			return 0, unreachableAsTerminal(err, mc)
		}
		return 0, nil
	case StepApplyRelease:
		_, err := apply.Objects(ctx, mc, s.objs, apply.Options{Namespace: ns})
		return 0, unreachableAsTerminal(err, mc)
	case StepHealthGate:
		res, err := r.checkHealth(ctx, s, c.Cluster)
		if err != nil {
			return 0, unreachableAsTerminal(err, mc)
		}
		if res.Healthy() {
			return 0, nil
		}
		timeout := 5 * time.Minute
		if t := s.ro.Spec.HealthGates.Timeout; t != nil {
			timeout = t.Duration
		}
		c.Message = "waiting for health: " + res.Summary()
		if c.StepStartedAt != nil && r.now().Sub(c.StepStartedAt.Time) > timeout {
			return 0, terminalf("health gate failed after %s: %s", timeout, res.Summary())
		}
		poll := r.GatePoll
		if poll == 0 {
			poll = 2 * time.Second
		}
		return poll, nil
	case StepRecord:
		return 0, member.WriteRecord(ctx, mc.Client, member.Record{
			Operator: s.ro.Spec.Operator, Release: s.rel.Name, Version: s.rel.Spec.Version, Namespace: ns,
			Image: s.rel.Spec.Image, GitCommit: s.rel.Spec.GitCommit, Digest: s.rel.Spec.Digest,
			ChartVersion: chartVersion(s.rel), BundleVersion: bundleVersion(s.rel),
			Rollout: s.ro.Namespace + "/" + s.ro.Name, Snapshot: c.Snapshot,
		})
	case StepRestore:
		return 0, r.restoreCluster(ctx, s, c, mc)
	}
	return 0, fmt.Errorf("unknown step %q", c.Step)
}

// stagesOf are the apply stages of each apply step.
var stagesOf = map[string][]apply.Stage{
	StepApplyCRDs:      {apply.StageCRDs},
	StepApplyRBAC:      {apply.StageNamespaces, apply.StageRBAC},
	StepApplyConfig:    {apply.StageConfig},
	StepApplyWebhooks:  {apply.StageWebhooks},
	StepApplyWorkloads: {apply.StageWorkloads},
	StepApplyOthers:    {apply.StageOthers},
}

// unreachableAsTerminal fails a cluster at once when its API server cannot be reached.
func unreachableAsTerminal(err error, mc *member.Cluster) error {
	if err == nil {
		return nil
	}
	if member.IsUnreachable(err) {
		return terminalf("member API server %s is unreachable: %v", mc.Host(), err)
	}
	return err
}

func chartVersion(rel *v1alpha1.OperatorRelease) string {
	if rel.Spec.Chart != nil {
		return rel.Spec.Chart.Version
	}
	return ""
}

func bundleVersion(rel *v1alpha1.OperatorRelease) string {
	if rel.Spec.Bundle != nil {
		return rel.Spec.Bundle.OperatorVersion
	}
	return ""
}

// precheck: reachable, installed record says the previous release (or nothing on a first
// install) or already the desired one, and no drift.
func (r *RolloutReconciler) precheck(ctx context.Context, s *scope, c *v1alpha1.ClusterProgress, mc *member.Cluster) error {
	// Every kind of the release must be served by the member, or defined by the release's
	// own CRDs: otherwise the apply would stop half-way.
	if _, err := mc.Scoped(s.objs, s.ro.Spec.InstallNamespace); err != nil {
		var kinds *member.KindsNotServedError
		if errors.As(err, &kinds) {
			return terminalf("precheck: release %s: %v", s.rel.Name, err)
		}
		return unreachableAsTerminal(err, mc)
	}
	rec, err := member.ReadRecord(ctx, mc.Client, s.ro.Spec.Operator)
	if err != nil {
		return unreachableAsTerminal(err, mc)
	}
	if rec != nil && rec.Release == s.ro.Spec.Release {
		// Already there: nothing to change (idempotent re-run of a finished upgrade).
		if d, err := r.driftAgainst(ctx, s, mc, rec); err == nil && len(d) == 0 {
			c.Path, c.Step = v1alpha1.PathNone, StepRecord
			return nil
		}
	}
	want := c.FromRelease
	switch {
	case rec == nil && want != "":
		return terminalf("precheck: no installed-version record, but the previous release is %s", want)
	case rec != nil && rec.Release != want:
		if want == "" {
			return terminalf("precheck: the cluster runs %s (record %s/%s), but this rollout has not installed anything yet; roll out from %s or remove the record", rec.Release, member.RecordNamespace, member.RecordName(s.ro.Spec.Operator), rec.Release)
		}
		return terminalf("precheck: the cluster runs %s, expected %s", rec.Release, want)
	}
	if rec != nil {
		d, err := r.driftAgainst(ctx, s, mc, rec)
		if err != nil {
			return err
		}
		if len(d) > 0 {
			return terminalf("precheck: drift from %s: %v", rec.Release, d)
		}
	}
	return nil
}

func (r *RolloutReconciler) driftAgainst(ctx context.Context, s *scope, mc *member.Cluster, rec *member.Record) ([]string, error) {
	rel, objs, err := release.Load(ctx, r.APIReader, s.ro.Namespace, rec.Release)
	if err != nil {
		return nil, err
	}
	return drift.Check(ctx, mc.Client, rec, rel, objs)
}

func (r *RolloutReconciler) hub() *snapshot.Hub {
	return &snapshot.Hub{Client: r.direct()}
}

// direct is a hub client that reads straight from the API server (snapshots, Secrets).
func (r *RolloutReconciler) direct() client.Client {
	return client.WithFieldOwner(directClient{Client: r.Client, reader: r.APIReader}, "rewind")
}

// directClient reads through the API reader and writes through the manager's client.
type directClient struct {
	client.Client
	reader client.Reader
}

func (d directClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return d.reader.Get(ctx, key, obj, opts...)
}

func (d directClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return d.reader.List(ctx, list, opts...)
}

// takeSnapshot captures the cluster under the previous release (idempotent by name).
func (r *RolloutReconciler) takeSnapshot(ctx context.Context, s *scope, c *v1alpha1.ClusterProgress, mc *member.Cluster) error {
	opts := snapshot.Options{Operator: s.ro.Spec.Operator, Namespace: s.ro.Spec.InstallNamespace}
	if c.FromRelease != "" {
		rel, objs, err := release.Load(ctx, r.APIReader, s.ro.Namespace, c.FromRelease)
		if err != nil {
			return err
		}
		opts.Release, opts.Version, opts.Manifests = rel.Name, rel.Spec.Version, objs
	} else {
		// First install: capture what the new release would touch (usually nothing yet).
		opts.Manifests = s.objs
	}
	retention := int(s.ro.Spec.SnapshotRetention)
	snap, err := r.hub().Take(ctx, mc, snapshot.Request{
		Name: c.Snapshot, Namespace: s.ro.Namespace, Cluster: c.Cluster, Rollout: s.ro.Namespace + "/" + s.ro.Name,
		Reason: fmt.Sprintf("before rollout %s/%s installs %s", s.ro.Namespace, s.ro.Name, s.ro.Spec.Release), Retention: retention,
		Capture: opts,
	})
	if err != nil {
		return unreachableAsTerminal(err, mc)
	}
	snapshotBytes.WithLabelValues(c.Cluster).Set(float64(snap.Status.Bytes))
	snapshotObjects.WithLabelValues(c.Cluster).Set(float64(snap.Status.Counts.CustomResources + snap.Status.Counts.Associated + snap.Status.Counts.CRDs))
	if rev := s.revision(); rev != nil {
		recordSnapshot(rev, c.Cluster, snap.Name)
	}
	return nil
}

// restoreCluster returns the cluster to its snapshot; the restore's journal lives in the
// cluster's status (restoreSteps), patched after every restore step.
func (r *RolloutReconciler) restoreCluster(ctx context.Context, s *scope, c *v1alpha1.ClusterProgress, mc *member.Cluster) error {
	snap := &v1alpha1.Snapshot{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.ro.Namespace, Name: c.Snapshot}, snap); err != nil {
		return terminalf("snapshot %s to restore: %v", c.Snapshot, err)
	}
	hdr, entries, err := r.hub().Load(ctx, snap)
	if err != nil {
		return terminalf("snapshot %s cannot be restored: %v", c.Snapshot, err)
	}
	// The release installed now (being rolled back from; the record may still name an
	// earlier one if the change failed before its Record step): its Deployments are quiesced.
	var current []*unstructured.Unstructured
	if rec, err := member.ReadRecord(ctx, mc.Client, s.ro.Spec.Operator); err == nil && rec != nil && rec.Release != c.ToRelease {
		if _, objs, err := release.Load(ctx, r.APIReader, s.ro.Namespace, rec.Release); err == nil {
			current = objs
		}
	}
	if from := c.FromRelease; from != "" && from != c.ToRelease {
		if _, objs, err := release.Load(ctx, r.APIReader, s.ro.Namespace, from); err == nil {
			current = append(current, objs...)
		}
	}
	start := time.Now()
	_, err = restore.Run(ctx, mc, restore.Options{
		Header: hdr, Entries: entries, Current: current, Prune: s.ro.Spec.PruneOnRollback,
		Journal: &statusJournal{s: s, c: c.Cluster},
	})
	restoreDuration.Observe(time.Since(start).Seconds())
	return unreachableAsTerminal(err, mc)
}

// statusJournal keeps a restore's journal in the cluster's Rollout status.
type statusJournal struct {
	s *scope
	c string
}

func (j *statusJournal) Completed(context.Context) ([]string, error) {
	return slices.Clone(j.s.cluster(j.c).RestoreSteps), nil
}

func (j *statusJournal) Complete(ctx context.Context, step string) error {
	c := j.s.cluster(j.c)
	c.RestoreSteps = append(c.RestoreSteps, step)
	return j.s.patch(ctx)
}

// checkHealth evaluates the gates once on a cluster.
func (r *RolloutReconciler) checkHealth(ctx context.Context, s *scope, cluster string) (health.Result, error) {
	mc, err := r.conn(ctx, cluster)
	if err != nil {
		return health.Result{}, err
	}
	return health.Check(ctx, mc, health.Target{
		Applied: s.objs, Namespace: s.ro.Spec.InstallNamespace, OperatorImage: s.rel.Spec.Image, CRDs: s.rel.Status.CRDs,
		SkipCustomResources: s.ro.Spec.HealthGates.SkipCustomResources, CEL: s.ro.Spec.HealthGates.CEL,
	})
}
