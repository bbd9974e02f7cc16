//go:build !unit

package hub

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/agent"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/join"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// durations are the simulated agents' step times.
type durations struct {
	// step is how long each upgrade step takes, by name (a step not named takes nothing).
	step map[string]time.Duration
	// restore is the Restore step's time (its inner points spread over it).
	restore time.Duration
}

// upgrade is one cluster's simulated upgrade time; restorePath its simulated restore path.
func (d durations) upgrade() (sum time.Duration) {
	for _, s := range target.UpgradeSteps {
		sum += d.step[s]
	}
	return sum
}

func (d durations) restorePath() time.Duration {
	return d.restore + d.step[target.StepApplyRelease] + d.step[target.StepHealthGate] + d.step[target.StepRecord]
}

// restorePoints are the inner points a restore journals, in order: the agent in its member,
// reported in status.restoreSteps with the copy's next write.
var restorePoints = []string{restore.StepQuiesce, restore.StepCRDs, restore.StepCRs, restore.StepAssociated, restore.StepCreatedSince, restore.StepResume}

// agents stands in for the agents of every pull member, in this one process with its own
// client of the hub (its QPS budget): it renews each member's Lease on the agent's interval
// and runs each copy of a target the hub relays to a member's namespace as the agent's
// reconciler would, writing the same journal (phase, step, snapshot, restoreSteps, times,
// observedGeneration), only when it changes, with simulated step durations (a restore's inner
// points go to the agent's member, not to the hub: carried with its next write).
type agents struct {
	// as holds each member's client: the agent's own identity (its ServiceAccount in its hub
	// namespace, impersonated over one connection), so the hub's API server authorizes,
	// classifies (priority and fairness: one flow per agent) and counts each agent as it would
	// the real one; all share one rate limiter, the stand-in's QPS.
	as        map[string]client.Client
	cache     cache.Cache
	members   []string
	heartbeat time.Duration
	d         durations
	// failRelease and failCluster: that cluster fails its health gate in that release.
	failRelease, failCluster string

	mu      sync.Mutex
	running map[string]runKey // copy key -> what its runner runs
	leases  map[string]*agent.Heartbeat
	cancel  map[string]context.CancelFunc
	// toldRestore is when each cluster's copy was first seen asking for a started restore,
	// by revision.
	toldRestore map[int32]map[string]time.Time
	// failedAt is when the failing cluster wrote its failed gate.
	failedAt time.Time

	statusWrites, leaseRenewals, writeErrors atomic.Int64
	wg                                       sync.WaitGroup
}

type runKey struct {
	rev   int32
	path  string
	start bool
}

func newAgents(ctx context.Context, hub *rest.Config, qps float32, members []string, hb time.Duration, d durations) (*agents, error) {
	cfg := rest.CopyConfig(hub)
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	cfg.UserAgent = "rewind-bench-agents"
	as, err := agentClients(cfg, members)
	if err != nil {
		return nil, err
	}
	// One watch of every copy (a real agent watches its own namespace).
	req, err := labels.NewRequirement(v1alpha1.LabelSourceNamespace, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	ca, err := cache.New(cfg, cache.Options{Scheme: testenv.HubScheme, ByObject: map[client.Object]cache.ByObject{
		&v1alpha1.RolloutTarget{}: {Label: labels.NewSelector().Add(*req)},
	}})
	if err != nil {
		return nil, err
	}
	a := &agents{as: as, cache: ca, members: members, heartbeat: hb, d: d, running: map[string]runKey{}, leases: map[string]*agent.Heartbeat{}, cancel: map[string]context.CancelFunc{},
		toldRestore: map[int32]map[string]time.Time{}}
	inf, err := ca.GetInformer(ctx, &v1alpha1.RolloutTarget{})
	if err != nil {
		return nil, err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.seen(ctx, o.(*v1alpha1.RolloutTarget)) },
		UpdateFunc: func(_, o any) { a.seen(ctx, o.(*v1alpha1.RolloutTarget)) },
	}); err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the agents' cache did not sync")
	}
	return a, nil
}

