package cli

import (
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/internal/controller"
)

func newControllerCommand(h *hubFlags) *cobra.Command {
	var o controller.Options
	var devLog bool
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the rewind manager (the reconcilers) against a hub cluster",
		Long: `Runs the MemberCluster and Rollout reconcilers against the hub until it is stopped (SIGINT or
SIGTERM). In a pod it uses the pod's service account; elsewhere the hub is chosen as kubectl
chooses it (--kubeconfig, $KUBECONFIG, ~/.kube/config; --context). Logs are JSON on stderr
unless --dev-log; /healthz and /readyz answer on --health-probe-bind-address.`,
		Example: `  # out of cluster, against a hub given by a kubeconfig
  rewind controller --kubeconfig ~/.kube/hub.yaml --leader-elect
  # against the hub context of a merged $KUBECONFIG, with readable logs
  KUBECONFIG=~/.kube/config:~/.kube/fleet.yaml rewind controller --context hub --dev-log`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseDevMode(devLog), zap.WriteTo(cmd.ErrOrStderr())))
			cfg, err := h.config()
			if err != nil {
				return err
			}
			mgr, err := controller.NewManager(cfg, o)
			if err != nil {
				return err
			}
			return mgr.Start(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	f.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.BoolVar(&o.LeaderElection, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease (default rewind-system)")
	f.BoolVar(&devLog, "dev-log", false, "human-readable logs instead of JSON")
	return cmd
}
