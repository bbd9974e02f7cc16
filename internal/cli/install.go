package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/rbac"
)

func newInstallCommand(h *hubFlags) *cobra.Command {
	var o install.Options
	var export, dryRun bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install rewind into the hub: CRDs, the rewind-system namespace, the controller and its RBAC",
		Long: `Applies (server-side apply) rewind to the hub: the rewind.dev/v1alpha1 CRDs (MemberCluster,
OperatorRelease, Rollout, RolloutTarget, Snapshot, SnapshotStore, SnapshotSchedule), the
rewind-system namespace, and the
controller: its ServiceAccount, least-privilege RBAC, a Deployment of two replicas with leader
election running --image, a metrics Service and a PodDisruptionBudget. It waits until the CRDs
are Established. Running it again upgrades everything in place.

The controller reads and writes Secrets only in rewind-system and in the namespaces it is
enabled in: --namespaces binds it in the namespaces that will hold releases and rollouts (the
same as rewind namespace enable).

--crds-only installs the CRDs and the namespace alone (run the controller elsewhere, e.g.
rewind controller). --export prints the YAML instead of applying it, for GitOps or
kubectl apply --server-side -f -; it reads nothing from a cluster. --dry-run sends everything
to the hub with dryRun=All: the hub validates and authorizes it and stores nothing (on a new hub,
what goes into rewind-system is listed as not validated: a dry run cannot create the namespace
first).`,
		Example: `  rewind install --kubeconfig hub.kubeconfig --image registry.example.com/rewind-controller:v0.1.0 --namespaces team-a,team-b
  rewind install --context hub --crds-only
  rewind install --image registry.example.com/rewind-controller:v0.1.0 --export > rewind.yaml
  rewind install --context hub --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := install.Manifests(o)
			if err != nil {
				return err
			}
			if export {
				return writeYAML(cmd.OutOrStdout(), objs)
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			suffix := ""
			if dryRun {
				suffix = " (server dry run: nothing stored)"
			}
			report := func(u *unstructured.Unstructured, validated bool) {
				if validated {
					fmt.Fprintf(out, "applied %s %s%s\n", u.GetKind(), objectKey(u), suffix)
					return
				}
				fmt.Fprintf(out, "not validated %s %s: namespace %s does not exist yet (the install creates it; a dry run cannot)\n",
					u.GetKind(), objectKey(u), u.GetNamespace())
			}
			if err := install.Apply(cmd.Context(), c, objs, install.ApplyOptions{DryRun: dryRun, Report: report}); err != nil {
				return err
			}
			if dryRun {
				return nil
			}
			fmt.Fprintln(out, "rewind.dev CRDs installed and Established")
			if !o.CRDsOnly {
				fmt.Fprintf(out, "the controller starts in %s (kubectl -n %s rollout status deployment/%s)\n",
					rbac.SystemNamespace, rbac.SystemNamespace, rbac.ControllerRole)
				if len(o.Namespaces) == 0 {
					fmt.Fprintf(out, "enable it in the namespaces of your releases and rollouts: %s namespace enable NAMESPACE\n", h.prog)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Image, "image", "", "the controller image (default "+install.DefaultImage()+"; build one with make image)")
	f.BoolVar(&o.CRDsOnly, "crds-only", false, "install the CRDs and the rewind-system namespace only, not the controller")
	f.StringSliceVar(&o.Namespaces, "namespaces", nil, "namespaces that hold releases and rollouts: the controller may use their Secrets (comma-separated)")
	f.BoolVar(&export, "export", false, "print the manifests as YAML instead of applying them")
	f.BoolVar(&dryRun, "dry-run", false, "send everything with dryRun=All: validated and authorized by the hub, nothing stored")
	cmd.MarkFlagsMutuallyExclusive("export", "dry-run")
	return cmd
}

func objectKey(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// writeYAML prints objects as one YAML stream.
func writeYAML(w io.Writer, objs []*unstructured.Unstructured) error {
	var b strings.Builder
	for _, u := range objs {
		y, err := yaml.Marshal(u.Object)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
