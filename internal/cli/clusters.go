package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/member"
)

// kubeconfigNamespace holds the member kubeconfig Secrets in the hub.
const kubeconfigNamespace = "rewind-system"

func newClustersCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "clusters",
		Aliases: []string{"cluster"},
		Short:   "Register member clusters, list them, and check that they run what they should",
		Example: `  rewind clusters add prod-eu-1 --kubeconfig prod-eu-1.yaml --label env=prod
  rewind clusters join edge-berlin-7 --bootstrap-kubeconfig edge-berlin-7.bootstrap.yaml
  rewind clusters list
  rewind clusters check --operator mysql-operator --expect mysql-v2`,
		Long: `A push member cluster is reached through a kubeconfig stored in a hub Secret: 'clusters add'
registers one. A pull member reaches the hub through its agent: 'clusters join' registers one
and 'clusters leave' removes it. 'clusters list' shows what the controller sees of each, and
'clusters check' compares every member with the release it should run.`,
	}
	cmd.AddCommand(newClustersAddCommand(h), newClustersListCommand(h), newClustersCheckCommand(h),
		newClustersJoinCommand(h), newClustersLeaveCommand(h))
	return cmd
}

func newClustersAddCommand(h *hubFlags) *cobra.Command {
	var memberKubeconfig, memberContext, hubKubeconfig, output string
	var labels []string
	var checkInterval time.Duration
	cmd := &cobra.Command{
		Use:   "add NAME --kubeconfig FILE",
		Short: "Register a member cluster: store its kubeconfig in a hub Secret and create its MemberCluster",
		Long: `Registers a member cluster. --kubeconfig is the MEMBER's kubeconfig here (its current
context, or --member-context); the hub is --hub-kubeconfig, else the files of $KUBECONFIG,
else ~/.kube/config, and --context picks the hub's context.
The kubeconfig is flattened (certificates embedded) and stored in the hub Secret
rewind-system/member-NAME-kubeconfig; it is never printed. Running add again updates both.`,
		Example: `  rewind clusters add prod-eu-1 --kubeconfig prod-eu-1.yaml --label env=prod --label region=eu \
    --hub-kubeconfig hub.yaml
  rewind clusters add prod-us-1 --kubeconfig fleet.yaml --member-context prod-us-1 --check-interval 1m -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return fmt.Errorf("cluster name %q is invalid: %s", name, strings.Join(errs, "; "))
			}
			if checkInterval < 0 {
				return fmt.Errorf("--check-interval must be positive, got %s", checkInterval)
			}
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			data, err := memberKubeconfigBytes(memberKubeconfig, memberContext)
			if err != nil {
				return err
			}
			hh := *h
			hh.kubeconfig = hubKubeconfig
			c, err := hh.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := ensureNS(cmd, c, kubeconfigNamespace); err != nil {
				return err
			}
			secretName := "member-" + name + "-kubeconfig"
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: kubeconfigNamespace}}
			err = c.Get(ctx, client.ObjectKeyFromObject(secret), secret)
			switch {
			case apierrors.IsNotFound(err):
				secret.Labels = map[string]string{controller.LabelMemberKubeconfig: "true", member.LabelManagedBy: member.ManagedBy}
				secret.Type = corev1.SecretTypeOpaque
				secret.Data = map[string][]byte{member.DefaultKubeconfigKey: data}
				if err := c.Create(ctx, secret); err != nil {
					return fmt.Errorf("creating Secret %s/%s: %w", kubeconfigNamespace, secretName, err)
				}
			case err != nil:
				return err
			default:
				if secret.Labels == nil {
					secret.Labels = map[string]string{}
				}
				secret.Labels[controller.LabelMemberKubeconfig] = "true"
				secret.Data = map[string][]byte{member.DefaultKubeconfigKey: data}
				if err := c.Update(ctx, secret); err != nil {
					return fmt.Errorf("updating Secret %s/%s: %w", kubeconfigNamespace, secretName, err)
				}
			}
			var interval *metav1.Duration
			if checkInterval > 0 {
				interval = &metav1.Duration{Duration: checkInterval}
			}
			mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}}
			err = c.Get(ctx, client.ObjectKeyFromObject(mc), mc)
			ref := v1alpha1.SecretKeyRef{Namespace: kubeconfigNamespace, Name: secretName, Key: member.DefaultKubeconfigKey}
			result := "created"
			switch {
			case apierrors.IsNotFound(err):
				mc.Labels = lbls
				mc.Spec.KubeconfigSecretRef = ref
				mc.Spec.CheckInterval = interval
				if err := c.Create(ctx, mc); err != nil {
					return hubError(fmt.Errorf("creating MemberCluster %s: %w", name, err))
				}
			case err != nil:
				return hubError(err)
			default:
				if mc.Labels == nil {
					mc.Labels = map[string]string{}
				}
				for k, v := range lbls {
					mc.Labels[k] = v
				}
				mc.Spec.KubeconfigSecretRef = ref
				if interval != nil {
					mc.Spec.CheckInterval = interval
				}
				if err := c.Update(ctx, mc); err != nil {
					return hubError(fmt.Errorf("updating MemberCluster %s: %w", name, err))
				}
				result = "updated"
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, mc); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "membercluster/%s %s\n", name, result)
			return nil
		},
	}
	cmd.Flags().StringVar(&memberKubeconfig, "kubeconfig", "", "kubeconfig FILE of the member cluster (required)")
	cmd.Flags().StringVar(&memberContext, "member-context", "", "context of the member kubeconfig to use (default: its current context)")
	cmd.Flags().StringVar(&hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().DurationVar(&checkInterval, "check-interval", 0, "how often the controller re-checks the member (default 30s)")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label k=v for the MemberCluster (repeatable); wave selectors match these")
	outputFlag(cmd, &output)
	requireFlags(cmd, "kubeconfig")
	return cmd
}

// memberKubeconfigBytes loads a kubeconfig file, keeps only the chosen context and embeds
// every referenced file, so the stored copy works anywhere.
func memberKubeconfigBytes(path, context string) ([]byte, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s cannot be parsed: %w", path, err)
	}
	if context != "" {
		if _, ok := cfg.Contexts[context]; !ok {
			return nil, fmt.Errorf("--member-context %q is not in %s", context, path)
		}
		cfg.CurrentContext = context
	}
	if cfg.CurrentContext == "" {
		return nil, fmt.Errorf("%s has no current context: pass --member-context", path)
	}
	if err := clientcmdapi.MinifyConfig(cfg); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: embedding its files: %w", path, err)
	}
	if _, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig(); err != nil {
		return nil, fmt.Errorf("--kubeconfig %s is not usable: %w", path, err)
	}
	return clientcmd.Write(*cfg)
}

func parseLabels(in []string) (map[string]string, error) {
	out := map[string]string{}
	for _, l := range in {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("--label %q must be key=value", l)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: key is invalid: %s", l, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--label %q: value is invalid: %s", l, strings.Join(errs, "; "))
		}
		out[k] = v
	}
	return out, nil
}

func ensureNS(cmd *cobra.Command, c client.Client, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(cmd.Context(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s in the hub: %w", name, err)
	}
	return nil
}

func newClustersListCommand(h *hubFlags) *cobra.Command {
	var output, selector string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List member clusters: reachable, Kubernetes version and installed operator versions",
		Long: `Lists the registered member clusters (MemberClusters are cluster-scoped, -n does not apply)
with what the controller last saw: whether the member is reachable, its Kubernetes version,
the operator releases it runs, and its age. A release is what the member's rollout targets
say now; the controller's mirror of the member's own record, up to a check interval late, is
shown beside it when the two differ.`,
		Example: `  rewind clusters list
  rewind clusters list -l env=prod -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			var list v1alpha1.MemberClusterList
			opts := []client.ListOption{}
			if selector != "" {
				sel, err := metav1.ParseToLabelSelector(selector)
				if err != nil {
					return fmt.Errorf("--selector %q: %w", selector, err)
				}
				s, err := metav1.LabelSelectorAsSelector(sel)
				if err != nil {
					return fmt.Errorf("--selector %q: %w", selector, err)
				}
				opts = append(opts, client.MatchingLabelsSelector{Selector: s})
			}
			if err := c.List(cmd.Context(), &list, opts...); err != nil {
				return hubError(err)
			}
			sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
			if ok, err := printStructured(cmd.OutOrStdout(), output, &list); ok {
				return err
			}
			// What the rollout targets say each member runs now; the mirror in the
			// MemberCluster is up to a check interval late. Without the right to list
			// targets in every namespace, the mirror alone is shown.
			var targets v1alpha1.RolloutTargetList
			byTargets := map[string]map[string]string{}
			if err := c.List(cmd.Context(), &targets); err == nil {
				byTargets = installedByTargets(targets.Items)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tREACHABLE\tVERSION\tINSTALLED\tAGE\tMESSAGE")
			for _, mc := range list.Items {
				reach, msg := "Unknown", "not checked yet (is `rewind controller` running?)"
				if cond := meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReachable); cond != nil {
					reach, msg = string(cond.Status), cond.Message
				}
				inst := installedColumn(&mc, byTargets[mc.Name], time.Now())
				if len(inst) == 0 {
					inst = []string{"-"}
				}
				age := duration.HumanDuration(time.Since(mc.CreationTimestamp.Time))
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", mc.Name, reach, dash(mc.Status.ServerVersion), strings.Join(inst, ","), age, msg)
			}
			return w.Flush()
		},
	}
	outputFlag(cmd, &output)
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, e.g. env=prod")
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
