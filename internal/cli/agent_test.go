//go:build !unit

package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/agent"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/join"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// runAgent runs an agent until the returned stop is called, which returns what Run returned;
// finished is closed when Run returns by itself.
func runAgent(t *testing.T, o agent.Options) (stop func() error, finished <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fin := make(chan struct{})
	var res error
	go func() { res = agent.Run(ctx, o); close(fin) }()
	stop = func() error {
		cancel()
		<-fin
		return res
	}
	t.Cleanup(func() { _ = stop() })
	return stop, fin
}

func poll(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("%s did not happen: %v", what, err)
	}
}

// TestAgentJoinsRenewsAndHeartbeats: the agent trades its bootstrap token, claims its
// MemberCluster for its cluster, heartbeats through its Lease, renews its credential when it
// is due, goes on after a restart without the bootstrap token, refuses to act as a member
// another cluster claimed, and stops when the member leaves.
func TestAgentJoinsRenewsAndHeartbeats(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	const name = "agent-edge-a"
	boot := joinMember(t, name)
	credFile := filepath.Join(t.TempDir(), "credential.json")
	var skew atomic.Int64 // the agent's clock runs ahead by this much
	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: credFile},
		Member: env.Members[0].RESTConfig(), CredentialTTL: time.Hour, HeartbeatInterval: 100 * time.Millisecond,
		Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	stop, _ := runAgent(t, o)

	kubeSystem := &corev1.Namespace{}
	if err := memberClient(t, env.Members[0]).Get(ctx, client.ObjectKey{Name: "kube-system"}, kubeSystem); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace(name), Name: join.AgentLease}
	poll(t, "the agent's Lease", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, leaseKey, lease) == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == name+"/"+string(kubeSystem.UID), nil
	})
	mc := getMember(t, name)
	if mc.Status.ClusterID != string(kubeSystem.UID) || mc.Status.ServerVersion == "" || mc.Status.Agent.JoinedAt == nil {
		t.Fatalf("after the agent joined: cluster ID %q (want %q), version %q, status.agent %+v", mc.Status.ClusterID, kubeSystem.UID, mc.Status.ServerVersion, mc.Status.Agent)
	}
	fi, err := os.Stat(credFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v, mode %v", err, fi.Mode())
	}
	first, _, err := o.Credentials.Load()
	if err != nil || first == nil {
		t.Fatalf("stored credential: %v", err)
	}

	// Renewal at 80% of the lifetime: move the agent's clock past it.
	skew.Store(int64(50 * time.Minute))
	var renewed *join.Credential
	poll(t, "the credential's renewal", func(context.Context) (bool, error) {
		renewed, _, err = o.Credentials.Load()
		return err == nil && renewed != nil && renewed.Token != first.Token, nil
	})
	poll(t, "the renewed credential's expiry on the MemberCluster", func(ctx context.Context) (bool, error) {
		mc := &v1alpha1.MemberCluster{}
		return c.Get(ctx, client.ObjectKey{Name: name}, mc) == nil &&
			mc.Status.Agent.CredentialExpiresAt.Time.Equal(renewed.ExpiresAt.Truncate(time.Second)), nil
	})
	if err := stop(); err != nil {
		t.Fatalf("the agent stopped with %v", err)
	}

	// A restart needs no bootstrap token (it was spent): the stored credential goes on.
	skew.Store(0)
	o.Bootstrap = nil
	if err := c.Get(ctx, leaseKey, lease); err != nil {
		t.Fatal(err)
	}
	before := lease.ResourceVersion
	stop, finished := runAgent(t, o)
	poll(t, "a heartbeat after the restart", func(ctx context.Context) (bool, error) {
		return c.Get(ctx, leaseKey, lease) == nil && lease.ResourceVersion != before, nil
	})

	// Another cluster with this member's credential cannot act as this member.
	other := o
	other.Member = env.Members[1].RESTConfig()
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var claim *agent.ClaimError
	if err := agent.Run(octx, other); !errors.As(err, &claim) {
		t.Fatalf("an agent of another cluster under name %s: want a ClaimError, got %v", name, err)
	}

	// Leave: the agent is refused and stops.
	if out, err := run(ctx, "clusters", "leave", name, "--kubeconfig", env.Hub.Kubeconfig); err != nil {
		t.Fatalf("clusters leave: %v\n%s", err, out)
	}
	select {
	case <-finished:
		if err := stop(); !join.IsRefused(err) {
			t.Fatalf("the agent after leave stopped with %v, want refused", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the agent did not stop after leave")
	}
}

// TestAgentJoinsAgainWhenItsCredentialIsRevoked: an agent whose stored credential the hub
// refuses (its ServiceAccount made anew) joins again with the bootstrap token of a new
// `rewind clusters join`, stores the new credential and heartbeats. Before, it stopped on the
// stored credential at every start, the new token unused, until a person removed the file.
func TestAgentJoinsAgainWhenItsCredentialIsRevoked(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	const name = "agent-edge-rejoin"
	boot := joinMember(t, name)
	credFile := filepath.Join(t.TempDir(), "credential.json")
	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: credFile},
		Member: env.Members[0].RESTConfig(), CredentialTTL: time.Hour, HeartbeatInterval: 100 * time.Millisecond, NoWork: true}
	stop, _ := runAgent(t, o)
	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace(name), Name: join.AgentLease}
	poll(t, "the agent's Lease", func(ctx context.Context) (bool, error) { return c.Get(ctx, leaseKey, lease) == nil, nil })
	if err := stop(); err != nil {
		t.Fatalf("the agent stopped with %v", err)
	}
	first, _, err := o.Credentials.Load()
	if err != nil || first == nil {
		t.Fatalf("stored credential: %v", err)
	}

	// Revoked: the agent's ServiceAccount is made anew (by the next join), its tokens refused.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: v1alpha1.MemberNamespace(name), Name: join.AgentServiceAccount}}
	if err := c.Delete(ctx, sa); err != nil {
		t.Fatal(err)
	}
	refusedWithin(t, "the stored credential after its ServiceAccount was deleted", join.RefusedCredential, func() error {
		_, err := join.Renew(ctx, first.Config(boot), name, time.Hour)
		return err
	})
	o.Bootstrap = joinMember(t, name)

	if err := c.Get(ctx, leaseKey, lease); err != nil {
		t.Fatal(err)
	}
	before := lease.ResourceVersion
	stop, finished := runAgent(t, o)
	poll(t, "a heartbeat with the new credential", func(ctx context.Context) (bool, error) {
		select {
		case <-finished:
			return false, fmt.Errorf("the agent stopped: %v", stop())
		default:
		}
		return c.Get(ctx, leaseKey, lease) == nil && lease.ResourceVersion != before, nil
	})
	second, _, err := o.Credentials.Load()
	if err != nil || second == nil || second.Token == first.Token {
		t.Fatalf("the stored credential after joining again: %v (the same token: %v)", err, second != nil && second.Token == first.Token)
	}
	if a := getMember(t, name).Status.Agent; a == nil || a.JoinedAt == nil {
		t.Fatalf("the new join is not recorded: status.agent %+v", a)
	}
	if err := stop(); err != nil {
		t.Fatalf("the agent stopped with %v", err)
	}
}

