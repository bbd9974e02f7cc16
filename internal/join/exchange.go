package join

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// DefaultCredentialTTL is the lifetime the agent asks for its hub credential; the hub's API
// server may grant less (--service-account-max-token-expiration). The agent renews it at
// RenewFraction of its lifetime.
const DefaultCredentialTTL = 24 * time.Hour

// RenewFraction of a credential's lifetime is when the agent renews it (as the kubelet renews
// projected tokens).
const RenewFraction = 0.8

// Credential is the agent's hub credential: a token of its ServiceAccount. Token is a
// credential: never log it.
type Credential struct {
	Token               string
	IssuedAt, ExpiresAt time.Time
}

// RenewAt is when the credential is renewed: at RenewFraction of its lifetime.
func (c *Credential) RenewAt() time.Time {
	life := c.ExpiresAt.Sub(c.IssuedAt)
	return c.IssuedAt.Add(time.Duration(float64(life) * RenewFraction))
}

// Config is hub (its server and CA) authenticated with the credential alone.
func (c *Credential) Config(hub *rest.Config) *rest.Config {
	cfg := rest.AnonymousClientConfig(hub)
	cfg.BearerToken = c.Token
	cfg.QPS, cfg.Burst = hub.QPS, hub.Burst
	return cfg
}

// Reasons a hub refuses an agent.
const (
	// RefusedBootstrapToken: the bootstrap token expired, was already exchanged, or a newer
	// join replaced it.
	RefusedBootstrapToken = "BootstrapTokenRefused"
	// RefusedOtherCluster: the token was issued for another member than the one the agent
	// claims to be.
	RefusedOtherCluster = "OtherCluster"
	// RefusedCredential: the agent's credential expired or was revoked (rewind clusters
	// leave).
	RefusedCredential = "CredentialRefused"
	// RefusedForbidden: the hub knows the agent's credential but forbids what it asked: its
	// access is being removed (rewind clusters leave), or it asked for another member's.
	RefusedForbidden = "Forbidden"
)

// RefusedError says the hub refused the agent's bootstrap token or credential: retrying does
// not help, a person must run `rewind clusters join` again.
type RefusedError struct {
	Cluster, Reason string
	Err             error
}

func (e *RefusedError) Error() string {
	switch e.Reason {
	case RefusedOtherCluster:
		return fmt.Sprintf("the hub refused to let this agent act as member %s: its token was issued for another member (%v); run the agent with the token `rewind clusters join %s` printed",
			e.Cluster, e.Err, e.Cluster)
	case RefusedForbidden:
		return fmt.Sprintf("the hub forbids the agent of member %s what it asked (%v): the member is leaving (rewind clusters leave %s), or the request was for another member's objects",
			e.Cluster, e.Err, e.Cluster)
	case RefusedCredential:
		return fmt.Sprintf("the hub refused the credential of member %s's agent: it was revoked (rewind clusters leave %s) or expired (%v); run `rewind clusters join %s` for a new bootstrap token",
			e.Cluster, e.Cluster, e.Err, e.Cluster)
	}
	return fmt.Sprintf("the hub refused the bootstrap token of member %s: it expired, was already used (each token is good for one exchange) or a newer join replaced it (%v); run `rewind clusters join %s` for a new one",
		e.Cluster, e.Err, e.Cluster)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// refused classifies an authentication or authorization failure of the hub by its status.
func refused(cluster, reason string, err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return &RefusedError{Cluster: cluster, Reason: reason, Err: err}
	case apierrors.IsForbidden(err):
		return &RefusedError{Cluster: cluster, Reason: RefusedOtherCluster, Err: err}
	}
	return err
}

// CredentialRefused is err as a *RefusedError when the hub refused the agent's credential
// (401: revoked or expired; 403: not this member's), else err.
func CredentialRefused(cluster string, err error) error {
	if apierrors.IsForbidden(err) {
		return &RefusedError{Cluster: cluster, Reason: RefusedForbidden, Err: err}
	}
	return refused(cluster, RefusedCredential, err)
}

