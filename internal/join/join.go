package join

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// Bootstrap token lifetimes.
const (
	// DefaultBootstrapTTL is how long a bootstrap token is good for, unused.
	DefaultBootstrapTTL = time.Hour
	// MinBootstrapTTL is the shortest token the API server issues.
	MinBootstrapTTL = 10 * time.Minute
	// MaxBootstrapTTL bounds a bootstrap token: it is a credential in transit.
	MaxBootstrapTTL = 24 * time.Hour
)

// Options of Join.
type Options struct {
	// BootstrapTTL is how long the bootstrap token is good for (default DefaultBootstrapTTL).
	BootstrapTTL time.Duration
	// Labels are set on a MemberCluster that Join creates (wave selectors match them).
	Labels map[string]string
	// Bind adds these hub namespaces to the member's spec.boundNamespaces: their Rollouts may
	// target it.
	Bind []string
}

// Bootstrap is what a member's agent needs to join: the hub's bootstrap token for it.
// Token is a credential: never log it.
type Bootstrap struct {
	// Cluster is the member's name, Namespace its hub namespace.
	Cluster, Namespace string
	// Token is the bootstrap token, good for one exchange until ExpiresAt.
	Token     string
	ExpiresAt time.Time
}

// PushMemberError says that a member registered in mode Push cannot join or leave as a pull
// member.
type PushMemberError struct{ Cluster string }

func (e *PushMemberError) Error() string {
	return fmt.Sprintf("member %s is registered in mode Push (rewind clusters add), and a member's mode cannot change: delete it first (kubectl delete membercluster %s), then join it", e.Cluster, e.Cluster)
}

// Join registers cluster as a pull member, or joins it again: its MemberCluster (mode Pull),
// its hub namespace and the agent's identity and RBAC there (Objects), and a new bootstrap
// ServiceAccount whose token it returns. Any earlier bootstrap token stops working. The
// agent's credential, if an agent joined before, keeps working (Leave revokes it). The
// MemberCluster's status.agent records the token's expiry; joinedAt is cleared until an agent
// exchanges it. Every step is idempotent: a Join that failed half-way is run again.
func Join(ctx context.Context, c client.Client, cs kubernetes.Interface, cluster string, o Options) (*Bootstrap, error) {
	if err := ValidateName(cluster); err != nil {
		return nil, err
	}
	ttl := o.BootstrapTTL
	if ttl == 0 {
		ttl = DefaultBootstrapTTL
	}
	if ttl < MinBootstrapTTL || ttl > MaxBootstrapTTL {
		return nil, fmt.Errorf("--bootstrap-ttl %s is out of range: a bootstrap token lives between %s and %s", ttl, MinBootstrapTTL, MaxBootstrapTTL)
	}
	mc, err := ensureMember(ctx, c, cluster, o.Labels, o.Bind)
	if err != nil {
		return nil, err
	}
	ns := v1alpha1.MemberNamespace(cluster)
	if err := ensureAccess(ctx, c, cluster); err != nil {
		return nil, err
	}
	// A new bootstrap ServiceAccount: the tokens of the one before (its UID) are refused.
	if err := deleteServiceAccount(ctx, c, ns, BootstrapServiceAccount); err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: BootstrapServiceAccount, Namespace: ns, Labels: labels(cluster)}}
	if err := retry(ctx, func() error { return c.Create(ctx, sa) }); err != nil {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s in the hub: %w", ns, BootstrapServiceAccount, err)
	}
	var tr *authenticationv1.TokenRequest
	err = retry(ctx, func() (err error) {
		tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, BootstrapServiceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(ttl.Seconds()))},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("requesting the bootstrap token of %s/%s: %w", ns, BootstrapServiceAccount, err)
	}
	exp := tr.Status.ExpirationTimestamp
	status := &v1alpha1.AgentStatus{}
	if mc.Status.Agent != nil {
		status = mc.Status.Agent.DeepCopy()
	}
	status.Namespace, status.ServiceAccount, status.BootstrapExpiresAt, status.JoinedAt = ns, AgentServiceAccount, &exp, nil
	if err := patchAgentStatus(ctx, c, mc, status, tries); err != nil {
		return nil, err
	}
	return &Bootstrap{Cluster: cluster, Namespace: ns, Token: tr.Status.Token, ExpiresAt: exp.Time}, nil
}

