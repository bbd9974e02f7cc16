package target

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
)

// A pull member's targets (see docs/architecture.md, "Pull members").
//
// The Rollout writes every cluster's RolloutTarget in its own namespace, push or pull: there
// it plans, opens waves and reads outcomes, and so do the CLI and the dashboard. For a pull
// member the hub's target controller runs no step. It relays: it writes a copy of the target
// (the same spec) in the member's hub namespace, rewind-member-NAME, the one namespace the
// member's agent may read, with copies of what the steps read there (the releases and the
// cluster's renderings the target names); the agent runs the copy with the same step code
// (Reconciler with Local set) against its own API server and writes the copy's status; the
// hub copies that status back to the Rollout's target. A target waits while its agent's
// heartbeat is lost, as one of an unreachable push member does.

// FinalizerMemberCopy is on the target of a pull member while its copy exists: the copy is
// deleted with it (an owner reference cannot cross namespaces).
const FinalizerMemberCopy = "rewind.dev/member-copy"

// IsCopy says whether t is a pull member's copy of a target (in the member's hub namespace).
func IsCopy(t client.Object) bool { return t.GetLabels()[v1alpha1.LabelSourceNamespace] != "" }

// CopyName names the copy of a target in its member's namespace: the Rollout's namespace and
// the target's name, so that the targets of Rollouts of different namespaces never meet.
func CopyName(t *v1alpha1.RolloutTarget) string {
	n := t.Namespace + "." + t.Name
	if len(n) > 253 {
		n = n[:253]
	}
	return n
}

// copySpec is the spec of t's copy: t's, with the snapshot named for the member's namespace,
// where the snapshots of every Rollout that targets the member meet: prefixed with the
// Rollout's namespace (a name the copy's status already gave back keeps its prefix). The
// Secrets its metric gates read are named as their copies are (copyMetricSecrets).
func copySpec(t *v1alpha1.RolloutTarget) v1alpha1.RolloutTargetSpec {
	spec := *t.Spec.DeepCopy()
	spec.Snapshot = MemberSnapshotName(t.Namespace, spec.Snapshot)
	spec.SnapshotStore = MemberSnapshotName(t.Namespace, spec.SnapshotStore)
	for _, ref := range metricSecretRefs(&spec) {
		ref.Name = MemberSnapshotName(t.Namespace, ref.Name)
	}
	return spec
}

// metricSecretRefs are the Secret references of spec's metric gates (their providers'
// credentials, in the Rollout's namespace).
func metricSecretRefs(spec *v1alpha1.RolloutTargetSpec) []*v1alpha1.LocalSecretReference {
	var out []*v1alpha1.LocalSecretReference
	for i := range spec.HealthGates.Metrics {
		switch p := &spec.HealthGates.Metrics[i].Provider; {
		case p.Prometheus != nil && p.Prometheus.SecretRef != nil:
			out = append(out, p.Prometheus.SecretRef)
		case p.Web != nil && p.Web.SecretRef != nil:
			out = append(out, p.Web.SecretRef)
		}
	}
	return out
}

// copyMetricSecrets copies the Secrets t's metric gates read into pull member namespace ns,
// as the copy's spec names them, so that the agent's gate reads its credentials there.
func (r *Reconciler) copyMetricSecrets(ctx context.Context, t *v1alpha1.RolloutTarget, ns string) error {
	var names []string
	for _, ref := range metricSecretRefs(&t.Spec) {
		names = append(names, ref.Name)
	}
	slices.Sort(names)
	return r.copySecrets(ctx, t, t.Namespace, slices.Compact(names), ns, "the metric gates of target "+t.Name)
}

// MemberSnapshotName is the name in a pull member's namespace of the snapshot name that a
// Rollout of namespace ns planned (and of the copies of its SnapshotStore and of that store's
// Secrets).
func MemberSnapshotName(ns, name string) string {
	if name == "" || strings.HasPrefix(name, ns+".") {
		return name
	}
	n := ns + "." + name
	if len(n) > 253 {
		n = n[:253]
	}
	return n
}

