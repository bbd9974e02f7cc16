package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/rbac"
)

func newNamespaceCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "namespace",
		Short: "Let the rewind controller work in hub namespaces (or stop it)",
		Example: `  rewind namespace enable team-a --context hub
  rewind namespace disable team-a --context hub`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "enable NAMESPACE...",
		Short: "Let the controller use the releases, rollouts and snapshots of namespaces",
		Long: `Binds the ClusterRole ` + rbac.NamespaceRole + ` to the controller's ServiceAccount in each
namespace (a RoleBinding named ` + rbac.NamespaceBindingName + `): the controller may then read the
manifests of the releases stored there and write the snapshot payloads of the rollouts there.
Its access to every other namespace's Secrets stays none. The namespaces must exist.`,
		Example: `  rewind namespace enable team-a team-b --context hub`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			for _, ns := range args {
				if err := c.Get(cmd.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{}); err != nil {
					if apierrors.IsNotFound(err) {
						return fmt.Errorf("namespace %q not found in the hub: create it first (kubectl create namespace %s)", ns, ns)
					}
					return err
				}
				rb, err := install.NamespaceBinding(ns)
				if err != nil {
					return err
				}
				if err := install.Apply(cmd.Context(), c, []*unstructured.Unstructured{rb}, install.ApplyOptions{}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "namespace %s enabled: RoleBinding %s/%s grants %s to %s/%s\n",
					ns, ns, rbac.NamespaceBindingName, rbac.NamespaceRole, rbac.SystemNamespace, rbac.ServiceAccount)
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "disable NAMESPACE...",
		Short: "Take the controller's access to namespaces away",
		Long: `Deletes the RoleBinding ` + rbac.NamespaceBindingName + ` that rewind namespace enable created. Rollouts
in the namespace then fail with an error that names the Secret the controller may not use.`,
		Example: `  rewind namespace disable team-a --context hub`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			for _, ns := range args {
				rb := &rbacv1.RoleBinding{}
				err := c.Get(cmd.Context(), client.ObjectKey{Namespace: ns, Name: rbac.NamespaceBindingName}, rb)
				if apierrors.IsNotFound(err) || (err == nil && rb.Labels[rbac.LabelNamespaceAccess] != "true") {
					fmt.Fprintf(cmd.OutOrStdout(), "namespace %s was not enabled\n", ns)
					continue
				}
				if err != nil {
					return err
				}
				if err := c.Delete(cmd.Context(), rb); client.IgnoreNotFound(err) != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "namespace %s disabled\n", ns)
			}
			return nil
		},
	})
	return cmd
}
