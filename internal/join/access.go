// Package join gives a pull member its identity in the hub, and takes it away.
//
// A pull member (MemberCluster spec.mode Pull) has a hub namespace of its own,
// rewind-member-NAME, where its work lives (see MemberClusterSpec.Mode). Joining makes, there:
//   - the ServiceAccount rewind-agent, the agent's identity, with the Role rewind-agent: its
//     RolloutTargets (read, and their status), releases, snapshots, snapshot stores, Secrets
//     (release manifests, snapshot payloads), its Lease, Events, and tokens for itself (the
//     agent renews its credential); and the ClusterRole rewind-agent:NAME: read its own
//     MemberCluster and write its status, by resourceNames. Nothing else of the hub.
//   - the ServiceAccount rewind-bootstrap with the Role rewind-bootstrap: request a token for
//     rewind-agent and delete itself, nothing else. Its token is the bootstrap token that
//     `rewind clusters join` prints: short-lived (the TokenRequest's expiry) and single-use
//     (Exchange deletes the ServiceAccount once it holds the agent's credential, and the hub's
//     API server refuses the tokens of a deleted ServiceAccount).
//
// A new join recreates rewind-bootstrap, so that only the newest bootstrap token works.
// Leave deletes both ServiceAccounts first (the hub then refuses every token of them), then
// the ClusterRole, its binding, the namespace and the MemberCluster.
package join

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/rbac"
)

// Names in a member's hub namespace.
const (
	// AgentServiceAccount is the agent's identity in the hub; AgentRole its Role.
	AgentServiceAccount = "rewind-agent"
	AgentRole           = "rewind-agent"
	// BootstrapServiceAccount owns the bootstrap token; BootstrapRole its Role.
	BootstrapServiceAccount = "rewind-bootstrap"
	BootstrapRole           = "rewind-bootstrap"
	// AgentLease is the agent's heartbeat.
	AgentLease = "rewind-agent"
	// LabelMember names the member on the hub objects of its identity.
	LabelMember = "rewind.dev/member"
)

// ClusterRoleName is the ClusterRole (and ClusterRoleBinding) that lets a member's agent read
// its MemberCluster and write its status.
func ClusterRoleName(cluster string) string { return "rewind-agent:" + cluster }

// ValidateName says why cluster cannot be a pull member's name, or nil: its hub namespace,
// rewind-member-NAME, must be a DNS label.
func ValidateName(cluster string) error {
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		return fmt.Errorf("cluster name %q is invalid for a pull member (its hub namespace is %sNAME, a DNS label): %s",
			cluster, v1alpha1.MemberNamespacePrefix, strings.Join(errs, "; "))
	}
	if len(cluster) > v1alpha1.MaxPullMemberNameLength {
		return fmt.Errorf("cluster name %q is %d characters long; a pull member's name has at most %d, so that its hub namespace %s fits in 63",
			cluster, len(cluster), v1alpha1.MaxPullMemberNameLength, v1alpha1.MemberNamespace(cluster))
	}
	return nil
}

func labels(cluster string) map[string]string {
	return map[string]string{LabelMember: cluster, "app.kubernetes.io/name": "rewind", "app.kubernetes.io/managed-by": "rewind"}
}

// AgentRules are what the agent may do in its hub namespace.
func AgentRules() []rbacv1.PolicyRule {
	read := []string{"get", "list", "watch"}
	write := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return []rbacv1.PolicyRule{
		// Its work: the Rollout writes the targets' spec, the agent their status.
		// Rollouts: there are none in the namespace; snapshot retention looks for them.
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouttargets", "operatorreleases", "snapshotstores", "rollouts"}, Verbs: read},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouttargets/status"}, Verbs: []string{"get", "update", "patch"}},
		// The snapshots it takes (hub store: their payloads are Secrets of the namespace).
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"snapshots", "snapshots/status"}, Verbs: write},
		// Release manifests (read), snapshot payloads (written), the snapshot key (read).
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: write},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: read},
		// Its heartbeat.
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		// Renewing its own credential, and no other ServiceAccount's.
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{AgentServiceAccount}, Verbs: []string{"create"}},
	}
}

// BootstrapRules are what the bootstrap token may do: get the agent's credential, and
// delete its own ServiceAccount (which makes it single-use).
func BootstrapRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{AgentServiceAccount}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{BootstrapServiceAccount}, Verbs: []string{"delete"}},
	}
}

// MemberClusterRules are what the agent may do outside its namespace: read its own
// MemberCluster and write its status.
func MemberClusterRules(cluster string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"memberclusters"}, ResourceNames: []string{cluster}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"memberclusters/status"}, ResourceNames: []string{cluster}, Verbs: []string{"get", "update", "patch"}},
	}
}

// Objects are the hub objects of a pull member's identity, but for the bootstrap
// ServiceAccount (Join recreates it): the namespace, the agent's ServiceAccount, the Roles
// and RoleBindings, the controller's RoleBinding (rbac.NamespaceBinding), the ClusterRole and
// its binding.
func Objects(cluster string) []client.Object {
	ns := v1alpha1.MemberNamespace(cluster)
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels(cluster)}
	}
	sa := func(name string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	}
	role := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
	}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: meta(ns, "")},
		&corev1.ServiceAccount{ObjectMeta: meta(AgentServiceAccount, ns)},
		&rbacv1.Role{ObjectMeta: meta(AgentRole, ns), Rules: AgentRules()},
		&rbacv1.RoleBinding{ObjectMeta: meta(AgentRole, ns), RoleRef: role(AgentRole), Subjects: sa(AgentServiceAccount)},
		&rbacv1.Role{ObjectMeta: meta(BootstrapRole, ns), Rules: BootstrapRules()},
		&rbacv1.RoleBinding{ObjectMeta: meta(BootstrapRole, ns), RoleRef: role(BootstrapRole), Subjects: sa(BootstrapServiceAccount)},
		// The controller works in the namespace as in any namespace of releases and rollouts:
		// it reads the agent's Lease, and copies releases there.
		rbac.NamespaceBinding(ns),
		&rbacv1.ClusterRole{ObjectMeta: meta(ClusterRoleName(cluster), ""), Rules: MemberClusterRules(cluster)},
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta(ClusterRoleName(cluster), ""),
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName(cluster)}, Subjects: sa(AgentServiceAccount)},
	}
}