// rolloutNamespace is the namespace of the Rollout a target belongs to: a copy's source
// namespace, else its own.
func (x *execution) rolloutNamespace() string {
	if ns := x.t.Labels[v1alpha1.LabelSourceNamespace]; ns != "" {
		return ns
	}
	return x.t.Namespace
}

// pullMember returns t's MemberCluster when it is in mode Pull (nil otherwise, or when it
// does not exist: the step code says so).
func (r *Reconciler) pullMember(ctx context.Context, cluster string) (*v1alpha1.MemberCluster, error) {
	mc := &v1alpha1.MemberCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cluster}, mc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if mc.Spec.Mode != v1alpha1.ModePull {
		return nil, nil
	}
	return mc, nil
}

// +kubebuilder:rbac:groups=rewind.dev,resources=operatorreleases,verbs=create

// dropCopy deletes the copy of t in its member's namespace, and then t's finalizer.
func (r *Reconciler) dropCopy(ctx context.Context, t *v1alpha1.RolloutTarget) error {
	if !controllerutil.ContainsFinalizer(t, FinalizerMemberCopy) {
		return nil
	}
	cp := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace(t.Spec.Cluster), Name: CopyName(t)}}
	if err := r.Client.Delete(ctx, cp); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the copy %s/%s of RolloutTarget %s/%s: %w", cp.Namespace, cp.Name, t.Namespace, t.Name, err)
	}
	r.copied.forget(client.ObjectKeyFromObject(cp))
	r.relayed.forget(client.ObjectKeyFromObject(t))
	base := t.DeepCopy()
	controllerutil.RemoveFinalizer(t, FinalizerMemberCopy)
	return client.IgnoreNotFound(r.Client.Patch(ctx, t, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})))
}

// sourceOf maps a copy to the target it copies.
func sourceOf(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if l[v1alpha1.LabelSourceNamespace] == "" || l[v1alpha1.LabelSourceName] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: l[v1alpha1.LabelSourceNamespace], Name: l[v1alpha1.LabelSourceName]}}}
}

// livenessChanged says whether an update of a MemberCluster matters to its targets: it is or
// was a pull member and its mode or its Reachable condition changed. An agent's status writes
// that change neither (its heartbeat, its inventory) do not wake its targets: at 1,000
// members they would list the fleet's targets many times a second.
func livenessChanged(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*v1alpha1.MemberCluster)
	cur, ok2 := e.ObjectNew.(*v1alpha1.MemberCluster)
	if !ok1 || !ok2 {
		return true
	}
	if old.Spec.Mode != v1alpha1.ModePull && cur.Spec.Mode != v1alpha1.ModePull {
		return false
	}
	if old.Spec.Mode != cur.Spec.Mode {
		return true
	}
	a := meta.FindStatusCondition(old.Status.Conditions, v1alpha1.ConditionReachable)
	b := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReachable)
	if a == nil || b == nil {
		return a != b
	}
	return a.Status != b.Status || a.Reason != b.Reason || !a.LastTransitionTime.Equal(&b.LastTransitionTime)
}

// indexCluster indexes the hub's targets (not the copies) by spec.cluster.
const indexCluster = "rewind.spec.cluster"

// targetsOf maps a pull member to its targets (not their copies), from the cache's index.
func (r *Reconciler) targetsOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.RolloutTargetList
	if err := r.Client.List(ctx, &list, client.MatchingFields{indexCluster: o.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the targets of a pull member", "member", o.GetName())
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, t := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
	}
	return out
}