// agentClients returns a client per member that acts as its agent's ServiceAccount
// (join.Objects grants it): cfg's connection and credentials (an admin's, allowed to
// impersonate) with the agent's user and groups, over one transport, one rate limiter and one
// REST mapper for all.
func agentClients(cfg *rest.Config, members []string) (map[string]client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	out := make(map[string]client.Client, len(members))
	for _, m := range members {
		id := agentIdentity(m)
		rt := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{UserName: id.UserName, Groups: id.Groups}, hc.Transport)
		c, err := client.New(cfg, client.Options{Scheme: testenv.HubScheme, HTTPClient: &http.Client{Transport: rt, Timeout: hc.Timeout}, Mapper: mapper})
		if err != nil {
			return nil, err
		}
		out[m] = c
	}
	return out, nil
}

// agentIdentity is who member m's agent is to the hub: its ServiceAccount in its hub namespace,
// with the groups the API server gives a ServiceAccount token.
func agentIdentity(m string) rest.ImpersonationConfig {
	ns := v1alpha1.MemberNamespace(m)
	return rest.ImpersonationConfig{UserName: serviceaccount.MakeUsername(ns, join.AgentServiceAccount),
		Groups: []string{serviceaccount.AllServiceAccountsGroup, serviceaccount.MakeNamespaceGroupName(ns), user.AllAuthenticated}}
}

// join does what each agent does when it starts: records its cluster's ID in its
// MemberCluster's status and creates its Lease.
func (a *agents) join(ctx context.Context) error {
	return parallel(ctx, a.members, 32, func(ctx context.Context, m string) error {
		mc := &v1alpha1.MemberCluster{}
		if err := a.as[m].Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			return err
		}
		base := mc.DeepCopy()
		mc.Status.ClusterID, mc.Status.ServerVersion = "sim-"+m, "v1.34.0-sim"
		if err := a.as[m].Status().Patch(ctx, mc, client.MergeFrom(base)); err != nil {
			return err
		}
		return a.renew(ctx, m)
	})
}

// renew renews a member's Lease with the agent's heartbeat code (one write, a read first only
// the first time or after a conflict).
func (a *agents) renew(ctx context.Context, m string) error {
	a.mu.Lock()
	h := a.leases[m]
	if h == nil {
		h = &agent.Heartbeat{Cluster: m, Holder: m + "/sim-" + m, Duration: 4 * a.heartbeat}
		a.leases[m] = h
	}
	a.mu.Unlock()
	err := h.Renew(ctx, a.as[m], time.Now())
	if err == nil {
		a.leaseRenewals.Add(1)
	}
	return err
}

// beat renews every member's Lease once per heartbeat interval, spread evenly over it, until
// ctx ends.
func (a *agents) beat(ctx context.Context) {
	a.wg.Go(func() {
		sem := make(chan struct{}, 32)
		gap := a.heartbeat / time.Duration(len(a.members))
		t := time.NewTicker(max(gap, time.Millisecond))
		defer t.Stop()
		for i := 0; ; i = (i + 1) % len(a.members) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			m := a.members[i]
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			a.wg.Go(func() {
				defer func() { <-sem }()
				if err := a.renew(ctx, m); err != nil && ctx.Err() == nil {
					a.writeErrors.Add(1) // the next beat tries again, as the agent's does
				}
			})
		}
	})
}

// seen reacts to a copy's change: a new revision, path or start runs it anew.
func (a *agents) seen(ctx context.Context, t *v1alpha1.RolloutTarget) {
	if !target.IsCopy(t) || !t.DeletionTimestamp.IsZero() {
		return
	}
	key := t.Namespace + "/" + t.Name
	k := runKey{rev: t.Spec.Revision, path: t.Spec.Path, start: t.Spec.Start}
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.Spec.Path == v1alpha1.PathRestore && t.Spec.Start {
		if a.toldRestore[t.Spec.Revision] == nil {
			a.toldRestore[t.Spec.Revision] = map[string]time.Time{}
		}
		if _, ok := a.toldRestore[t.Spec.Revision][t.Spec.Cluster]; !ok {
			a.toldRestore[t.Spec.Revision][t.Spec.Cluster] = time.Now()
		}
	}
	if a.running[key] == k {
		return
	}
	if cancel := a.cancel[key]; cancel != nil {
		cancel()
	}
	rctx, cancel := context.WithCancel(ctx)
	a.running[key], a.cancel[key] = k, cancel
	cp := t.DeepCopy()
	a.wg.Go(func() { a.run(rctx, cp) })
}