// ensureMember gets or creates the MemberCluster of a pull member.
func ensureMember(ctx context.Context, c client.Client, cluster string, lbls map[string]string, bind []string) (*v1alpha1.MemberCluster, error) {
	mc := &v1alpha1.MemberCluster{}
	err := retry(ctx, func() error { return c.Get(ctx, client.ObjectKey{Name: cluster}, mc) })
	switch {
	case apierrors.IsNotFound(err):
		mc = &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster, Labels: lbls},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull, BoundNamespaces: bind}}
		if err := retry(ctx, func() error { return c.Create(ctx, mc) }); err != nil {
			return nil, fmt.Errorf("creating MemberCluster %s: %w", cluster, err)
		}
		return mc, nil
	case err != nil:
		return nil, fmt.Errorf("reading MemberCluster %s: %w", cluster, err)
	case mc.Spec.Mode != v1alpha1.ModePull:
		return nil, &PushMemberError{Cluster: cluster}
	}
	if missing := slices.DeleteFunc(slices.Clone(bind), func(ns string) bool { return slices.Contains(mc.Spec.BoundNamespaces, ns) }); len(missing) > 0 {
		base := mc.DeepCopy()
		mc.Spec.BoundNamespaces = append(mc.Spec.BoundNamespaces, missing...)
		if err := retry(ctx, func() error { return c.Patch(ctx, mc, client.MergeFrom(base)) }); err != nil {
			return nil, fmt.Errorf("binding MemberCluster %s to %v: %w", cluster, missing, err)
		}
	}
	if len(lbls) > 0 {
		base := mc.DeepCopy()
		if mc.Labels == nil {
			mc.Labels = map[string]string{}
		}
		for k, v := range lbls {
			mc.Labels[k] = v
		}
		if err := retry(ctx, func() error { return c.Patch(ctx, mc, client.MergeFrom(base)) }); err != nil {
			return nil, fmt.Errorf("labelling MemberCluster %s: %w", cluster, err)
		}
	}
	return mc, nil
}

// ensureAccess creates or updates the objects of the member's identity (Objects).
func ensureAccess(ctx context.Context, c client.Client, cluster string) error {
	for _, want := range Objects(cluster) {
		if err := ensure(ctx, c, want); err != nil {
			return err
		}
	}
	return nil
}