// relay keeps the copy of t in its pull member's namespace equal to t's spec, and t's status
// equal to the copy's (the agent's), marking it waiting while the agent's heartbeat is lost.
func (r *Reconciler) relay(ctx context.Context, t *v1alpha1.RolloutTarget, mc *v1alpha1.MemberCluster) (ctrl.Result, error) {
	ns := v1alpha1.MemberNamespace(mc.Name)
	key := client.ObjectKey{Namespace: ns, Name: CopyName(t)}
	if !t.DeletionTimestamp.IsZero() {
		return patch.Result(ctx, ctrl.Result{}, nil, r.dropCopy(ctx, t))
	}
	if !controllerutil.ContainsFinalizer(t, FinalizerMemberCopy) {
		base := t.DeepCopy()
		controllerutil.AddFinalizer(t, FinalizerMemberCopy)
		if err := r.Client.Patch(ctx, t, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return patch.Result(ctx, ctrl.Result{}, nil, err) // a conflict: soon again from a fresh read; a fault: with backoff
		}
	}
	cp := &v1alpha1.RolloutTarget{}
	err := r.Client.Get(ctx, key, cp)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.copyInputs(ctx, t, ns); err != nil {
			return ctrl.Result{}, err
		}
		cp = &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{
			v1alpha1.LabelRollout: t.Spec.Rollout, v1alpha1.LabelCluster: t.Spec.Cluster,
			v1alpha1.LabelSourceNamespace: t.Namespace, v1alpha1.LabelSourceName: t.Name,
		}}, Spec: copySpec(t)}
		if err := r.Client.Create(ctx, cp); apierrors.IsAlreadyExists(err) {
			// The cache had not seen the copy yet: soon again, as after a conflict.
			return ctrl.Result{RequeueAfter: patch.ConflictRequeue}, nil
		} else if err != nil {
			return ctrl.Result{}, fmt.Errorf("creating the copy %s of RolloutTarget %s/%s for pull member %s: %w", key, t.Namespace, t.Name, mc.Name, err)
		}
		if items, ok := r.inputItems(ctx, t); ok {
			r.copied.add(cp, items)
		}
	case err != nil:
		return ctrl.Result{}, err
	case !equality.Semantic.DeepEqual(cp.Spec, copySpec(t)):
		if cp.Spec.Revision != t.Spec.Revision || cp.Spec.Path != t.Spec.Path || cp.Spec.SnapshotStore != copySpec(t).SnapshotStore {
			if err := r.copyNewInputs(ctx, t, cp); err != nil {
				return ctrl.Result{}, err
			}
		}
		// The copy's spec is written whole under a test of its generation (patch.Spec), not
		// under the optimistic lock: the agent writes the copy's status all the time, and
		// each of its writes would otherwise refuse this one (a conflict, a read and a write
		// again, at every member of a wave at once). Only the hub writes the copy's spec: a
		// failed test is this relay's own last write, not yet in its cache.
		gen := cp.Generation
		cp.Spec = copySpec(t)
		p, err := patch.Spec(cp, gen)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := r.Client.Patch(ctx, cp, p); err != nil {
			stale, gerr := patch.StaleSpec(ctx, r.reader(), &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, gen, err)
			switch {
			case gerr != nil:
				return ctrl.Result{}, gerr
			case stale:
				return ctrl.Result{RequeueAfter: patch.ConflictRequeue}, nil // soon again, from the cache that has caught up
			}
			return ctrl.Result{}, fmt.Errorf("updating the copy %s of RolloutTarget %s/%s for pull member %s: %w", key, t.Namespace, t.Name, mc.Name, err)
		}
	default:
		// The store's copy follows its source's spec and Ready condition (from the cache).
		if err := r.copyStore(ctx, t, ns, false); err != nil {
			return ctrl.Result{}, err
		}
	}
	want, requeue := r.relayedStatus(t, cp, mc)
	if equality.Semantic.DeepEqual(*want, t.Status) {
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	tkey := client.ObjectKeyFromObject(t)
	if wait := r.relayed.wait(tkey, &t.Status, want, r.now()); wait > 0 {
		if requeue == 0 || wait < requeue {
			requeue = wait
		}
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	x := r.newExecution(t)
	relayEvents(x, &t.Status, want)
	t.Status = *want
	err = x.patch(ctx)
	if err == nil {
		r.relayed.wrote(tkey, r.now())
	}
	return patch.Result(ctx, ctrl.Result{RequeueAfter: requeue}, nil, err)
}

// relayInterval is the least time between two relayed writes of a target's status that only
// record progress (relayedWrites). At 2 s, a pull member's restore (an inner point every few
// seconds) had nearly every point written twice, on its copy and on its target: the phases,
// which are what the Rollout acts on, are written at once anyway, and a reader sees a pull
// member's step at most 5 s late.
const relayInterval = 5 * time.Second

// OnlyProgress says whether a target's update is only progress within a phase that goes on (the
// next step, a restore's inner point, a health check's metrics): nothing the Rollout decides
// or shows reads it (its counts, failures, waits, bake and waves read phases, waits, attempts
// and times of start, end and health), so it wakes neither the Rollout nor its notifications
// (their events are phases, waves and failures). Every cluster's steps woke both before: at
// 1,000 clusters, a reconcile over the whole fleet's targets for each step of each cluster.
// A new plan, a phase, a wait, an attempt, a new health check time and every change but
// status do wake them, as do their own periodic requeues.
func OnlyProgress(e event.UpdateEvent) bool {
	old, ok1 := e.ObjectOld.(*v1alpha1.RolloutTarget)
	cur, ok2 := e.ObjectNew.(*v1alpha1.RolloutTarget)
	if !ok1 || !ok2 {
		return false
	}
	if old.Generation != cur.Generation || !cur.DeletionTimestamp.IsZero() ||
		!equality.Semantic.DeepEqual(old.Labels, cur.Labels) || !equality.Semantic.DeepEqual(old.Annotations, cur.Annotations) ||
		!equality.Semantic.DeepEqual(old.Finalizers, cur.Finalizers) || !equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences) {
		return false
	}
	o, c := &old.Status, &cur.Status
	return progressOnly(o, c) && !Terminal(c.Phase) && c.WaitingFor == "" &&
		o.StartedAt.Equal(c.StartedAt) && o.FinishedAt.Equal(c.FinishedAt) && o.HealthCheckedAt.Equal(c.HealthCheckedAt)
}