// TestAgentWithACredentialFileItCannotWriteKeepsTheToken: an agent whose --credential-file
// cannot be written stops with an error that names the flag before it spends its bootstrap
// token, which then still joins. Before, it traded the token, could not store the credential,
// and the member needed a new join.
func TestAgentWithACredentialFileItCannotWriteKeepsTheToken(t *testing.T) {
	const name = "agent-edge-nowrite"
	boot := joinMember(t, name)
	bad := filepath.Join(t.TempDir(), "no-such-folder", "credential.json")
	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: bad},
		Member: env.Members[0].RESTConfig(), CredentialTTL: time.Hour, NoWork: true}
	stop, finished := runAgent(t, o)
	select {
	case <-finished:
	case <-time.After(time.Minute):
		t.Fatal("the agent with a credential file it cannot write did not stop")
	}
	if err := stop(); err == nil || !strings.Contains(err.Error(), "--credential-file "+bad) {
		t.Fatalf("want an error naming --credential-file %s, got %v", bad, err)
	}
	if _, err := join.Exchange(t.Context(), boot, name, time.Hour, nil); err != nil {
		t.Fatalf("the bootstrap token after the agent stopped on its credential file: %v", err)
	}
}

// TestPullMemberLiveness: the controller, with its shipped RBAC only, marks a pull member
// Reachable while its agent renews its Lease, and Unknown once the Lease is older than the
// member's unreachableTimeout; it comes back with the agent.
func TestPullMemberLiveness(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	const name = "agent-live-b"
	boot := joinMember(t, name)
	mc := getMember(t, name)
	base := mc.DeepCopy()
	mc.Spec.CheckInterval = &metav1.Duration{Duration: time.Second}
	mc.Spec.UnreachableTimeout = &metav1.Duration{Duration: 3 * time.Second}
	if err := c.Patch(ctx, mc, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	mgr, err := controller.NewManager(testenv.ControllerConfig(t, env.Hub), controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	testenv.RunManager(t, mgr)
	cond := func(status metav1.ConditionStatus, reason string) func(*v1alpha1.MemberCluster) bool {
		return func(mc *v1alpha1.MemberCluster) bool {
			c := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable)
			return c != nil && c.Status == status && c.Reason == reason
		}
	}
	waitMember(t, name, "Reachable Unknown before the agent joins", cond(metav1.ConditionUnknown, v1alpha1.ReasonAwaitingAgent))

	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: filepath.Join(t.TempDir(), "credential.json")},
		Member: env.Members[1].RESTConfig(), CredentialTTL: time.Hour, HeartbeatInterval: 200 * time.Millisecond}
	stop, _ := runAgent(t, o)
	mc = waitMember(t, name, "Reachable True with the agent's heartbeat", cond(metav1.ConditionTrue, controller.ReasonAgentHeartbeat))
	if mc.Status.Agent.LastHeartbeatTime == nil || !meta.IsStatusConditionTrue(mc.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("status after the heartbeat: %+v, conditions %+v", mc.Status.Agent, mc.Status.Conditions)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	waitMember(t, name, "Reachable Unknown once the Lease is older than unreachableTimeout", cond(metav1.ConditionUnknown, controller.ReasonAgentHeartbeatLost))
	o.Bootstrap = nil
	runAgent(t, o)
	waitMember(t, name, "Reachable True again with the agent back", cond(metav1.ConditionTrue, controller.ReasonAgentHeartbeat))
}

