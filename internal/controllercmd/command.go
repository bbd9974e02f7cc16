// Package controllercmd is the command line of rewind's manager: the flags of the
// rewind-controller binary (the one the image runs) and of `rewind controller`. It carries no
// test harness, demo or sample operator.
package controllercmd

import (
	"fmt"
	"math"
	"net"
	"runtime/debug"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/version"
)

// Long is the description shared by both commands.
const Long = `Runs rewind's reconcilers (MemberCluster, OperatorRelease, Rollout, RolloutTarget,
SnapshotStore, SnapshotSchedule, NotificationPolicy and notifications) against the hub until it is stopped (SIGINT or SIGTERM). In a pod it uses the pod's service account; elsewhere the hub is
chosen as kubectl chooses it (--kubeconfig, $KUBECONFIG, ~/.kube/config; --context).

Logs are JSON on stderr unless --dev-log. /healthz and /readyz answer on
--health-probe-bind-address. Metrics are served over HTTPS on --metrics-bind-address, only to
clients the hub authenticates and authorizes for GET /metrics (a ClusterRole with
nonResourceURLs: ["/metrics"], verbs: ["get"]); --metrics-secure=false serves plain HTTP.

With --dashboard-bind-address it also serves the web dashboard of --dashboard-namespace (HTTPS,
on every replica): every request is authenticated with the caller's bearer token (TokenReview)
and authorised for them (SubjectAccessReview: get and list rollouts.rewind.dev to see it, update
rollouts to act when --dashboard-enable-actions, each action run with the user's own token);
browsers sign in on /login.

With --leader-elect several replicas run and one reconciles; a standby takes over at most
--leader-election-lease-duration after the leader died.`

// AddFlags registers the manager's flags on cmd and returns the options they fill and the
// dev-log switch.
func AddFlags(cmd *cobra.Command) (*controller.Options, *bool) {
	o := &controller.Options{}
	devLog := new(bool)
	// Flag values are checked before the command runs (before any kubeconfig is read).
	cmd.PreRunE = func(*cobra.Command, []string) error { return Validate(o) }
	f := cmd.Flags()
	o.RestoreMemory, _ = target.ParseMemoryBudget(DefaultRestoreMemory)
	f.Var(&memoryFlag{v: &o.RestoreMemory, s: DefaultRestoreMemory}, "restore-memory", "the most snapshot content (uncompressed) that running restores hold in memory at once; their live heap is about 3.5 times that. A restore that does not fit waits; one larger than the budget runs alone; 0 is no bound. Default: a sixteenth of the Go memory limit when one is set (GOMEMLIMIT, or 90% of the pod's memory limit), else "+DefaultRestoreMemory)
	f.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus metrics endpoint; 0 disables it")
	f.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve metrics over HTTPS to authenticated and authorized clients only (TokenReview and SubjectAccessReview against the hub)")
	f.StringVar(&o.MetricsCertDir, "metrics-cert-dir", "", "folder with tls.crt and tls.key for the metrics endpoint (default: a self-signed certificate)")
	f.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	f.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "address of Go's /debug/pprof profiling endpoints, unauthenticated: bind it to localhost or leave it off (0)")
	f.BoolVar(&o.LeaderElection, "leader-elect", false, "elect a leader so that only one replica reconciles")
	f.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease (default "+controller.DefaultSystemNamespace+")")
	f.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a standby waits after the last renewal before it takes the lead")
	f.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives the lead up (less than the lease duration)")
	f.DurationVar(&o.RetryPeriod, "leader-election-retry-period", 2*time.Second, "how often candidates try to acquire or renew the lease")
	f.StringSliceVar(&o.KubeconfigNamespaces, "kubeconfig-namespaces", []string{controller.DefaultSystemNamespace}, "namespaces whose member kubeconfig Secrets (labelled "+controller.LabelMemberKubeconfig+"=true) are watched")
	f.IntVar(&o.TargetWorkers, "target-workers", 32, "how many member clusters' steps run at once")
	f.DurationVar(&o.ProbeInterval, "probe-interval", member.DefaultProbeInterval, "how often every member's API server is probed (GET /version); the probe, not one failed request, decides that a member is unreachable")
	f.IntVar(&o.ProbeFailureThreshold, "probe-failure-threshold", member.DefaultProbeFailureThreshold, "consecutive failed probes after which a member is unreachable (its Reachable condition False); its targets wait once that lasts longer than its spec.unreachableTimeout")
	f.Float32Var(&o.HubQPS, "kube-api-qps", 200, "the most requests per second to the hub API server, on average (its API priority and fairness protects it too)")
	f.IntVar(&o.HubBurst, "kube-api-burst", 500, "the most requests to the hub API server in a burst above --kube-api-qps (a wave of N clusters makes about 25 hub requests per cluster)")
	f.DurationVar(&o.GatePoll, "gate-poll", 2*time.Second, "how often unhealthy clusters are re-checked during a health gate or bake")
	f.StringVar(&o.DashboardAddr, "dashboard-bind-address", "0", "address of the web dashboard (HTTPS; every request authenticated and authorised through the hub with TokenReview and SubjectAccessReview); 0 disables it")
	f.StringVar(&o.DashboardNamespace, "dashboard-namespace", "", "hub namespace whose rollouts the dashboard shows (required with --dashboard-bind-address)")
	f.BoolVar(&o.DashboardActions, "dashboard-enable-actions", false, "show the dashboard's approve, pause, resume, rollback and retry buttons, to users allowed to update rollouts.rewind.dev in the namespace; each action runs with the user's own token")
	f.StringVar(&o.DashboardCertDir, "dashboard-cert-dir", "", "folder with tls.crt and tls.key for the dashboard (default: a self-signed certificate)")
	f.BoolVar(&o.DashboardInsecure, "dashboard-insecure", false, "serve the dashboard over plain HTTP (only behind a proxy that terminates TLS: tokens cross the wire)")
	f.BoolVar(devLog, "dev-log", false, "human-readable logs instead of JSON")
	return o, devLog
}