// relayedWrites paces the relay's writes of targets' status. A change that matters to the
// Rollout (a new revision or path, a phase, a wait, a new attempt, the spec observed) is
// written at once; one that only records progress within a phase (the next step, a restore's
// inner point, a health check's time) at most every relayInterval per target, the latest at
// the end of it: nothing is lost, but the hub is not written each time an agent journals a
// step. At 1,000 members the agents' steps were most of the hub API server's writes, and
// each one woke the Rollout.
type relayedWrites struct {
	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// progressOnly says whether cur differs from old only by progress within the same phase.
func progressOnly(old, cur *v1alpha1.RolloutTargetStatus) bool {
	return old.Revision == cur.Revision && old.Path == cur.Path && old.Phase == cur.Phase && old.WaitingFor == cur.WaitingFor &&
		old.Attempt == cur.Attempt && old.ObservedGeneration == cur.ObservedGeneration && old.Snapshot == cur.Snapshot
}

// wait is how long the write of want over have waits: 0 to write now. The step at which the
// cluster starts changing (ApplyCRDs, after the snapshot) is written at once too: a RollbackAll
// plans from the targets on the hub, and a cluster they show unchanged gets no restore.
func (w *relayedWrites) wait(key types.NamespacedName, have, want *v1alpha1.RolloutTargetStatus, now time.Time) time.Duration {
	if !progressOnly(have, want) || Changed(want.Path, want.Phase, want.Step) != Changed(have.Path, have.Phase, have.Step) {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.last[key]
	if !ok {
		return 0
	}
	return max(relayInterval-now.Sub(last), 0)
}

func (w *relayedWrites) wrote(key types.NamespacedName, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[types.NamespacedName]time.Time{}
	}
	w.last[key] = at
}

func (w *relayedWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, key)
}