func ensure(ctx context.Context, c client.Client, want client.Object) error {
	what := fmt.Sprintf("%T %s", want, client.ObjectKeyFromObject(want))
	got := want.DeepCopyObject().(client.Object)
	err := retry(ctx, func() error { return c.Get(ctx, client.ObjectKeyFromObject(want), got) })
	if apierrors.IsNotFound(err) {
		err = retry(ctx, func() error { return c.Create(ctx, want) })
		if err != nil {
			return fmt.Errorf("creating %s in the hub: %w", what, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s in the hub: %w", what, err)
	}
	switch g := got.(type) {
	case *corev1.Namespace:
		if g.DeletionTimestamp != nil {
			return fmt.Errorf("hub namespace %s is still being deleted (an earlier rewind clusters leave): run join again once it is gone", g.Name)
		}
		return nil // a namespace and a ServiceAccount are kept as they are (their UIDs)
	case *corev1.ServiceAccount:
		return nil
	case *rbacv1.Role:
		g.Rules = want.(*rbacv1.Role).Rules
	case *rbacv1.ClusterRole:
		g.Rules = want.(*rbacv1.ClusterRole).Rules
	case *rbacv1.RoleBinding:
		g.Subjects = want.(*rbacv1.RoleBinding).Subjects
	case *rbacv1.ClusterRoleBinding:
		g.Subjects = want.(*rbacv1.ClusterRoleBinding).Subjects
	}
	got.SetLabels(want.GetLabels())
	if err := retry(ctx, func() error { return c.Update(ctx, got) }); err != nil {
		return fmt.Errorf("updating %s in the hub: %w", what, err)
	}
	return nil
}

// patchAgentStatus writes status.agent of mc (a merge patch of that field alone).
func patchAgentStatus(ctx context.Context, c client.Client, mc *v1alpha1.MemberCluster, agent *v1alpha1.AgentStatus, steps int) error {
	base := mc.DeepCopy()
	mc.Status.Agent = agent
	if err := retryN(ctx, steps, "writing the status of MemberCluster "+mc.Name, func() error { return c.Status().Patch(ctx, mc, client.MergeFrom(base)) }); err != nil {
		return fmt.Errorf("writing the status of MemberCluster %s: %w", mc.Name, err)
	}
	return nil
}

func deleteServiceAccount(ctx context.Context, c client.Client, ns, name string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	err := retry(ctx, func() error { return c.Delete(ctx, sa) })
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ServiceAccount %s/%s in the hub: %w", ns, name, err)
	}
	return nil
}

// Left is what Leave removed.
type Left struct {
	// Member says whether a MemberCluster was deleted; NamespaceTerminating that the hub
	// namespace is still being deleted (the hub's namespace controller empties it).
	Member, NamespaceTerminating bool
}

// Leave removes a pull member from the hub: its agent's and bootstrap ServiceAccounts first,
// so that the hub refuses their tokens from then on, then its ClusterRole and binding, its hub
// namespace (with everything in it: Roles, targets, snapshots) and its MemberCluster. A member
// in mode Push is refused (*PushMemberError). Running it again, or for a member partly
// removed, removes what is left.
func Leave(ctx context.Context, c client.Client, cluster string) (*Left, error) {
	out := &Left{}
	mc := &v1alpha1.MemberCluster{}
	err := retry(ctx, func() error { return c.Get(ctx, client.ObjectKey{Name: cluster}, mc) })
	switch {
	case apierrors.IsNotFound(err):
		mc = nil
	case err != nil:
		return nil, fmt.Errorf("reading MemberCluster %s: %w", cluster, err)
	case mc.Spec.Mode != v1alpha1.ModePull:
		return nil, &PushMemberError{Cluster: cluster}
	}
	ns := v1alpha1.MemberNamespace(cluster)
	for _, name := range []string{AgentServiceAccount, BootstrapServiceAccount} {
		if err := deleteServiceAccount(ctx, c, ns, name); err != nil {
			return nil, err
		}
	}
	objs := []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(cluster)}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName(cluster)}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
	}
	if mc != nil {
		objs = append(objs, mc)
	}
	for _, o := range objs {
		err := retry(ctx, func() error { return c.Delete(ctx, o) })
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("deleting %T %s in the hub: %w", o, o.GetName(), err)
		}
	}
	out.Member = mc != nil
	nso := &corev1.Namespace{}
	err = c.Get(ctx, client.ObjectKey{Name: ns}, nso)
	out.NamespaceTerminating = err == nil
	if err != nil && !apierrors.IsNotFound(err) && !fault.IsTransient(err) {
		return nil, fmt.Errorf("reading hub namespace %s: %w", ns, err)
	}
	return out, nil
}

// How many times a hub request that meets a fault (a reset, a timeout, a 429 or 5xx) is tried
// (fault.Retry): tries for a person's command and the agent's renewals (both try again later),
// patient (until the context ends) for an agent's join, which has nothing to go on with but
// the hub's answer.
const (
	tries   = 5
	patient = 0
)

// retry retries a hub request that meets a fault a few times (tries); any other error is
// returned at once.
func retry(ctx context.Context, fn func() error) error { return fault.Retry(ctx, tries, fn) }

// retryN retries the hub request fn (what it asks) through faults steps times in all; when
// patient (an agent's join), until ctx ends, saying in the agent's log at each fault that it
// tries again (fault.RetryLogged). A person's command logs nothing: its error says it all.
func retryN(ctx context.Context, steps int, what string, fn func() error) error {
	if steps == patient {
		return fault.RetryLogged(ctx, 0, what, fn)
	}
	return fault.Retry(ctx, steps, fn)
}

func ptr[T any](v T) *T { return &v }

// IsPushMember says whether err is a *PushMemberError.
func IsPushMember(err error) bool {
	var pe *PushMemberError
	return errors.As(err, &pe)
}