// DefaultRestoreMemory is --restore-memory's default when the Go runtime has no memory limit.
const DefaultRestoreMemory = "8Mi"

// DefaultRestoreBudget is --restore-memory's default for a Go memory limit (math.MaxInt64:
// none): a sixteenth of the limit, as restores' live heap is about 3.5 times their snapshots'
// content and the collector needs as much again above it (restores then take under half the
// limit); without a limit, DefaultRestoreMemory.
func DefaultRestoreBudget(goMemLimit int64) int64 {
	if goMemLimit > 0 && goMemLimit < math.MaxInt64 {
		return max(goMemLimit/16, 1<<20)
	}
	n, _ := target.ParseMemoryBudget(DefaultRestoreMemory)
	return n
}

// memoryFlag is a quantity of bytes.
type memoryFlag struct {
	v *int64
	s string
}

func (m *memoryFlag) String() string { return m.s }
func (m *memoryFlag) Type() string   { return "quantity" }
func (m *memoryFlag) Set(s string) error {
	n, err := target.ParseMemoryBudget(s)
	if err != nil {
		return err
	}
	*m.v, m.s = n, s
	return nil
}

// Validate checks flag values that depend on each other.
func Validate(o *controller.Options) error {
	if o.HubQPS <= 0 || o.HubBurst < 1 {
		return fmt.Errorf("--kube-api-qps (%g) and --kube-api-burst (%d) must be positive", o.HubQPS, o.HubBurst)
	}
	if o.LeaderElection && !(o.RetryPeriod < o.RenewDeadline && o.RenewDeadline < o.LeaseDuration) {
		return fmt.Errorf("leader election needs --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)",
			o.RetryPeriod, o.RenewDeadline, o.LeaseDuration)
	}
	if o.DashboardAddr != "" && o.DashboardAddr != "0" {
		if o.DashboardNamespace == "" {
			return fmt.Errorf("--dashboard-namespace is required with --dashboard-bind-address %s: name the hub namespace whose rollouts the dashboard shows", o.DashboardAddr)
		}
		if _, _, err := net.SplitHostPort(o.DashboardAddr); err != nil {
			return fmt.Errorf("--dashboard-bind-address %q: %w (want host:port, e.g. :8444)", o.DashboardAddr, err)
		}
	}
	return nil
}

// Run starts the manager with o against the hub of cfg and blocks until the command's
// context ends. The flags were checked by the PreRunE that AddFlags installed.
func Run(cmd *cobra.Command, cfg *rest.Config, o *controller.Options, devLog bool) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(devLog), zap.WriteTo(cmd.ErrOrStderr())))
	log := ctrl.Log.WithName("setup")
	v := version.Get()
	log.Info("starting the rewind manager", "version", v.Version, "commit", v.Commit, "goVersion", v.GoVersion,
		"hub", cfg.Host, "leaderElection", o.LeaderElection)
	// In a pod with a memory limit, the Go runtime's soft limit is 90% of it (unless
	// GOMEMLIMIT is set): the garbage collector works harder before the kernel kills the pod.
	if limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(0.9), memlimit.WithProvider(memlimit.FromCgroup)); err != nil {
		log.Info("the memory limit of the cgroup is not applied to the Go runtime", "reason", err.Error())
	} else if limit > 0 {
		log.Info("Go memory limit set from the cgroup's", "GOMEMLIMIT", limit)
	}
	if f := cmd.Flags().Lookup("restore-memory"); f != nil && !f.Changed {
		o.RestoreMemory = DefaultRestoreBudget(debug.SetMemoryLimit(-1))
	}
	log.Info("restore memory budget", "restoreMemory", target.NewMemoryBudget(o.RestoreMemory).String())
	mgr, err := controller.NewManager(cfg, *o)
	if err != nil {
		return err
	}
	return mgr.Start(cmd.Context())
}
