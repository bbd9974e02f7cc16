package testbed

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const readyTimeout = 3 * time.Minute

func (t *Testbed) startEtcd(ctx context.Context) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	args := []string{
		"--name=rewind-testbed",
		"--data-dir=" + filepath.Join(t.StateDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=rewind-testbed=" + peer,
		"--unsafe-no-fsync=true",
		"--quota-backend-bytes=" + strconv.Itoa(8<<30),
		"--log-level=warn",
	}
	p, err := startProcess("etcd", t.bins.Etcd, args, filepath.Join(t.StateDir, "logs", "etcd.log"), !t.opts.Detached)
	if err != nil {
		return err
	}
	if !t.track(p) {
		return errStopped
	}
	t.etcd = p
	t.etcdURL = client
	hc := &http.Client{Timeout: 2 * time.Second}
	err = pollUntil(ctx, readyTimeout, p, func() bool {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if err != nil {
		log := filepath.Join(t.StateDir, "logs", "etcd.log")
		return fmt.Errorf("testbed: etcd did not become healthy (log: %s): %w%s", log, err, logTail(log))
	}
	return nil
}

// logTailLines is how much of a component's log an error of its start carries: the state
// directory, logs included, is removed when the testbed stops, so a start that failed is
// otherwise not explained.
const logTailLines = 15

// logTail is the end of the log at path, for an error message: "" when it cannot be read.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return "; the log ends with:\n  " + strings.Join(lines, "\n  ")
}

// pollUntil polls cond every 100ms until it holds, the process p exits, or timeout.
func pollUntil(ctx context.Context, timeout time.Duration, p *process, cond func() bool) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if p != nil && p.exited() {
			return false, fmt.Errorf("%s exited", p.rec.Name)
		}
		return cond(), nil
	})
}

func (c *Cluster) logPath(component string) string {
	return filepath.Join(c.tb.StateDir, "logs", component+"-"+c.Name+".log")
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	t := c.tb
	certFile, keyFile, err := t.pki.servingCert("apiserver-" + c.Name)
	if err != nil {
		return err
	}
	c.apiArgs = []string{
		"--etcd-servers=" + t.etcdURL,
		"--etcd-prefix=/" + c.Name,
		"--secure-port=" + strconv.Itoa(c.port),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + certFile,
		"--tls-private-key-file=" + keyFile,
		"--cert-dir=" + filepath.Join(t.StateDir, "certs-"+c.Name),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + t.pki.saPubKey,
		"--service-account-signing-key-file=" + t.pki.saPrivKey,
		"--token-auth-file=" + t.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--profiling=%t", t.opts.Profiling),
		// Webhook Services resolve through their EndpointSlices, not their ClusterIP (there is no
		// kube-proxy): the sample operator's runner publishes its conversion webhook that way.
		"--enable-aggregator-routing=true",
		"--etcd-db-metric-poll-interval=0",
	}
	if c.Name != HubName || !t.opts.HubPriorityAndFairness {
		// No queueing by priority level, more requests at once, and no periodic counting of
		// every resource type in etcd (a metric only, and only an input of priority and
		// fairness): with 30 members sharing one etcd that is 30 scans a minute for nothing.
		// With Options.HubPriorityAndFairness the hub keeps the API server's defaults.
		c.apiArgs = append(c.apiArgs, "--enable-priority-and-fairness=false",
			"--max-requests-inflight=1000", "--max-mutating-requests-inflight=500", "--etcd-count-metric-poll-period=0")
	}
	if err := c.writeKubeconfig(); err != nil {
		return err
	}
	return c.runAPIServer(ctx)
}

// memberAPIServerEnv lightens member API servers: the Go heap may grow to 1.5 times the live
// heap instead of 2 times. Measured with 5 members (README, "A local testbed by hand"): 40 MiB
// less resident memory per member idle and 100 MiB less with a chart's CRDs installed, for
// about 18% more API-server CPU time. A GOMEMLIMIT was tried and left out: set below the live
// heap (150 MiB, with the CRDs of external-secrets installed) it made the collector run
// constantly, nine times the CPU.
var memberAPIServerEnv = []string{"GOGC=50"}

func (c *Cluster) runAPIServer(ctx context.Context) error {
	var env []string
	if c.Name != HubName {
		env = memberAPIServerEnv
	}
	p, err := startProcess("kube-apiserver/"+c.Name, c.tb.bins.APIServer, c.apiArgs, c.logPath("kube-apiserver"), !c.tb.opts.Detached, env...)
	if err != nil {
		return err
	}
	if !c.tb.track(p) {
		return errStopped
	}
	c.mu.Lock()
	c.api = p
	c.mu.Unlock()
	if err := c.waitReady(ctx, p); err != nil {
		return fmt.Errorf("testbed: API server %s did not become ready (log: %s): %w%s", c.Name, c.logPath("kube-apiserver"), err, logTail(c.logPath("kube-apiserver")))
	}
	return nil
}