// IsRefused says whether err is a *RefusedError.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// Exchange trades a bootstrap token (hub: the hub's server and CA with it) for the agent's
// hub credential: a token of the member's agent ServiceAccount, valid for ttl (default
// DefaultCredentialTTL, or less if the hub grants less). It then deletes the bootstrap
// ServiceAccount, so that the hub refuses the bootstrap token from then on, hands the credential
// to keep (when not nil: the agent stores it there) and records the join in the MemberCluster's
// status.agent. An expired, used or replaced bootstrap token, or one issued for another member,
// is a *RefusedError. A fault of the way (a reset, a timeout, a 429 or 5xx) is retried until ctx
// ends: an agent that starts while its hub is away waits for it, and a lost answer to the
// deletion does not spend the token for nothing (spendBootstrap). Once the token is spent, keep
// has the credential before anything else can fail.
func Exchange(ctx context.Context, bootstrap *rest.Config, cluster string, ttl time.Duration, keep func(*Credential) error) (*Credential, error) {
	ns := v1alpha1.MemberNamespace(cluster)
	cs, err := kubernetes.NewForConfig(bootstrap)
	if err != nil {
		return nil, err
	}
	cred, err := requestToken(ctx, cs, ns, ttl, patient)
	if err != nil {
		return nil, refused(cluster, RefusedBootstrapToken, fmt.Errorf("requesting the agent's credential in %s: %w", ns, err))
	}
	if err := spendBootstrap(ctx, cs, ns); err != nil {
		// Refused here, the token was exchanged twice at once: this exchange gives its
		// credential up, the other one stands.
		return nil, refused(cluster, RefusedBootstrapToken, fmt.Errorf("deleting the bootstrap ServiceAccount %s/%s: %w", ns, BootstrapServiceAccount, err))
	}
	if keep != nil {
		if err := keep(cred); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cred.Config(bootstrap), client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if err := recordAgent(ctx, c, cluster, cred, true, patient); err != nil {
		return nil, err
	}
	return cred, nil
}

// spendBootstrap deletes the bootstrap ServiceAccount of hub namespace ns with its own token,
// retrying faults until ctx ends. Once a try met a fault, that try may have deleted it (its
// answer lost): the next one then finds it gone (404), or its token refused (401, once the
// authenticator saw the deletion), and the token is spent as asked. Without such a fault, gone
// or refused means another exchange of the same token spent it first.
func spendBootstrap(ctx context.Context, cs kubernetes.Interface, ns string) error {
	faulted := false
	return retryN(ctx, patient, "deleting the bootstrap ServiceAccount", func() error {
		err := cs.CoreV1().ServiceAccounts(ns).Delete(ctx, BootstrapServiceAccount, metav1.DeleteOptions{})
		if faulted && (apierrors.IsNotFound(err) || apierrors.IsUnauthorized(err)) {
			return nil
		}
		faulted = faulted || fault.IsTransient(err)
		return err
	})
}

// Renew gets a new credential for the agent with its current one (agent: the hub config
// authenticated with it) and records its expiry. A revoked or expired credential is a
// *RefusedError. Faults are retried a few times: the agent's heartbeat tries again later, with
// its current credential still good.
func Renew(ctx context.Context, agent *rest.Config, cluster string, ttl time.Duration) (*Credential, error) {
	cs, err := kubernetes.NewForConfig(agent)
	if err != nil {
		return nil, err
	}
	cred, err := requestToken(ctx, cs, v1alpha1.MemberNamespace(cluster), ttl, tries)
	if err != nil {
		return nil, refused(cluster, RefusedCredential, fmt.Errorf("renewing the agent's credential: %w", err))
	}
	c, err := client.New(cred.Config(agent), client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	if err := recordAgent(ctx, c, cluster, cred, false, tries); err != nil {
		return nil, err
	}
	return cred, nil
}

// requestToken asks for a token of the agent's ServiceAccount in ns, with steps tries (see
// fault.Retry) through faults.
func requestToken(ctx context.Context, cs kubernetes.Interface, ns string, ttl time.Duration, steps int) (*Credential, error) {
	if ttl <= 0 {
		ttl = DefaultCredentialTTL
	}
	var tr *authenticationv1.TokenRequest
	err := retryN(ctx, steps, "requesting a token of the agent's ServiceAccount", func() (err error) {
		tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, AgentServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(ttl.Seconds()))},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	exp := tr.Status.ExpirationTimestamp.Time
	// The token's lifetime as granted: its issue time is the request's (the server's clock),
	// taken from the expiry and the seconds it granted when it says them.
	issued := time.Now()
	if s := tr.Spec.ExpirationSeconds; s != nil && *s > 0 {
		issued = exp.Add(-time.Duration(*s) * time.Second)
	}
	return &Credential{Token: tr.Status.Token, IssuedAt: issued, ExpiresAt: exp}, nil
}

// recordAgent writes the credential's expiry (and, at a join, the join's time) into the
// member's status.agent, as the agent, each request tried steps times through faults.
func recordAgent(ctx context.Context, c client.Client, cluster string, cred *Credential, joined bool, steps int) error {
	mc := &v1alpha1.MemberCluster{}
	if err := retryN(ctx, steps, "reading MemberCluster "+cluster, func() error { return c.Get(ctx, client.ObjectKey{Name: cluster}, mc) }); err != nil {
		return refused(cluster, RefusedCredential, fmt.Errorf("reading MemberCluster %s: %w", cluster, err))
	}
	agent := &v1alpha1.AgentStatus{}
	if mc.Status.Agent != nil {
		agent = mc.Status.Agent.DeepCopy()
	}
	exp := metav1.NewTime(cred.ExpiresAt)
	agent.CredentialExpiresAt = &exp
	if joined {
		now := metav1.Now()
		agent.JoinedAt = &now
	}
	return patchAgentStatus(ctx, c, mc, agent, steps)
}

// scheme is what the agent reads and writes in the hub.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}()
