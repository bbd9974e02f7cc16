// Package agent is `rewind agent`, the side of a pull member that runs in the member: it joins
// the hub with its bootstrap token (internal/join), keeps its hub credential renewed, claims
// its MemberCluster for this cluster (its kube-system UID) and heartbeats with a Lease in its
// hub namespace, from which the hub tells whether the member is alive. It runs its member's
// RolloutTargets (work.go): the copies the hub writes in its hub namespace, with the same step
// code as the hub runs for push members, against the member's own API server.
package agent

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/join"
)

// Defaults of the heartbeat: a renewal every 60 s, as OCM's klusterlet and KubeFleet's member
// agent renew, three within a member's default unreachableTimeout (3m); a beat that fails is
// tried again within seconds (nextBeat), so one lost beat does not cost an interval. At 1,000
// members that is 17 Lease writes a second on the hub (33 at the 30 s of before, 100 at 10 s):
// the hub API server's main load between rollouts.
const (
	DefaultHeartbeatInterval = 60 * time.Second
	DefaultLeaseDuration     = 2 * time.Minute
)

// beatRetry is how soon a heartbeat that failed is tried again, doubled at each failure in a
// row up to the interval.
const beatRetry = 5 * time.Second

// nextBeat is the wait before the next heartbeat, after failures beats that failed in a row.
func nextBeat(interval time.Duration, failures int) time.Duration {
	if failures <= 0 {
		return interval
	}
	return min(beatRetry<<min(failures-1, 16), interval)
}

// Options of Run.
type Options struct {
	// Cluster is the member's name in the hub.
	Cluster string
	// Bootstrap is the hub with the bootstrap token of `rewind clusters join` (nil: a stored
	// credential is needed).
	Bootstrap *rest.Config
	// Credentials keeps the agent's hub credential.
	Credentials CredentialFile
	// Member is the member's own API server.
	Member *rest.Config
	// CredentialTTL is the lifetime asked for the credential (default join.DefaultCredentialTTL).
	CredentialTTL time.Duration
	// HeartbeatInterval is how often the Lease is renewed; LeaseDuration how long it says it
	// lasts (defaults above).
	HeartbeatInterval, LeaseDuration time.Duration
	// Now is the clock (tests move it to make a credential due for renewal).
	Now func() time.Time
	// Workers is how many targets run at once (default 32: the hub's default); GatePoll how
	// often an unhealthy cluster is re-checked (default 2s); RestoreMemory bounds the snapshot
	// content restores hold in memory (0: unbounded).
	Workers       int
	GatePoll      time.Duration
	RestoreMemory int64
	// MetricsAddr serves the agent's metrics ("" or "0": off).
	MetricsAddr string
	// NoWork runs the heartbeat only, no targets (tests of joining).
	NoWork bool
	// CacheSyncTimeout bounds the wait of the work's controller for its cache at start (0:
	// controller-runtime's default, 2 minutes; tests shorten it).
	CacheSyncTimeout time.Duration
}

// ClaimError says that the MemberCluster already belongs to another cluster.
type ClaimError struct{ Cluster, Claimed, This string }

func (e *ClaimError) Error() string {
	return fmt.Sprintf("member %s is the cluster with ID %s (the UID of its kube-system namespace), and this cluster's ID is %s: another cluster joined under this name; join this one under its own name (rewind clusters join NAME)",
		e.Cluster, e.Claimed, e.This)
}

type agent struct {
	o    Options
	hub  *rest.Config // the hub's server and CA
	cred *join.Credential
	c    client.Client // the hub, with cred
	// token is cred's token, for the clients of the work (work.go).
	token atomic.Pointer[string]
	id    string // this cluster's ID
	// lease renews the agent's Lease.
	lease Heartbeat
}