// run walks a copy's journal as the agent's reconciler does: a new plan resets it (Pending),
// a started one runs step by step, each journaled step written before it runs, and the end.
func (a *agents) run(ctx context.Context, t *v1alpha1.RolloutTarget) {
	st := t.Status.DeepCopy()
	if st.Revision != t.Spec.Revision || st.Path != t.Spec.Path {
		st = &v1alpha1.RolloutTargetStatus{Revision: t.Spec.Revision, Path: t.Spec.Path, Phase: v1alpha1.ClusterPending, Metrics: st.Metrics}
	}
	st.ObservedGeneration = t.Generation
	if !t.Spec.Start || target.Terminal(st.Phase) {
		a.write(ctx, t, st)
		return
	}
	now := func() *metav1.Time { n := metav1.NewTime(time.Now()); return &n }
	if st.Phase == v1alpha1.ClusterPending {
		st.Phase, st.Step, st.StartedAt, st.StepStartedAt = v1alpha1.ClusterUpgrading, target.FirstStep(t.Spec.Path), now(), now()
		if t.Spec.Path == v1alpha1.PathRestore {
			st.Phase, st.Snapshot = v1alpha1.ClusterRollingBack, t.Spec.Snapshot
		}
	}
	for st.Step != target.StepDone {
		if target.Journaled(st.Step) && !a.write(ctx, t, st) {
			return
		}
		switch st.Step {
		case target.StepSnapshot:
			if !sleep(ctx, a.d.step[st.Step]) {
				return
			}
			name, err := a.snapshot(ctx, t)
			if err != nil {
				return
			}
			st.Snapshot = name
		case target.StepRestore:
			// The agent journals each point in its member (target.MemberJournalName), not
			// on the hub: they reach the hub with the copy's next write.
			for _, p := range restorePoints {
				if !sleep(ctx, a.d.restore/time.Duration(len(restorePoints))) {
					return
				}
				st.RestoreSteps = append(st.RestoreSteps, p)
			}
		case target.StepHealthGate:
			if a.d.step[st.Step] > 0 {
				// The first check finds the new release not healthy yet (its Deployment rolls):
				// the gate's wait is written, as the agent's healthGate writes it.
				st.Message = "waiting for health: Deployment " + t.Spec.InstallNamespace + "/mysql-operator: not Available (simulated)"
				if !a.write(ctx, t, st) {
					return
				}
			}
			if !sleep(ctx, a.d.step[st.Step]) {
				return
			}
			a.mu.Lock()
			fails := t.Spec.Cluster == a.failCluster && t.Spec.ToRelease == a.failRelease && t.Spec.Path == v1alpha1.PathUpgrade
			a.mu.Unlock()
			if fails {
				st.Phase, st.FinishedAt = v1alpha1.ClusterFailed, now()
				st.Message = fmt.Sprintf("health gate failed after %s: Deployment %s/mysql-operator: not Available (simulated)", a.d.step[st.Step], t.Spec.InstallNamespace)
				if a.write(ctx, t, st) {
					a.mu.Lock()
					a.failedAt = time.Now()
					a.mu.Unlock()
				}
				return
			}
		default:
			if !sleep(ctx, a.d.step[st.Step]) {
				return
			}
		}
		st.Step, st.StepStartedAt, st.Attempt, st.Faults, st.NextAttemptAt, st.Message = target.NextStep(t.Spec.Path, st.Step), now(), 0, 0, nil, ""
	}
	st.FinishedAt = now()
	switch t.Spec.Path {
	case v1alpha1.PathRestore:
		st.Phase, st.Message = v1alpha1.ClusterRolledBack, fmt.Sprintf("restored to snapshot %s and %s", t.Spec.Snapshot, t.Spec.ToRelease)
	case v1alpha1.PathNone:
		st.Phase, st.Message = v1alpha1.ClusterSucceeded, "already runs "+t.Spec.ToRelease
	default:
		st.Phase, st.Message = v1alpha1.ClusterSucceeded, "runs "+t.Spec.ToRelease
	}
	a.write(ctx, t, st)
}