// waitReady waits until the API server answers /readyz, asked directly (not through the
// member proxy, which may be refusing connections or answering with faults).
func (c *Cluster) waitReady(ctx context.Context, p *process) error {
	server := c.Server
	if c.DirectServer != "" {
		server = c.DirectServer
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.tb.pki.ca.PEM)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	return pollUntil(ctx, readyTimeout, p, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.tb.pki.adminTok)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// StopAPIServer stops this cluster's API server (to simulate an unreachable cluster): SIGTERM,
// as a rolling restart does (SIGKILL after 10 s), and waits until it has exited. Its own
// controllers, scheduler and kwok keep running and reconnect once it is back.
func (c *Cluster) StopAPIServer() {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	c.stopAPIServer()
}

func (c *Cluster) stopAPIServer() {
	c.mu.Lock()
	p := c.api
	c.api = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	p.stop(10 * time.Second)
	c.tb.untrack(p)
}

// StartAPIServer starts this cluster's API server again after StopAPIServer, with the same
// arguments (same etcd and prefix, so the same data; same port; same serving certificate),
// and waits until it is ready. It does nothing if the API server runs.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.lifecycle.Lock()
	defer c.lifecycle.Unlock()
	return c.startAPIServerAgain(ctx)
}

func (c *Cluster) startAPIServerAgain(ctx context.Context) error {
	c.mu.Lock()
	running := c.api != nil
	c.mu.Unlock()
	if running {
		return nil
	}
	return c.runAPIServer(ctx)
}

// RestartAPIServer restarts this cluster's kube-apiserver as a managed control plane's
// upgrade does: it stops it (StopAPIServer), starts it again on the same port with the same
// etcd data and serving certificate (StartAPIServer), and waits until it is ready. Clients
// (through the member proxy or not) see their connections end and new ones refused until
// it is back; client-go reconnects by itself.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	return <-c.BeginRestartAPIServer(ctx)
}

// BeginRestartAPIServer is RestartAPIServer for a precise moment (e.g. a hook called when a
// step starts): it returns once the API server has stopped, and starts it again in the
// background; the channel receives the result once it is ready again (nil) or could not
// start. Other Stop, Start and Restart calls on the cluster wait until the restart is over.
func (c *Cluster) BeginRestartAPIServer(ctx context.Context) <-chan error {
	done := make(chan error, 1)
	c.lifecycle.Lock()
	c.stopAPIServer()
	go func() {
		defer c.lifecycle.Unlock()
		err := c.startAPIServerAgain(ctx)
		if err != nil {
			err = fmt.Errorf("restarting the API server of %s: %w", c.Name, err)
		}
		done <- err
	}()
	return done
}

func (c *Cluster) startWorkloads(ctx context.Context) error {
	t := c.tb
	cs, err := kubernetes.NewForConfig(c.directRESTConfig())
	if err != nil {
		return err
	}
	nodes, err := c.createNodes(ctx, cs)
	if err != nil {
		return err
	}

	kcmArgs := []string{
		"--kubeconfig=" + c.localKubeconfig,
		"--controllers=deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller,job-controller,cronjob-controller,disruption-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller",
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=200",
		"--kube-api-burst=400",
		"--concurrent-gc-syncs=20",
	}
	schedArgs := []string{"--kubeconfig=" + c.localKubeconfig, "--leader-elect=false", "--secure-port=0"}
	kwokArgs := []string{
		"--kubeconfig=" + c.localKubeconfig,
		"--manage-all-nodes=true",
		"--config=" + t.bins.KwokStages,
		"--server-address=",
	}
	for _, s := range []struct {
		name, bin string
		args      []string
	}{
		{"kube-controller-manager", t.bins.ControllerManager, kcmArgs},
		{"kube-scheduler", t.bins.Scheduler, schedArgs},
		{"kwok", t.bins.Kwok, kwokArgs},
	} {
		p, err := startProcess(s.name+"/"+c.Name, s.bin, s.args, c.logPath(s.name), !t.opts.Detached)
		if err != nil {
			return err
		}
		if !t.track(p) {
			return errStopped
		}
		c.mu.Lock()
		c.helpers = append(c.helpers, p)
		c.mu.Unlock()
	}

	// Wait for kwok to make every node Ready, then remove the not-ready taint that only the
	// node-lifecycle controller (not run here) would remove.
	var lastErr error
	err = pollUntil(ctx, readyTimeout, nil, func() bool {
		for _, h := range c.helpers {
			if h.exited() {
				log := c.logPath(strings.SplitN(h.rec.Name, "/", 2)[0])
				lastErr = fmt.Errorf("%s exited (log: %s)%s", h.rec.Name, log, logTail(log))
				return true
			}
		}
		for _, n := range nodes {
			if !readyNode(ctx, cs, n) {
				return false
			}
		}
		return true
	})
	if err == nil {
		err = lastErr
	}
	if err != nil {
		return fmt.Errorf("testbed: the fake nodes of %s did not become ready: %w", c.Name, err)
	}
	return nil
}

func clientcmdKubeconfig(name, server string, ca []byte, token string) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[name+"-admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name + "-admin"}
	cfg.CurrentContext = name
	return cfg
}