// TestAgentRetriesAFailedHeartbeatSoon: a heartbeat the hub answers with a fault (503 on the
// agent's Lease, from a fault proxy between the agent and the hub) is tried again within
// seconds, not a whole interval later, so a blip on the way to the hub does not cost the
// member an interval of its unreachableTimeout. Faults are not refusals: the agent goes on.
func TestAgentRetriesAFailedHeartbeatSoon(t *testing.T) {
	ctx := t.Context()
	c := hubClient(t)
	const name = "agent-edge-beat"
	const interval = time.Minute // the default: a beat that waited for it would come 60 s later
	boot := joinMember(t, name)
	leases := "/apis/coordination.k8s.io/v1/namespaces/" + v1alpha1.MemberNamespace(name) + "/leases"
	proxy, err := env.Hub.StartFaultProxy(testbed.Faults{HTTP: testbed.HTTPFaults{
		Fraction: 1, Codes: []int{http.StatusServiceUnavailable}, PathPrefixes: []string{leases}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	boot.Host = proxy.Server
	o := agent.Options{Cluster: name, Bootstrap: boot, Credentials: agent.CredentialFile{Path: filepath.Join(t.TempDir(), "credential.json")},
		Member: env.Members[0].RESTConfig(), CredentialTTL: time.Hour, HeartbeatInterval: interval, NoWork: true}
	_, finished := runAgent(t, o)

	// The first beat and its first retry are answered with a fault; then the hub heals.
	poll(t, "two heartbeats answered with a fault", func(context.Context) (bool, error) {
		return proxy.Faults().Counts().HTTPFaults >= 2, nil
	})
	proxy.Faults().SetEnabled(false)
	healed := time.Now()
	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: v1alpha1.MemberNamespace(name), Name: join.AgentLease}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, interval/2, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, leaseKey, lease) == nil, nil
	})
	if err != nil {
		t.Fatalf("no Lease within %s of the hub healing (the heartbeat interval is %s): a failed heartbeat must be tried again soon: %v",
			interval/2, interval, err)
	}
	t.Logf("Lease renewed %s after the hub healed", time.Since(healed).Round(time.Millisecond))
	if n := proxy.Faults().Counts().HTTPFaults; n != 2 {
		t.Errorf("%d heartbeats were answered with a fault, want 2 (faults were off after the second)", n)
	}
	select {
	case <-finished:
		t.Fatal("the agent stopped on a fault of the hub")
	default:
	}
}