// snapshot records the Snapshot the agent takes in its member's namespace (its payload is
// the member's business: it goes to the store from the member, not through the hub).
func (a *agents) snapshot(ctx context.Context, t *v1alpha1.RolloutTarget) (string, error) {
	name := t.Spec.Snapshot
	if name == "" {
		name = snapshot.GenerateName(t.Spec.Cluster, t.Spec.Operator, time.Now())
	}
	src := t.Labels[v1alpha1.LabelSourceNamespace]
	snap := &v1alpha1.Snapshot{ObjectMeta: metav1.ObjectMeta{Namespace: t.Namespace, Name: name, Labels: map[string]string{
		snapshot.LabelCluster: t.Spec.Cluster, snapshot.LabelOperator: t.Spec.Operator,
		v1alpha1.LabelRollout: t.Spec.Rollout, v1alpha1.LabelRevision: fmt.Sprint(t.Spec.Revision),
	}}, Spec: v1alpha1.SnapshotSpec{Cluster: t.Spec.Cluster, Operator: t.Spec.Operator, Release: t.Spec.FromRelease,
		Reason: fmt.Sprintf("before rollout %s/%s installs %s", src, t.Spec.Rollout, t.Spec.ToRelease), Rollout: src + "/" + t.Spec.Rollout}}
	c := a.as[t.Spec.Cluster]
	err := retry(ctx, func() error { return c.Create(ctx, snap) })
	if apierrors.IsAlreadyExists(err) {
		return name, nil
	}
	if err != nil {
		a.writeErrors.Add(1)
		return "", err
	}
	base := snap.DeepCopy()
	now := metav1.Now()
	snap.Status = v1alpha1.SnapshotStatus{Location: "secrets://" + t.Namespace + "#" + name, CapturedAt: &now, ClusterID: "sim-" + t.Spec.Cluster, Bytes: 64 << 10}
	meta.SetStatusCondition(&snap.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonStored, Message: "simulated capture"})
	if err := retry(ctx, func() error { return c.Status().Patch(ctx, snap, client.MergeFrom(base)) }); err != nil {
		a.writeErrors.Add(1)
		return "", err
	}
	return name, nil
}

// write patches the copy's status to st when it differs from what was last written (false:
// the run is over, the copy changed or went away).
func (a *agents) write(ctx context.Context, t *v1alpha1.RolloutTarget, st *v1alpha1.RolloutTargetStatus) bool {
	if equality.Semantic.DeepEqual(t.Status, *st) {
		return true
	}
	base := t.DeepCopy()
	t.Status = *st.DeepCopy()
	c := a.as[t.Spec.Cluster]
	err := retry(ctx, func() error { return c.Status().Patch(ctx, t, client.MergeFrom(base)) })
	if err != nil {
		if ctx.Err() == nil {
			a.writeErrors.Add(1)
		}
		return false
	}
	a.statusWrites.Add(1)
	return true
}

// retry rides out faults (and the hub's 429s) as the agent's client does.
func retry(ctx context.Context, f func() error) error {
	return wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 5 * time.Second},
		func(context.Context) (bool, error) {
			err := f()
			if err != nil && (fault.IsTransient(err) || apierrors.IsTooManyRequests(err)) {
				return false, nil
			}
			return true, err
		})
}

// sleep waits d (a simulated step's work) unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool { return fault.Sleep(ctx, d) }

// restoreTold returns when each cluster was told to restore in revision rev.
func (a *agents) restoreTold(rev int32) map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]time.Time{}
	for k, v := range a.toldRestore[rev] {
		out[k] = v
	}
	return out
}

// parallel runs f for every item with n at once, returning the first error.
func parallel(ctx context.Context, items []string, n int, f func(context.Context, string) error) error {
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := retry(ctx, func() error { return f(ctx, it) }); err != nil {
				once.Do(func() { first = fmt.Errorf("%s: %w", it, err) })
			}
		})
	}
	wg.Wait()
	return first
}

// toldSince counts the clusters told to restore after t, in any revision.
func (a *agents) toldSince(t time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, m := range a.toldRestore {
		for _, at := range m {
			if at.After(t) {
				n++
			}
		}
	}
	return n
}

// failed returns when the failing cluster wrote its failed gate (zero before).
func (a *agents) failed() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failedAt
}
