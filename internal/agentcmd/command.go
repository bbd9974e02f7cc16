// Package agentcmd is the agent command, shared by the CLI (rewind agent) and the image's
// binary (rewind-controller agent), which runs it in a member's pod.
package agentcmd

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/internal/agent"
	"github.com/rewind-dev/rewind/internal/join"
)

// New returns the agent command.
func New() *cobra.Command {
	var o agent.Options
	var bootstrap, credentials, memberKubeconfig string
	cmd := &cobra.Command{
		Use:   "agent --cluster NAME --credential-file FILE [--bootstrap-kubeconfig FILE]",
		Short: "Run a pull member's agent: join the hub, keep its credential renewed, heartbeat",
		Long: `Runs in (or next to) a pull member cluster, registered on the hub with
'rewind clusters join NAME'. The first time, it trades the bootstrap token of
--bootstrap-kubeconfig for its own hub credential, limited to the member's hub namespace,
and keeps that in --credential-file (mode 0600); later runs go on with it. It renews the
credential at 80% of its lifetime, records this cluster's ID (its kube-system namespace's UID)
and version on its MemberCluster, refusing a MemberCluster another cluster already claimed, and
renews the Lease rewind-agent in its hub namespace, from which the hub tells whether the member
is alive. The member's API server is --member-kubeconfig, else $KUBECONFIG or ~/.kube/config,
else the pod's service account.

It runs the member's part of every Rollout that targets it: the hub's controller copies each
of the member's RolloutTargets (and the releases they name) into the member's hub namespace,
and the agent runs them with the same steps as the hub runs for a push member (precheck,
snapshot, staged apply, health gate, record; or restore), against this cluster's API server,
writing their status back. Snapshots go to the member's hub namespace, encrypted with the
member's own key there. Killed and started again, it resumes each target from its journal.

It stops with an error when the hub refuses its credential (the member left, or the
credential expired while the agent was stopped): run 'rewind clusters join NAME' again.`,
		Example: `  rewind agent --cluster edge-berlin-7 --bootstrap-kubeconfig edge-berlin-7.bootstrap.yaml \
    --credential-file /var/lib/rewind/agent-credential.json --member-kubeconfig edge-berlin-7.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := join.ValidateName(o.Cluster); err != nil {
				return fmt.Errorf("--cluster: %w", err)
			}
			if bootstrap != "" {
				if _, err := os.Stat(bootstrap); err != nil {
					// Once the agent holds its credential, the (spent) bootstrap token may be gone:
					// a pod's optional Secret volume.
					if _, cerr := os.Stat(credentials); cerr != nil {
						return fmt.Errorf("--bootstrap-kubeconfig %s: %w", bootstrap, err)
					}
					bootstrap = ""
				}
			}
			if bootstrap != "" {
				cfg, err := clientcmd.BuildConfigFromFlags("", bootstrap)
				if err != nil {
					return fmt.Errorf("--bootstrap-kubeconfig %s cannot be used: %w", bootstrap, err)
				}
				o.Bootstrap = cfg
			}
			member, err := memberConfig(memberKubeconfig)
			if err != nil {
				return err
			}
			o.Member = member
			o.Credentials = agent.CredentialFile{Path: credentials}
			log := zap.New(zap.WriteTo(cmd.ErrOrStderr()))
			ctrl.SetLogger(log)
			return agent.Run(ctrl.LoggerInto(cmd.Context(), log), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Cluster, "cluster", "", "the member's name in the hub, as given to rewind clusters join (required)")
	f.StringVar(&bootstrap, "bootstrap-kubeconfig", "", "bootstrap kubeconfig FILE that rewind clusters join wrote (needed until the agent holds a credential)")
	f.StringVar(&credentials, "credential-file", "", "FILE that keeps the agent's hub credential (created, mode 0600; required)")
	f.StringVar(&memberKubeconfig, "member-kubeconfig", "", "kubeconfig FILE of the member (default: $KUBECONFIG, ~/.kube/config, else in-cluster)")
	f.DurationVar(&o.CredentialTTL, "credential-ttl", join.DefaultCredentialTTL, "lifetime asked for the hub credential (the hub may grant less)")
	f.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", agent.DefaultHeartbeatInterval, "how often the agent renews its Lease")
	f.IntVar(&o.Workers, "workers", 32, "how many of the member's targets run at once")
	f.DurationVar(&o.GatePoll, "gate-poll", 2*time.Second, "how often an unhealthy cluster is checked again during a health gate")
	f.Int64Var(&o.RestoreMemory, "restore-memory", 0, "bytes of snapshot content restores may hold in memory at once (0: unbounded)")
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", "0", "address the agent serves its metrics on (0: off)")
	for _, n := range []string{"cluster", "credential-file"} {
		if err := cmd.MarkFlagRequired(n); err != nil {
			panic(err)
		}
	}
	return cmd
}

// memberConfig is the member's API server: a kubeconfig file, else the default loading rules
// (which end with the in-cluster service account).
func memberConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--member-kubeconfig %s: %w", path, err)
		}
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the member's kubeconfig (set --member-kubeconfig): %w", err)
	}
	cfg.QPS, cfg.Burst = 20, 40
	return cfg, nil
}