// Run joins (or, with a stored credential, rejoins) the hub and heartbeats until ctx ends, the
// hub refuses the agent's credential (a *join.RefusedError: the member left, or the credential
// expired) or the MemberCluster belongs to another cluster (*ClaimError). Faults of the way to
// the hub or the member are retried.
func Run(ctx context.Context, o Options) error {
	log := ctrl.LoggerFrom(ctx).WithValues("cluster", o.Cluster)
	if err := join.ValidateName(o.Cluster); err != nil {
		return err
	}
	id, version, err := identify(ctx, o.Member)
	if err != nil {
		return err
	}
	dur := o.LeaseDuration
	if dur <= 0 {
		dur = DefaultLeaseDuration
	}
	a := &agent{o: o, id: id, lease: Heartbeat{Cluster: o.Cluster, Holder: o.Cluster + "/" + id, Duration: dur}}
	cred, hub, err := o.Credentials.Load()
	if err != nil {
		return err
	}
	joined := cred == nil || !a.now().Before(cred.ExpiresAt)
	if joined {
		if o.Bootstrap == nil {
			return fmt.Errorf("no usable credential in --credential-file %s and no --bootstrap-kubeconfig: run `rewind clusters join %s` on the hub and pass the file it writes",
				o.Credentials.Path, o.Cluster)
		}
		err = a.join(ctx)
	} else {
		a.hub = hub
		err = a.use(cred)
	}
	if err != nil {
		return err
	}
	err = a.claim(ctx, version)
	var re *join.RefusedError
	if errors.As(err, &re) && re.Reason == join.RefusedCredential && !joined && o.Bootstrap != nil {
		// The stored credential was revoked (the member left and joined again, or its
		// agent ServiceAccount was made anew): the bootstrap token of the new join stands
		// in for it, as OCM's klusterlet falls back to its bootstrap kubeconfig. Before, the
		// agent stopped on the stored credential however often it was restarted with a new
		// token, until a person removed the file.
		log.Info("the hub refused the stored credential, joining again with the bootstrap token", "error", err.Error())
		if jerr := a.join(ctx); jerr != nil {
			return fmt.Errorf("%w; and the bootstrap token of --bootstrap-kubeconfig: %v", err, jerr)
		}
		err = a.claim(ctx, version)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workDone := make(chan error, 1)
	if o.NoWork {
		workDone <- nil
	} else {
		go func() { workDone <- a.workOn(ctx) }()
	}
	defer func() {
		cancel()
		if workDone != nil {
			<-workDone
		}
	}()
	interval := o.HeartbeatInterval
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	failures := 0
	for {
		err := a.heartbeat(ctx)
		if err == nil {
			err = a.renewIfDue(ctx)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case join.IsRefused(err):
			return err
		case err != nil:
			// A fault (or a hub that answers oddly): tried again soon (nextBeat); the hub
			// marks the member Unknown only when the Lease is not renewed for its grace period.
			failures++
			log.Info("heartbeat failed, trying again", "error", err.Error(), "in", nextBeat(interval, failures).String())
		default:
			failures = 0
		}
		t.Reset(nextBeat(interval, failures)) // the interval, or sooner after a failure
		select {
		case <-ctx.Done():
			return nil
		case err := <-workDone:
			workDone = nil // it ended: the heartbeat goes on only if it ended without work
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("running the member's targets: %w", err)
			}
		case <-t.C:
		}
	}
}

// join trades the bootstrap token for the agent's credential, stored as soon as the token is
// spent (a fault or a crash after that loses nothing, a restarted agent goes on with it), and
// talks to the hub with it from then on.
func (a *agent) join(ctx context.Context) error {
	if err := a.o.Credentials.CanSave(a.o.Bootstrap); err != nil {
		return err // the token not spent: a fixed path joins with it
	}
	keep := func(c *join.Credential) error { return a.o.Credentials.Save(a.o.Bootstrap, c) }
	cred, err := join.Exchange(ctx, a.o.Bootstrap, a.o.Cluster, a.o.CredentialTTL, keep)
	if err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("joined the hub", "cluster", a.o.Cluster, "credentialExpiresAt", cred.ExpiresAt)
	a.hub = a.o.Bootstrap
	return a.use(cred)
}

func (a *agent) now() time.Time {
	if a.o.Now != nil {
		return a.o.Now()
	}
	return time.Now()
}