// reader reads from the API server, uncached (APIReader; Client when it is not set).
func (r *Reconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// relayEvents records on the Rollout, once the relayed status is written, what the step code
// records there for a push member, with the same reasons (the agent records no Event: it may
// not write the Rollout's namespace): ClusterStarted, ClusterWaiting and ClusterResumed, and
// the end (ClusterSucceeded, ClusterRolledBack, ClusterFailed), and each of the steps' notes
// the agent wrote in status.notes (KeptSinceSnapshot, RestoreWithoutRelease, MetricsApproved)
// that the target did not show yet: each once. A new plan (Pending) records
// nothing, as for a push member. Before, the relay recorded each new phase under its own name
// (ClusterPending, ClusterUpgrading, ClusterRollingBack): a pull member's start was not a
// ClusterStarted, neither in Events nor in rewind_cluster_phase_transitions_total, and each
// revision planned recorded an Event per cluster.
func relayEvents(x *execution, have, want *v1alpha1.RolloutTargetStatus) {
	if want.Revision != x.t.Spec.Revision || want.Phase == "" || want.Phase == v1alpha1.ClusterPending {
		return
	}
	same := have.Revision == want.Revision && have.Path == want.Path
	if !same || have.Phase == "" || have.Phase == v1alpha1.ClusterPending {
		x.startedEvent()
	}
	switch {
	case want.WaitingFor != "" && (!same || have.WaitingFor != want.WaitingFor):
		x.waitingEvent(want.Message)
	case same && have.WaitingFor != "" && want.WaitingFor == "" && !Terminal(want.Phase):
		x.resumedEvent(want.Step, have.WaitingSince, have.WaitingFor)
	}
	for _, n := range newNotes(have, want) {
		x.event(n.Type, n.Reason, "%s", n.Message)
	}
	if Terminal(want.Phase) && (!same || have.Phase != want.Phase) {
		x.endedEvent(want.Phase, want.Message)
	}
}

// relayedStatus is the status t shows: its copy's, as the agent wrote it (nothing before the
// agent wrote any), waiting while the member's agent is lost. A target the hub ended
// (spec.unreachablePolicy Fail) stays as it is for its revision.
func (r *Reconciler) relayedStatus(t, cp *v1alpha1.RolloutTarget, mc *v1alpha1.MemberCluster) (*v1alpha1.RolloutTargetStatus, time.Duration) {
	want := t.Status.DeepCopy()
	if cp.Status.Revision != 0 && !(Terminal(t.Status.Phase) && t.Status.Revision == t.Spec.Revision &&
		!(cp.Status.Revision == t.Spec.Revision && Terminal(cp.Status.Phase))) {
		want = cp.Status.DeepCopy()
		// The copy's generation is not the target's: the agent saw this target's spec when it
		// saw the copy's current one, and that one equals this target's.
		want.ObservedGeneration = t.Status.ObservedGeneration
		if cp.Status.ObservedGeneration == cp.Generation && equality.Semantic.DeepEqual(cp.Spec, copySpec(t)) {
			want.ObservedGeneration = t.Generation
		}
	}
	if !t.Spec.Start || want.Revision == t.Spec.Revision && Terminal(want.Phase) {
		return want, 0 // not opened (a push target waits so too), or done
	}
	reach := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable)
	if reach == nil || reach.Status == metav1.ConditionTrue {
		return want, 0
	}
	if want.Revision != t.Spec.Revision {
		// The agent has not seen this revision: it waits from its start.
		want = &v1alpha1.RolloutTargetStatus{Revision: t.Spec.Revision, Path: t.Spec.Path, Phase: v1alpha1.ClusterPending, Metrics: want.Metrics}
	}
	since := reach.LastTransitionTime
	msg := fmt.Sprintf("pull member %s's agent is not heard from since %s (%s): %s", t.Spec.Cluster, since.UTC().Format(time.RFC3339), reach.Reason, reach.Message)
	if t.Spec.UnreachablePolicy == v1alpha1.UnreachablePolicyFail {
		now := metav1.NewTime(r.now())
		want.Phase, want.Message, want.FinishedAt, want.NextAttemptAt = v1alpha1.ClusterFailed, msg+" (spec.unreachablePolicy Fail)", &now, nil
		want.WaitingFor, want.WaitingSince = "", nil
		return want, 0
	}
	want.WaitingFor, want.WaitingSince = v1alpha1.ReasonMemberUnreachable, &since
	want.Message = msg + "; the cluster waits until the agent is back (spec.unreachablePolicy Hold)"
	return want, waitPoll
}

