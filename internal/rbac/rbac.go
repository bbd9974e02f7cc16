// Package rbac names the controller's identity and permissions in the hub and builds the
// RoleBindings that let it work in a namespace.
//
// The controller's access is split so that it holds no Secret access cluster-wide:
//   - ClusterRole rewind-controller (generated from the markers in internal/controller):
//     rewind.dev kinds, Events, TokenReviews and SubjectAccessReviews (metrics authn/authz).
//   - Role rewind-controller in rewind-system (same markers): the member kubeconfig Secrets,
//     the snapshot key and the leader-election Lease.
//   - ClusterRole rewind-controller-namespace (generated from the markers below), bound by a
//     RoleBinding in each namespace that holds OperatorReleases and Rollouts: read the
//     releases' manifest Secrets, write and delete the snapshot payload Secrets. `rewind
//     install --namespaces a,b` and `rewind namespace enable NS` create those RoleBindings.
package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The secrets a namespace that holds releases and rollouts must let the controller use:
// release manifests (read), snapshot payloads (server-side apply, list by label, delete).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;create;patch;delete
// Values ConfigMaps of releases reconciled from a source (read).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// The agent's Lease in a pull member's hub namespace (rewind clusters join binds this role
// there): the member is alive while its agent renews it.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get

// Names of the controller's identity and roles.
const (
	// SystemNamespace holds the controller, its credentials for the members and its key.
	SystemNamespace = "rewind-system"
	// ServiceAccount is the controller's identity in the hub.
	ServiceAccount = "rewind-controller"
	// ControllerRole is the ClusterRole (and the Role in SystemNamespace) of the controller.
	ControllerRole = "rewind-controller"
	// NamespaceRole is the ClusterRole a RoleBinding grants in a tenant namespace.
	NamespaceRole = "rewind-controller-namespace"
	// NamespaceBindingName is the name of that RoleBinding.
	NamespaceBindingName = "rewind-controller"
	// LabelNamespaceAccess marks the RoleBindings rewind manages.
	LabelNamespaceAccess = "rewind.dev/namespace-access"
)

// Subject is the controller's ServiceAccount as an RBAC subject.
func Subject() rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: ServiceAccount, Namespace: SystemNamespace}
}

// NamespaceBinding is the RoleBinding that lets the controller work with the releases,
// rollouts and snapshots of namespace ns.
func NamespaceBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: NamespaceBindingName, Namespace: ns, Labels: map[string]string{
			LabelNamespaceAccess: "true", "app.kubernetes.io/name": "rewind", "app.kubernetes.io/managed-by": "rewind",
		}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: NamespaceRole},
		Subjects: []rbacv1.Subject{Subject()},
	}
}