// use makes cred the credential the agent talks to the hub with.
func (a *agent) use(cred *join.Credential) error {
	c, err := client.New(cred.Config(a.hub), client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	a.cred, a.c = cred, c
	token := cred.Token
	a.token.Store(&token)
	return nil
}

// renewIfDue renews the credential at join.RenewFraction of its lifetime and stores it.
func (a *agent) renewIfDue(ctx context.Context) error {
	if a.now().Before(a.cred.RenewAt()) {
		return nil
	}
	cred, err := join.Renew(ctx, a.cred.Config(a.hub), a.o.Cluster, a.o.CredentialTTL)
	if err != nil {
		return err
	}
	if err := a.o.Credentials.Save(a.hub, cred); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("renewed the hub credential", "cluster", a.o.Cluster, "credentialExpiresAt", cred.ExpiresAt)
	return a.use(cred)
}

// claim records this cluster's ID and version in the MemberCluster's status, unless another
// cluster's ID is there. Faults are retried until ctx ends: the agent has nothing to do before
// its hub answers (five tries, before, let a hub away for 3 s at the agent's start stop it).
func (a *agent) claim(ctx context.Context, version string) error {
	mc := &v1alpha1.MemberCluster{}
	if err := fault.RetryLogged(ctx, 0, "reading MemberCluster "+a.o.Cluster, func() error { return a.c.Get(ctx, client.ObjectKey{Name: a.o.Cluster}, mc) }); err != nil {
		return join.CredentialRefused(a.o.Cluster, fmt.Errorf("reading MemberCluster %s: %w", a.o.Cluster, err))
	}
	if mc.Status.ClusterID != "" && mc.Status.ClusterID != a.id {
		return &ClaimError{Cluster: a.o.Cluster, Claimed: mc.Status.ClusterID, This: a.id}
	}
	base := mc.DeepCopy()
	mc.Status.ClusterID, mc.Status.ServerVersion = a.id, version
	err := fault.RetryLogged(ctx, 0, "writing the status of MemberCluster "+a.o.Cluster, func() error { return a.c.Status().Patch(ctx, mc, client.MergeFrom(base)) })
	if err != nil {
		return join.CredentialRefused(a.o.Cluster, fmt.Errorf("writing the status of MemberCluster %s: %w", a.o.Cluster, err))
	}
	return nil
}

// heartbeat renews the agent's Lease in its hub namespace (creating it the first time).
func (a *agent) heartbeat(ctx context.Context) error {
	if err := a.lease.Renew(ctx, a.c, a.now()); err != nil {
		return join.CredentialRefused(a.o.Cluster, err)
	}
	return nil
}

// Heartbeat renews a pull member's agent Lease (join.AgentLease in the member's hub
// namespace), creating it the first time. It remembers the Lease as it last wrote it, so a
// renewal is one write under that resourceVersion; the Lease is read again only when it
// changed since (a conflict) or is gone. Reading it before every renewal was, at 1,000
// members, 33 requests a second on the hub. Renew is not safe for concurrent use.
type Heartbeat struct {
	// Cluster is the member, Holder the Lease's holderIdentity, Duration its
	// leaseDurationSeconds.
	Cluster, Holder string
	Duration        time.Duration
	last            *coordinationv1.Lease
}

// Renew renews the Lease at now with c (the agent's client of the hub).
func (h *Heartbeat) Renew(ctx context.Context, c client.Client, now time.Time) error {
	at := metav1.NewMicroTime(now)
	dur := ptr(int32(h.Duration.Seconds()))
	key := client.ObjectKey{Namespace: v1alpha1.MemberNamespace(h.Cluster), Name: join.AgentLease}
	if h.last != nil {
		lease := h.last.DeepCopy()
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &h.Holder, dur, &at
		err := c.Update(ctx, lease)
		if err == nil {
			h.last = lease
			return nil
		}
		h.last = nil
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renewing Lease %s: %w", key, err)
		}
		// Changed or removed since (a person, the hub's cleanup): read it again.
	}
	lease := &coordinationv1.Lease{}
	err := c.Get(ctx, key, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &h.Holder, LeaseDurationSeconds: dur, AcquireTime: &at, RenewTime: &at}}
		err = c.Create(ctx, lease)
	case err == nil:
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &h.Holder, dur, &at
		err = c.Update(ctx, lease)
	}
	if err != nil {
		return fmt.Errorf("renewing Lease %s: %w", key, err)
	}
	h.last = lease
	return nil
}

// identify reads the member's cluster ID (its kube-system namespace's UID) and version.
func identify(ctx context.Context, member *rest.Config) (id, version string, err error) {
	c, err := client.New(member, client.Options{Scheme: scheme})
	if err != nil {
		return "", "", fmt.Errorf("the member's API server: %w", err)
	}
	ns := &corev1.Namespace{}
	if err := fault.RetryLogged(ctx, 0, "reading the member's kube-system namespace", func() error { return c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns) }); err != nil {
		return "", "", fmt.Errorf("reading the member's kube-system namespace (its cluster ID): %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(member)
	if err != nil {
		return "", "", err
	}
	var v string
	err = fault.RetryLogged(ctx, 0, "reading the member's version", func() error {
		info, err := dc.ServerVersion()
		if err == nil {
			v = info.GitVersion
		}
		return err
	})
	if err != nil {
		return "", "", fmt.Errorf("reading the member's version: %w", err)
	}
	return string(ns.UID), v, nil
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}()

func ptr[T any](v T) *T { return &v }