// copiedInputs remembers, for each copy (by namespace and name, for the copy of that UID), the
// inputs the relay copied into its member's namespace for it: releases (with their manifests'
// digest) and renderings, all immutable. A copy's next revision copies its inputs only when
// it names one not copied for it before: a RollbackAll returns every cluster to inputs its
// last two revisions brought, and copying them again cost each cluster about ten reads from
// the API server (renderings whole) when the hub's API server has least to spare. It lives in
// memory: after a restart, and for a copy made again (a new UID: its namespace may be new),
// the inputs are copied again, as before.
type copiedInputs struct {
	mu sync.Mutex
	m  map[types.NamespacedName]copiedSet
}

type copiedSet struct {
	uid   types.UID
	items map[string]bool
}

func (c *copiedInputs) add(cp *v1alpha1.RolloutTarget, items []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[types.NamespacedName]copiedSet{}
	}
	k := client.ObjectKeyFromObject(cp)
	set := c.m[k]
	if set.uid != cp.UID || set.items == nil {
		set = copiedSet{uid: cp.UID, items: map[string]bool{}}
	}
	for _, it := range items {
		set.items[it] = true
	}
	c.m[k] = set
}

// has says whether every one of items was copied for cp.
func (c *copiedInputs) has(cp *v1alpha1.RolloutTarget, items []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	set, ok := c.m[client.ObjectKeyFromObject(cp)]
	if !ok || set.uid != cp.UID || cp.UID == "" {
		return false
	}
	for _, it := range items {
		if !set.items[it] {
			return false
		}
	}
	return true
}

func (c *copiedInputs) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// inputItems names the inputs t's steps read in its member's namespace (what copyInputs
// copies but the store), from the cache: each release with its manifests' digest, each
// rendering. ok is false when one cannot be named so (a release not in the cache, or not
// ready): copyInputs then reads and says what is wrong.
func (r *Reconciler) inputItems(ctx context.Context, t *v1alpha1.RolloutTarget) (items []string, ok bool) {
	for _, name := range []string{t.Spec.ToRelease, t.Spec.FromRelease} {
		if name == "" {
			continue
		}
		rel := &v1alpha1.OperatorRelease{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: name}, rel); err != nil || release.CheckReady(rel) != nil {
			return nil, false
		}
		items = append(items, "release "+t.Namespace+"/"+name+" "+release.ManifestDigest(rel))
	}
	for _, digest := range []string{t.Spec.Manifests, t.Spec.FromManifests} {
		if digest != "" {
			items = append(items, "rendering "+t.Namespace+" "+digest)
		}
	}
	return items, true
}

// copyNewInputs copies t's inputs for its copy cp unless every one was copied for cp before
// (copiedInputs); the credentials follow with every revision either way (copyCredentials).
func (r *Reconciler) copyNewInputs(ctx context.Context, t, cp *v1alpha1.RolloutTarget) error {
	items, ok := r.inputItems(ctx, t)
	if ok && r.copied.has(cp, items) {
		return r.copyCredentials(ctx, t, cp.Namespace)
	}
	if err := r.copyInputs(ctx, t, cp.Namespace); err != nil {
		return err
	}
	if ok {
		r.copied.add(cp, items)
	}
	return nil
}

