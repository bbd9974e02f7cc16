package cli

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/join"
)

func newClustersJoinCommand(h *hubFlags) *cobra.Command {
	var file, hubServer string
	var labels, bind []string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "join NAME --bootstrap-kubeconfig FILE",
		Short: "Register a pull member: its hub namespace, its agent's identity, and a single-use bootstrap token",
		Long: `Registers a member cluster in mode Pull, for a cluster the hub cannot reach or must hold no
credential for: rewind agent runs inside the member and reaches the hub.

On the hub, join creates the MemberCluster NAME (mode Pull), its hub namespace
rewind-member-NAME, the agent's ServiceAccount there with a Role limited to that namespace
(its RolloutTargets, releases, snapshots, Secrets, Lease) and a ClusterRole that lets it read
its own MemberCluster and write its status, and nothing else; and a bootstrap token.
Rollouts of the namespaces given with --bind may target the member (spec.boundNamespaces);
a pull member is bound to no namespace until it is bound.

The bootstrap token is written, in a kubeconfig for the hub, to --bootstrap-kubeconfig (mode
0600; it is never printed). It is good for one exchange, before --bootstrap-ttl ends: the
agent trades it for its own credential, which it renews before it expires, and the hub refuses
it afterwards. Running join again replaces the token (the earlier one is refused) and keeps
the agent's credential, if an agent joined. 'clusters leave NAME' revokes everything.

It prints how to start the agent: the 'agent' command, or the Helm chart in agent mode
(charts/rewind with agent.enabled, or kustomize's config/agent), which runs it as a pod in the
member with the bootstrap kubeconfig in the Secret rewind-system/rewind-agent-bootstrap.`,
		Example: `  rewind clusters join edge-berlin-7 --bootstrap-kubeconfig edge-berlin-7.bootstrap.yaml --label env=edge --bind team-db
  # the member reaches the hub at another address than this kubeconfig's; a day to install it
  rewind clusters join store-0042 --bootstrap-kubeconfig store-0042.yaml --hub-server https://hub.example.com:6443 \
    --bootstrap-ttl 24h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := join.ValidateName(name); err != nil {
				return err
			}
			lbls, err := parseLabels(labels)
			if err != nil {
				return err
			}
			for _, ns := range bind {
				if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
					return fmt.Errorf("--bind %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
				}
			}
			if _, err := os.Stat(file); err == nil {
				return fmt.Errorf("--bootstrap-kubeconfig %s exists: name a new file (a bootstrap token is written once, never over another file)", file)
			}
			cfg, err := h.config()
			if err != nil {
				return err
			}
			kc, err := bootstrapKubeconfig(cfg, hubServer, name)
			if err != nil {
				return err
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			b, err := join.Join(cmd.Context(), c, cs, name, join.Options{BootstrapTTL: ttl, Labels: lbls, Bind: bind})
			if err != nil {
				return hubError(err)
			}
			kc.AuthInfos["rewind-bootstrap"] = &clientcmdapi.AuthInfo{Token: b.Token}
			data, err := clientcmd.Write(*kc)
			if err != nil {
				return err
			}
			// O_EXCL: never over a file that appeared meanwhile.
			f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("--bootstrap-kubeconfig %s: %w (the token of this join is lost: run join again)", file, err)
			}
			if _, err := f.Write(data); err != nil {
				f.Close()
				return fmt.Errorf("--bootstrap-kubeconfig %s: %w (run join again)", file, err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("--bootstrap-kubeconfig %s: %w (run join again)", file, err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "membercluster/%s joined in mode Pull: hub namespace %s\n", name, b.Namespace)
			fmt.Fprintf(out, "bootstrap token written to %s, good for one exchange until %s; keep it secret\n",
				file, b.ExpiresAt.UTC().Format(time.RFC3339))
			fmt.Fprintf(out, "run the agent in the member (with the member's kubeconfig, or its in-cluster identity):\n")
			fmt.Fprintf(out, "  %s agent --cluster %s --bootstrap-kubeconfig %s --credential-file %s-agent-credential.json --member-kubeconfig MEMBER.yaml\n",
				h.prog, name, file, name)
			fmt.Fprintf(out, "or as a pod in the member (its kubectl context), with the Helm chart:\n")
			for _, line := range agentChartInstall(name, file) {
				fmt.Fprintf(out, "  %s\n", line)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "bootstrap-kubeconfig", "", "FILE to write the agent's bootstrap kubeconfig to (created, mode 0600; required)")
	cmd.Flags().StringVar(&hubServer, "hub-server", "", "URL the member reaches the hub's API server at (default: the server of the hub kubeconfig)")
	cmd.Flags().DurationVar(&ttl, "bootstrap-ttl", join.DefaultBootstrapTTL, fmt.Sprintf("how long the bootstrap token is good for, unused (%s to %s)", join.MinBootstrapTTL, join.MaxBootstrapTTL))
	cmd.Flags().StringArrayVar(&labels, "label", nil, "label k=v for the MemberCluster (repeatable); wave selectors match these")
	cmd.Flags().StringArrayVar(&bind, "bind", nil, "hub NAMESPACE whose Rollouts may target the member (repeatable; spec.boundNamespaces)")
	requireFlags(cmd, "bootstrap-kubeconfig")
	return cmd
}

// agentChartInstall are the commands that install the agent of member name in the member with
// charts/rewind (agent mode), given the bootstrap kubeconfig file join wrote.
func agentChartInstall(name, file string) []string {
	return []string{
		"kubectl create namespace rewind-system",
		"kubectl -n rewind-system create secret generic rewind-agent-bootstrap --from-file=bootstrap.yaml=" + file,
		"helm install rewind-agent charts/rewind -n rewind-system --set agent.enabled=true --set agent.clusterName=" + name,
	}
}

// bootstrapKubeconfig is a kubeconfig for the hub (server and CA of cfg, or server) in the
// member's hub namespace, without its credential yet.
func bootstrapKubeconfig(cfg *rest.Config, server, cluster string) (*clientcmdapi.Config, error) {
	if server == "" {
		server = cfg.Host
	}
	if !strings.HasPrefix(server, "https://") {
		return nil, fmt.Errorf("--hub-server %q must be an https:// URL: the agent sends its token to it", server)
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the hub's CA %s: %w", cfg.CAFile, err)
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca, InsecureSkipTLSVerify: len(ca) == 0 && cfg.Insecure}
	kc.Contexts["rewind-bootstrap"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "rewind-bootstrap", Namespace: v1alpha1.MemberNamespace(cluster)}
	kc.CurrentContext = "rewind-bootstrap"
	return kc, nil
}

func newClustersLeaveCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leave NAME",
		Short: "Remove a pull member: revoke its agent's credential, delete its hub namespace, RBAC and MemberCluster",
		Long: `Removes a pull member (one registered with 'clusters join') from the hub. Its agent's and
bootstrap ServiceAccounts are deleted first, so the hub refuses their tokens at once; then the
agent's ClusterRole and binding, the hub namespace rewind-member-NAME with everything in it
(the member's RolloutTargets, snapshots and Lease) and the MemberCluster. The agent in the
member stops on its next request. Running leave again removes whatever is left. A member in
mode Push is refused: delete its MemberCluster instead.`,
		Example: `  rewind clusters leave edge-berlin-7`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := join.ValidateName(name); err != nil {
				return err
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			left, err := join.Leave(cmd.Context(), c, name)
			if err != nil {
				return hubError(err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "membercluster/%s left: its agent's credential is revoked\n", name)
			if !left.Member {
				fmt.Fprintf(out, "(there was no MemberCluster %s; what was left of its identity is removed)\n", name)
			}
			if left.NamespaceTerminating {
				fmt.Fprintf(out, "hub namespace %s is being deleted\n", v1alpha1.MemberNamespace(name))
			}
			return nil
		},
	}
	return cmd
}
