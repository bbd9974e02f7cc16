package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rewind-dev/rewind/internal/testbed"
)

// defaultStateDir is where `rewind testbed up` keeps its state unless --state-dir is given.
func defaultStateDir() string {
	if d := os.Getenv("REWIND_TESTBED_STATE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "rewind", "testbed")
	}
	return filepath.Join(os.TempDir(), "rewind-testbed")
}

func newTestbedCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "testbed",
		Short: "Run a local hub and member clusters (real kube-apiserver + etcd) for trying rewind",
		Example: `  rewind testbed up --members 3
  rewind testbed status
  rewind testbed down`,
		Long: `A testbed is one etcd, a hub kube-apiserver and N member kube-apiservers, and, with
--workloads, a kube-controller-manager, kube-scheduler and kwok (with --nodes fake nodes that
carry the labels of real Linux nodes spread over three zones) per member so that Deployments
become Available. --member-latency makes the members look remote, --member-faults makes their
connections fail now and then. The binaries are built from Go modules by 'make testbed-bins'
(the first time takes about 15 minutes).`,
	}
	var stateDir, binDir string
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", defaultStateDir(), "folder for kubeconfigs, logs and the state file ($REWIND_TESTBED_STATE)")
	cmd.PersistentFlags().StringVar(&binDir, "bin-dir", os.Getenv(testbed.BinDirEnv), "folder with the testbed binaries ($"+testbed.BinDirEnv+"); empty builds them with hack/testbed/build.sh")

	var members, nodes int
	var workloads bool
	var memberLatency time.Duration
	var memberFaults bool
	var ff faultFlags
	var upOutput, statusOutput string
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a testbed in the background",
		Long: `Starts etcd, a hub API server and --members member API servers (with --workloads, also a
kube-controller-manager, kube-scheduler and kwok per member) as background processes, waits
until they are ready and prints each cluster's kubeconfig. The state (kubeconfigs, logs and
the process list) stays in --state-dir until 'testbed down'.

With --member-latency, each member's kubeconfig points at a proxy (a background
'rewind testbed proxy' process) that delays every chunk of bytes by that much in each
direction, as if the member were in another region; the member's own controllers talk to it
directly.

The same proxy injects faults between clients and the members, as real fleets see them:
  --member-reset-every resets every open connection to each member on that interval (a TCP
    RST to both sides) and then refuses new connections for --member-refuse-for (default
    1.5s), as a load balancer's failover or a managed control plane's restart does;
    --member-faults alone resets every 10s;
  --member-http-faults answers that fraction of requests itself with a Status like the API
    server's own (429 with Retry-After, 500, 503 or 504: --member-http-fault-codes), without
    forwarding them; --member-http-faults-mutating-only and --member-http-fault-path narrow
    them down. The proxy then terminates TLS with a certificate of the testbed's CA.
Every minute, the proxy writes how many faults it injected to logs/member-proxy.log in --state-dir.`,
		Example: `  rewind testbed up --members 3
  rewind testbed up --members 30 --member-latency 25ms
  rewind testbed up --members 1 --workloads=false --state-dir /tmp/tb -o json

  # Connections reset every 10s, new ones refused for 1.5s after each reset
  rewind testbed up --members 3 --member-faults

  # Resets every 5s, 50 ms round trips, and 5% of writes answered with 429 or 503
  rewind testbed up --members 3 --member-latency 25ms --member-reset-every 5s --member-refuse-for 2s \
    --member-http-faults 0.05 --member-http-fault-codes 429,503 --member-http-faults-mutating-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if members < 0 {
				return fmt.Errorf("--members must be 0 or more, got %d", members)
			}
			if nodes < 1 {
				return fmt.Errorf("--nodes must be 1 or more, got %d", nodes)
			}
			if memberLatency < 0 {
				return fmt.Errorf("--member-latency must be 0 or more, got %s", memberLatency)
			}
			if memberFaults && !cmd.Flags().Changed("member-reset-every") {
				ff.resetEvery = defaultResetEvery
			}
			opts := testbed.Options{
				Members: members, Workloads: workloads, Nodes: nodes, MemberLatency: memberLatency,
				BinDir: binDir, StateDir: stateDir, Detached: true, Log: cmd.ErrOrStderr(),
			}
			if ff.any() {
				faults, err := ff.faults()
				if err != nil {
					return fmt.Errorf("--member-*: %w", err)
				}
				opts.MemberFaults = &faults
			}
			if memberLatency > 0 || opts.MemberFaults != nil {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding the rewind executable to run the member proxy: %w", err)
				}
				opts.ProxyCommand = []string{exe, "testbed", "proxy"}
			}
			tb, err := testbed.Start(cmd.Context(), opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if ok, err := printStructured(out, upOutput, tb.Clusters()); ok {
				return err
			}
			fmt.Fprintf(out, "Testbed ready in %s (state: %s)\n", tb.StartupTime.Round(100*time.Millisecond), tb.StateDir)
			printClusters(out, tb.Clusters())
			fmt.Fprintf(out, "Stop it with: rewind testbed down --state-dir %s\n", tb.StateDir)
			return nil
		},
	}
	up.Flags().IntVar(&members, "members", 3, "number of member clusters")
	up.Flags().BoolVar(&workloads, "workloads", true, "run kube-controller-manager, kube-scheduler and kwok in each member")
	up.Flags().IntVar(&nodes, "nodes", testbed.DefaultNodes, "fake nodes per member with workloads (zones a, b, c in turn)")
	up.Flags().DurationVar(&memberLatency, "member-latency", 0, "delay of every chunk of bytes to and from each member's API server, in each direction (e.g. 25ms)")
	up.Flags().BoolVar(&memberFaults, "member-faults", false, fmt.Sprintf("reset every connection to each member every %s (unless --member-reset-every says otherwise) and refuse new ones for --member-refuse-for", defaultResetEvery))
	ff.bind(up.Flags(), "member-")
	outputFlag(up, &upOutput)

	status := &cobra.Command{
		Use:   "status",
		Short: "Show the clusters and processes of the running testbed",
		Long: `Reads the testbed state in --state-dir and shows each cluster (is its API server ready?
how much memory do its processes use?) and each process the testbed started (is it alive?
its resident memory). RSS is VmRSS of /proc/PID/status; it counts the pages of the program's
file, which every process running the same binary shares, so ANON (RssAnon, the process's
own memory) is what each more member costs. A cluster's figures are the sums over its
kube-apiserver, kube-controller-manager, kube-scheduler and kwok; etcd and the member proxy
serve every cluster and are counted in the total only.`,
		Example: `  rewind testbed status
  rewind testbed status --state-dir /tmp/tb -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := testbed.ReadState(stateDir)
			if err != nil {
				if os.IsNotExist(err) {
					return fmt.Errorf("no testbed is running with state dir %s (start one with `rewind testbed up`)", stateDir)
				}
				return err
			}
			report := newTestbedStatus(cmd.Context(), st)
			out := cmd.OutOrStdout()
			if ok, err := printStructured(out, statusOutput, report); ok {
				return err
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "CLUSTER\tSERVER\tREADY\tRSS\tANON\tKUBECONFIG")
			for _, c := range report.Clusters {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, c.Server, c.Ready, mib(c.RSS), mib(c.Anon), c.Kubeconfig)
			}
			w.Flush()
			fmt.Fprintln(out)
			w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROCESS\tPID\tALIVE\tRSS\tANON")
			for _, p := range report.Processes {
				fmt.Fprintf(w, "%s\t%d\t%v\t%s\t%s\n", p.Name, p.PID, p.Alive, mib(p.RSS), mib(p.Anon))
			}
			w.Flush()
			fmt.Fprintf(out, "\nTotal: RSS %s, anon %s\n", mib(report.Total.RSS), mib(report.Total.Anon))
			return nil
		},
	}

	outputFlag(status, &statusOutput)

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop every process the testbed started (by process-group id) and remove its state",
		Long: `Stops every process recorded in --state-dir by its process-group id (checking its start
time, so a reused id is never hit) and removes the state folder. Without a running testbed it
says so and succeeds.`,
		Example: `  rewind testbed down
  rewind testbed down --state-dir /tmp/tb`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := testbed.StopState(stateDir)
			if err != nil {
				if os.IsNotExist(err) {
					fmt.Fprintf(cmd.OutOrStdout(), "No testbed is running with state dir %s\n", stateDir)
					return nil
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Stopped %d processes\n", len(st.Processes))
			return os.RemoveAll(stateDir)
		},
	}
	cmd.AddCommand(up, status, down, newTestbedProxyCommand())
	return cmd
}