// copyInputs copies into a pull member's namespace what the steps of t read there: the
// releases it names and the cluster's renderings of them (content-addressed artifacts,
// written once), and its credentials. Releases are immutable: a release of the same name already there must be the
// same release (the same manifests).
func (r *Reconciler) copyInputs(ctx context.Context, t *v1alpha1.RolloutTarget, ns string) error {
	w := readThrough{Client: r.Client, reader: r.Hub}
	for _, name := range []string{t.Spec.ToRelease, t.Spec.FromRelease} {
		if name == "" {
			continue
		}
		if err := copyRelease(ctx, w, &r.artifacts, t.Namespace, name, ns); err != nil {
			return err
		}
	}
	for _, digest := range []string{t.Spec.Manifests, t.Spec.FromManifests} {
		if digest == "" {
			continue
		}
		b, err := r.artifacts.Get(ctx, r.Hub, t.Namespace, digest)
		if err != nil {
			return fmt.Errorf("reading the rendering %s of target %s/%s to copy for its pull member: %w", digest, t.Namespace, t.Name, err)
		}
		if _, err := artifact.Put(ctx, w, ns, release.ArtifactKind, b); err != nil {
			return fmt.Errorf("copying the rendering %s of target %s/%s to %s: %w", digest, t.Namespace, t.Name, ns, err)
		}
	}
	return r.copyCredentials(ctx, t, ns)
}

// copyCredentials copies into pull member namespace ns what t's steps read there that can
// change under the same name: its metric gates' Secrets, and the store's copy with its Secrets,
// so that rotated credentials reach the member with the next revision.
func (r *Reconciler) copyCredentials(ctx context.Context, t *v1alpha1.RolloutTarget, ns string) error {
	if err := r.copyMetricSecrets(ctx, t, ns); err != nil {
		return err
	}
	return r.copyStore(ctx, t, ns, true)
}

// copyRelease copies release name of namespace from into namespace to, as an uploaded release
// with the same manifests (a release from spec.source is not fetched again there), read
// through the artifacts cache.
func copyRelease(ctx context.Context, c client.Client, artifacts *artifact.Cache, from, name, to string) error {
	have := &v1alpha1.OperatorRelease{}
	src := &v1alpha1.OperatorRelease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: from, Name: name}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // the step that reads it says so, as it does for a push member
		}
		return err
	}
	if err := release.CheckReady(src); err != nil {
		return err
	}
	err := c.Get(ctx, client.ObjectKey{Namespace: to, Name: name}, have)
	switch {
	case err == nil && release.ManifestDigest(have) == release.ManifestDigest(src) && release.CheckReady(have) == nil:
		return nil
	case err == nil && release.ManifestDigest(have) != release.ManifestDigest(src):
		return reconcile.TerminalError(fmt.Errorf("release %s of namespace %s cannot be copied to pull member namespace %s: a different release %s is there (from namespace %s); releases rolled out to one pull member need names of their own",
			name, from, to, name, have.Labels[v1alpha1.LabelSourceNamespace]))
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	b, err := artifacts.Get(ctx, c, from, release.ManifestDigest(src))
	if err != nil {
		return fmt.Errorf("reading the manifests of release %s/%s to copy: %w", from, name, err)
	}
	cp := &v1alpha1.OperatorRelease{
		ObjectMeta: metav1.ObjectMeta{Namespace: to, Name: name, Labels: map[string]string{v1alpha1.LabelSourceNamespace: from}},
		Spec: v1alpha1.OperatorReleaseSpec{
			Operator: src.Spec.Operator, Version: src.Spec.Version, GitCommit: src.Spec.GitCommit, Image: src.Spec.Image,
			Format: release.FormatOf(src), InstallNamespace: src.Spec.InstallNamespace,
			Chart: release.ChartOf(src), Bundle: release.BundleOf(src), Digest: release.ManifestDigest(src),
		},
	}
	if _, err := release.Create(ctx, c, cp, b); err != nil {
		return fmt.Errorf("copying release %s/%s to %s: %w", from, name, to, err)
	}
	return nil
}