// testbedStatus is what `testbed status` reports.
type testbedStatus struct {
	Clusters  []testbedClusterStatus `json:"clusters"`
	Processes []testbedProcessStatus `json:"processes"`
	// Total is the resident memory of every live process of the testbed.
	Total testbed.Memory `json:"total"`
}

type testbedClusterStatus struct {
	Name       string `json:"name"`
	Server     string `json:"server"`
	Ready      string `json:"ready"`
	Kubeconfig string `json:"kubeconfig"`
	// Memory is the resident memory of the cluster's live processes (kube-apiserver and,
	// with workloads, kube-controller-manager, kube-scheduler and kwok).
	testbed.Memory
}

type testbedProcessStatus struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Alive bool   `json:"alive"`
	// Memory is the resident memory of the process (0 when it is gone).
	testbed.Memory
}

// newTestbedStatus reads the readiness of each cluster and the liveness and RSS of each
// process of the state.
func newTestbedStatus(ctx context.Context, st *testbed.State) testbedStatus {
	var report testbedStatus
	byCluster := map[string]testbed.Memory{}
	add := func(dst *testbed.Memory, m testbed.Memory) { dst.RSS += m.RSS; dst.Anon += m.Anon }
	for _, p := range st.Processes {
		ps := testbedProcessStatus{Name: p.Name, PID: p.PID, Alive: testbed.Alive(p)}
		if ps.Alive {
			ps.Memory, _ = testbed.ReadMemory(p)
		}
		m := byCluster[p.Cluster()]
		add(&m, ps.Memory)
		byCluster[p.Cluster()] = m
		add(&report.Total, ps.Memory)
		report.Processes = append(report.Processes, ps)
	}
	for _, c := range st.Clusters {
		report.Clusters = append(report.Clusters, testbedClusterStatus{
			Name: c.Name, Server: c.Server, Ready: clusterReady(ctx, c.Kubeconfig), Kubeconfig: c.Kubeconfig,
			Memory: byCluster[c.Name],
		})
	}
	return report
}

// mib prints a byte count in MiB, or "-" for none.
func mib(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fMi", float64(b)/(1<<20))
}

func printClusters(out io.Writer, clusters []*testbed.Cluster) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tSERVER\tWORKLOADS\tKUBECONFIG")
	for _, c := range clusters {
		fmt.Fprintf(w, "%s\t%s\t%v\t%s\n", c.Name, c.Server, c.Workloads, c.Kubeconfig)
	}
	w.Flush()
}

// clusterReady asks the API server of a kubeconfig for /readyz.
func clusterReady(ctx context.Context, kubeconfig string) string {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return "unknown (kubeconfig unreadable)"
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cfg.CAData)
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return "unknown"
	}
	req.Header.Set("Authorization", "Bearer "+cfg.BearerToken)
	resp, err := hc.Do(req)
	if err != nil {
		return "no (unreachable)"
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return "yes"
	}
	return fmt.Sprintf("no (HTTP %d)", resp.StatusCode)
}
