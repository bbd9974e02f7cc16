//go:build !unit

// Package fleet benchmarks rewind on a fleet: N members (default 20) reached through a proxy
// that adds 25 ms each way (50 ms round trip, like remote regions), each with 200 MySQLClusters
// and their children, the controller running as its own process. It measures, each figure
// beside its baseline from the same run:
//
//	(a) an upgrade wave of N-1 clusters at maxConcurrency N-1 against the canary wave of 1;
//	(b) a RollbackAll of every cluster against the rollback of one;
//	(c) the controller's peak RSS during (a) and (b);
//	(d) hub API requests per cluster per rollout, and the Rollout's status size, at N clusters
//	    and extrapolated to 1,000;
//	(e) the chaos run: the cycle of (a) and (b) again with every open connection to every member
//	    reset every 10 s, against the same cycle without faults before and after it: the faults
//	    injected, the retries the controller made, the outcome (every member compared object by
//	    object with its snapshot) and the wall times (REWIND_FLEET_CHAOS=off skips it);
//	(f) pull mode: the same members joined in mode Pull, one real agent process per member,
//	    the same upgrade and RollbackAll: the hub controller's CPU and hub API requests per
//	    cluster against push mode's in (a) and (b), and the agents' (REWIND_FLEET_PULL=off skips
//	    it; pull_test.go).
//
// Run it with `make bench-fleet`.
package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controllercmd"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var env *testbed.Testbed

// members is the fleet's size (REWIND_FLEET_MEMBERS, default 20).
var members = func() int {
	if n, err := strconv.Atoi(os.Getenv("REWIND_FLEET_MEMBERS")); err == nil && n >= 2 {
		return n
	}
	return 20
}()

// crsPerMember is the number of MySQLClusters on each member (REWIND_FLEET_CRS, default 200).
var crsPerMember = func() int {
	if n, err := strconv.Atoi(os.Getenv("REWIND_FLEET_CRS")); err == nil && n >= 1 {
		return n
	}
	return 200
}()

const (
	latency = 25 * time.Millisecond
	// gateTimeout is the rollouts' health gate timeout: the failed release of (b) and (e)
	// fails its gate on the last member after it.
	gateTimeout = 30 * time.Second
	commit      = "0123456789abcdef0123456789abcdef01234567"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		// No benchmark selected (e.g. `go test ./...`): no fleet needed.
		os.Exit(m.Run())
	}
	// MemberFaults with nothing in it: every member is behind the member proxy (as
	// MemberLatency alone puts it, through the same code), and the chaos run (e) turns its
	// faults on and off at run time.
	testenv.Main(m, testbed.Options{Members: members, Workloads: true, Nodes: 1, MemberLatency: latency, MemberFaults: &testbed.Faults{},
		Profiling: profileDir != ""}, &env)
}

// avoidMarked makes the operator unschedulable on nodes labelled rewind.dev/broken=true.
const avoidMarked = "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: rewind.dev/broken, operator: NotIn, values: [\"true\"]}]}]}}}\n"

func makeRelease(b *testing.B, hub client.Client, ns, name, version, podSpec string) {
	b.Helper()
	if err := testfixture.CreateRelease(context.Background(), hub, b.TempDir(), ns, name, version, podSpec); err != nil {
		b.Fatal(err)
	}
}

// controllerProcess is rewind's controller running as its own process.
type controllerProcess struct {
	metricsEndpoint
	cmd *exec.Cmd
	// bin is the binary it runs (the image's: the pull agents of (f) run its agent command).
	bin     string
	pprof   string // base URL of /debug/pprof, when REWIND_FLEET_PPROF is set
	mu      sync.Mutex
	peakRSS int64
	// peakAnon is the peak of RssAnon: RSS without the pages of the program's file.
	peakAnon int64
	stop     chan struct{}
	done     chan struct{}
}

func freePort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startController builds and starts rewind-controller, the binary the image runs, against
// the hub and samples its RSS.
func startController(b *testing.B) *controllerProcess {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "rewind-controller")
	// Built as `make image` builds it (static, stripped).
	build := exec.Command("go", "build", "-trimpath", "-tags", "disable_grpc_modules", "-ldflags", "-s -w", "-o", bin, "github.com/rewind-dev/rewind/cmd/rewind-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building rewind-controller: %v\n%s", err, out)
	}
	port := freePort(b)
	p := &controllerProcess{bin: bin, metricsEndpoint: metricsEndpoint{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}, stop: make(chan struct{}), done: make(chan struct{})}
	args := []string{"--kubeconfig", env.Hub.Kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0",
		"--target-workers", "32", "--gate-poll", "500ms", "--metrics-secure=false"}
	if profileDir != "" {
		pp := freePort(b)
		p.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pp)
		args = append(args, "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pp))
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logFile, err := os.Create(filepath.Join(env.StateDir, "controller.log"))
	if err != nil {
		b.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if rss, anon := memOf(p.cmd.Process.Pid); rss > 0 {
				p.mu.Lock()
				p.peakRSS, p.peakAnon = max(p.peakRSS, rss), max(p.peakAnon, anon)
				p.mu.Unlock()
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	b.Cleanup(func() {
		close(p.stop)
		<-p.done
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Wait()
		logFile.Close()
		if profileDir != "" {
			if data, err := os.ReadFile(logFile.Name()); err == nil {
				_ = os.WriteFile(filepath.Join(profileDir, "controller.log"), data, 0o644)
			}
		}
	})
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get(p.metrics)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		b.Fatalf("the controller's metrics endpoint did not come up (log: %s)", logFile.Name())
	}
	return p
}

// profileDir (REWIND_FLEET_PPROF) receives the controller's CPU profile of (a) and of (b), its
// heap profile at each one's peak, and the CPU profiles of every member's API server and the
// hub's, for `go tool pprof`.
var profileDir = os.Getenv("REWIND_FLEET_PPROF")

// fetchProfile saves the controller's pprof endpoint name (with query) to file.
func (p *controllerProcess) fetchProfile(name, file string) error {
	resp, err := http.Get(p.pprof + "/" + name)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", name, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(profileDir, file), data, 0o644)
}

// profileDuring saves a CPU profile of the next seconds, and heap profiles every second while
// RSS is at a new peak, until stop is closed.
func (p *controllerProcess) profileDuring(b *testing.B, label string, seconds int) (stop func()) {
	if profileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.fetchProfile(fmt.Sprintf("profile?seconds=%d", seconds), label+".cpu.pprof"); err != nil {
			b.Logf("cpu profile: %v", err)
		}
	})
	// Every member's API server and the hub's: their own profiles (`go tool pprof` merges
	// the members' when given them all).
	clusters := map[string]*testbed.Cluster{"hub": env.Hub}
	for _, m := range env.Members {
		clusters["member-"+m.Name] = m
	}
	for name, c := range clusters {
		wg.Go(func() {
			rc, err := rest.RESTClientFor(restConfigForRaw(c.RESTConfig()))
			if err != nil {
				b.Logf("%s profile: %v", name, err)
				return
			}
			data, err := rc.Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(seconds)).DoRaw(context.Background())
			if err != nil {
				b.Logf("%s profile: %v", name, err)
				return
			}
			if err := os.WriteFile(filepath.Join(profileDir, label+"."+name+"-apiserver.cpu.pprof"), data, 0o644); err != nil {
				b.Logf("%s profile: %v", name, err)
			}
		})
	}
	wg.Go(func() {
		var peak int64
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if rss, _ := memOf(p.cmd.Process.Pid); rss > peak {
				peak = rss
				if err := p.fetchProfile("heap", label+".heap.pprof"); err != nil {
					b.Logf("heap profile: %v", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// restConfigForRaw prepares cfg for a raw REST client (no API group).
func restConfigForRaw(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.Timeout = time.Minute
	return c
}

// cpuTimes returns the CPU seconds used so far by each kind of testbed process (etcd,
// kube-apiserver of the hub, kube-apiserver of the members, ...), by this process (the
// benchmark: its clients and any in-process latency proxy) and by the controller.
func cpuTimes(p *controllerProcess) map[string]float64 {
	out := map[string]float64{"controller": procCPU(p.cmd.Process.Pid), "benchmark process": procCPU(os.Getpid())}
	for _, r := range env.Processes() {
		kind, cluster, _ := strings.Cut(r.Name, "/")
		switch {
		case cluster == "hub":
			kind += " (hub)"
		case cluster != "":
			kind += " (members)"
		}
		out[kind] += procCPU(r.PID)
	}
	return out
}

// cpuSample is the machine's busy CPU seconds and the controller's at one time.
type cpuSample struct {
	at               time.Time
	busy, controller float64
}

// cpuSampler reads the machine's and the controller's CPU seconds every 100 ms, so that the
// CPU spent within a window found later (a wave's first start to its last finish) can be
// read back.
type cpuSampler struct {
	mu      sync.Mutex
	samples []cpuSample
	stop    chan struct{}
	done    sync.WaitGroup
}

func sampleCPU(p *controllerProcess) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{})}
	read := func() {
		c := cpuSample{at: time.Now(), busy: machineBusy(), controller: p.cpuSeconds()}
		s.mu.Lock()
		s.samples = append(s.samples, c)
		s.mu.Unlock()
	}
	read()
	s.done.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				read()
				return
			case <-t.C:
				read()
			}
		}
	})
	return s
}

// Stop ends the sampling (with one last sample).
func (s *cpuSampler) Stop() {
	close(s.stop)
	s.done.Wait()
}

// within returns the machine's busy CPU seconds and the controller's between the last sample
// at or before from and the first at or after to, and that span's length.
func (s *cpuSampler) within(from, to time.Time) (busy, controller float64, span time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last := s.samples[0], s.samples[len(s.samples)-1]
	for _, c := range s.samples {
		if !c.at.After(from) {
			first = c
		}
	}
	for i := len(s.samples) - 1; i >= 0; i-- {
		if !s.samples[i].at.Before(to) {
			last = s.samples[i]
		}
	}
	return last.busy - first.busy, last.controller - first.controller, last.at.Sub(first.at)
}

// floor formats what a window's CPU work means on this machine: the busy CPU seconds above the
// idle background, and the shortest wall time they take on its cores, with and without the
// controller's share, next to the target.
func floor(s *cpuSampler, from, to time.Time, idleBusy float64, target time.Duration) string {
	busy, ctrl, span := s.within(from, to)
	if span <= 0 || from.IsZero() || to.IsZero() {
		return "no CPU samples cover its window"
	}
	work := busy - idleBusy*span.Seconds()
	cores := float64(runtime.NumCPU())
	return fmt.Sprintf("over its %.1f s the machine did %.1f CPU seconds of work above its idle background (the controller %.1f, the simulated clusters and the benchmark %.1f); on %d cores that work takes at least %.1f s, and %.1f s even if the controller used no CPU at all, against the target's %.1f s",
		span.Seconds(), work, ctrl, work-ctrl, runtime.NumCPU(), work/cores, (work-ctrl)/cores, target.Seconds())
}

// scaled returns m's values times f.
func scaled(m map[string]float64, f float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = v * f
	}
	return out
}

// cpuBreakdown formats the CPU seconds spent by each kind between two cpuTimes.
func cpuBreakdown(before, after map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var all []kv
	for k, v := range after {
		all = append(all, kv{k, v - before[k]})
	}
	slices.SortFunc(all, func(a, b kv) int { return cmp.Compare(b.v, a.v) })
	var parts []string
	for _, e := range all {
		if e.v >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", e.k, e.v))
		}
	}
	return strings.Join(parts, ", ")
}

// memOf reads a process's VmRSS and RssAnon (0 once it is gone).
func memOf(pid int) (rss, anon int64) {
	m, err := testbed.ReadMemory(testbed.ProcessRecord{Name: "controller", PID: pid})
	if err != nil {
		return 0, 0
	}
	return m.RSS, m.Anon
}

// cpuSeconds returns the CPU time the controller used so far.
func (p *controllerProcess) cpuSeconds() float64 { return procCPU(p.cmd.Process.Pid) }

// procCPU returns the CPU seconds process pid used so far (0 if it is gone).
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses): utime and stime are the
	// 14th and 15th fields of the line.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // clock ticks (USER_HZ = 100)
}

// machineBusy returns the CPU seconds the whole machine spent busy so far.
func machineBusy() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	fields := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1:]
	busy := 0.0
	for i, f := range fields {
		v, _ := strconv.ParseFloat(f, 64)
		if i != 3 && i != 4 { // idle and iowait
			busy += v
		}
	}
	return busy / 100
}

// resetPeak returns the peak RSS and RssAnon since the last reset.
func (p *controllerProcess) resetPeak() (rss, anon int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rss, anon = p.peakRSS, p.peakAnon
	p.peakRSS, p.peakAnon = 0, 0
	return rss, anon
}

// metricsEndpoint is a process's /metrics: the controller's, or a pull agent's in (f).
type metricsEndpoint struct {
	metrics string // URL of /metrics
}

// sample is one line of the controller's metrics: its text (name and labels) and its value.
type sample struct {
	line  string
	value float64
}

// samples reads the controller's metrics endpoint and returns the samples of metric name.
func (p *metricsEndpoint) samples(b *testing.B, name string) []sample {
	b.Helper()
	out, err := p.scrape(name)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// scrape is samples without a testing.B, for a goroutine.
func (p *metricsEndpoint) scrape(name string) ([]sample, error) {
	resp, err := http.Get(p.metrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", p.metrics, resp.Status)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out []sample
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		fields := strings.Fields(line)
		v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		out = append(out, sample{line: line, value: v})
	}
	return out, nil
}

// label returns the value of label name in a sample's line.
func (s sample) label(name string) string {
	_, v, _ := strings.Cut(s.line, name+`="`)
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// requests reads the controller's client-go request counters: the hub's total, and the
// members' by method.
func (p *metricsEndpoint) requests(b *testing.B) (hub float64, members map[string]float64) {
	hubHost := strings.TrimPrefix(env.Hub.Server, "https://")
	members = map[string]float64{}
	for _, s := range p.samples(b, "rest_client_requests_total") {
		if s.label("host") == hubHost {
			hub += s.value
			continue
		}
		members[s.label("method")] += s.value
	}
	return hub, members
}

// stepSeconds reads, from the controller's metrics, the seconds each cluster has spent in each
// step of the rollout so far (rewind_step_duration_seconds_sum), by cluster and step.
func (p *metricsEndpoint) stepSeconds(b *testing.B, rollout string) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	for _, s := range p.samples(b, "rewind_step_duration_seconds_sum") {
		if s.label("rollout") != rollout {
			continue
		}
		c := s.label("cluster")
		if out[c] == nil {
			out[c] = map[string]float64{}
		}
		out[c][s.label("step")] = s.value
	}
	return out
}

// stepBreakdown formats, step by step, the time the canary spent in it next to the mean and
// the largest time of the fleet wave's clusters, between two readings of stepSeconds; and the
// time each spent outside the steps (journal writes, queueing, health-gate polls).
func stepBreakdown(before, after map[string]map[string]float64, canary string, fleet []string, spans map[string]time.Duration) string {
	d := func(c, step string) float64 { return after[c][step] - before[c][step] }
	steps := map[string]bool{}
	for _, c := range append([]string{canary}, fleet...) {
		for st := range after[c] {
			if d(c, st) > 0 {
				steps[st] = true
			}
		}
	}
	var parts []string
	outside := func(c string) float64 {
		in := 0.0
		for st := range steps {
			in += d(c, st)
		}
		return spans[c].Seconds() - in
	}
	for _, st := range append(slices.Sorted(maps.Keys(steps)), "(outside steps)") {
		var sum, top float64
		for _, c := range fleet {
			v := d(c, st)
			if st == "(outside steps)" {
				v = outside(c)
			}
			sum += v
			top = max(top, v)
		}
		one := d(canary, st)
		if st == "(outside steps)" {
			one = outside(canary)
		}
		parts = append(parts, fmt.Sprintf("%s %.2f / %.2f / %.2f", st, one, sum/float64(len(fleet)), top))
	}
	return strings.Join(parts, "; ")
}

// perCluster formats the member requests made between two counts, per cluster, by method.
func perCluster(before, after map[string]float64) string {
	var parts []string
	total := 0.0
	for _, m := range slices.Sorted(maps.Keys(after)) {
		if d := (after[m] - before[m]) / float64(members); d >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", m, d))
			total += d
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return fmt.Sprintf("%.0f (%s)", total, strings.Join(parts, ", "))
}

// watcher polls a rollout's targets and records, by the local clock, when each was first seen
// changing and when it was first seen finished.
type watcher struct {
	hub               client.Client
	ns, rollout       string
	started, finished map[string]time.Time
	phases            []string // rollout phases in order
	phaseAt           map[string]time.Time
	// waited is, for each cluster/path that waited (status.waitingFor), the last reason seen.
	waited map[string]string
	// failed is, for each cluster/path seen Failed (whatever its release), its step and message.
	failed map[string]string
}

func watch(hub client.Client, ns, rollout string) *watcher {
	return &watcher{hub: hub, ns: ns, rollout: rollout, started: map[string]time.Time{}, finished: map[string]time.Time{}, phaseAt: map[string]time.Time{},
		waited: map[string]string{}, failed: map[string]string{}}
}

// until polls every 100 ms until done says so.
func (w *watcher) until(b *testing.B, timeout time.Duration, release string, done func(*v1alpha1.Rollout) bool) *v1alpha1.Rollout {
	b.Helper()
	ro := &v1alpha1.Rollout{}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		now := time.Now()
		if err := w.hub.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: w.rollout}, ro); err != nil {
			return false, nil
		}
		if ro.Status.Phase != "" && len(w.phases) == 0 || len(w.phases) > 0 && w.phases[len(w.phases)-1] != ro.Status.Phase {
			w.phases = append(w.phases, ro.Status.Phase)
			if _, ok := w.phaseAt[ro.Status.Phase]; !ok {
				w.phaseAt[ro.Status.Phase] = now
			}
		}
		var list v1alpha1.RolloutTargetList
		if err := w.hub.List(ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{v1alpha1.LabelRollout: w.rollout}); err != nil {
			return false, nil
		}
		for _, t := range list.Items {
			if t.Status.Phase == v1alpha1.ClusterFailed {
				// Seen however briefly: a failure policy soon gives the target a new revision.
				w.failed[t.Spec.Cluster+"/"+t.Status.Path] = t.Status.Step + ": " + t.Status.Message
			}
			if t.Spec.ToRelease != release || t.Status.Revision != t.Spec.Revision {
				continue
			}
			key := t.Spec.Cluster + "/" + t.Spec.Path
			if t.Status.WaitingFor != "" {
				w.waited[key] = t.Status.WaitingFor
			}
			switch t.Status.Phase {
			case v1alpha1.ClusterUpgrading, v1alpha1.ClusterRollingBack:
				if _, ok := w.started[key]; !ok {
					w.started[key] = now
				}
			case v1alpha1.ClusterSucceeded, v1alpha1.ClusterRolledBack, v1alpha1.ClusterFailed:
				if _, ok := w.started[key]; !ok {
					w.started[key] = now
				}
				if _, ok := w.finished[key]; !ok {
					w.finished[key] = now
				}
			}
		}
		return done(ro), nil
	})
	if err != nil {
		b.Fatalf("rollout %s: %v (phase %s, targets %+v, failures %+v)", w.rollout, err, ro.Status.Phase, ro.Status.Targets, ro.Status.Failures)
	}
	return ro
}

// spans is each cluster's wall time from its start to its finish on path.
func (w *watcher) spans(clusters []string, path string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, c := range clusters {
		out[c] = w.finished[c+"/"+path].Sub(w.started[c+"/"+path])
	}
	return out
}

// span is the wall time from the first start to the last finish among clusters.
func (w *watcher) span(clusters []string, path string) time.Duration {
	first, last := w.window(clusters, path)
	if first.IsZero() {
		return -1
	}
	return last.Sub(first)
}

// window is the first start and the last finish among clusters (zero times unless every
// cluster was seen starting and finishing).
func (w *watcher) window(clusters []string, path string) (first, last time.Time) {
	for _, c := range clusters {
		s, f := w.started[c+"/"+path], w.finished[c+"/"+path]
		if s.IsZero() || f.IsZero() {
			return time.Time{}, time.Time{}
		}
		if first.IsZero() || s.Before(first) {
			first = s
		}
		if f.After(last) {
			last = f
		}
	}
	return first, last
}

func phaseIs(release, phase string) func(*v1alpha1.Rollout) bool {
	return func(ro *v1alpha1.Rollout) bool {
		return ro.Status.CurrentRelease == release && ro.Status.Phase == phase
	}
}

func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1] + " kB"
	}
	return fmt.Sprintf("%s, %d cores, %s memory, %s/%s, %s", model, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// markNodes labels every node of a member so the picky release cannot run there.
func markNodes(b *testing.B, m *testbed.Cluster) {
	b.Helper()
	c := testenv.Member(b, m).Client
	var nodes corev1.NodeList
	if err := c.List(context.Background(), &nodes); err != nil {
		b.Fatal(err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		orig := n.DeepCopy()
		n.Labels["rewind.dev/broken"] = "true"
		if err := c.Patch(context.Background(), n, client.MergeFrom(orig)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFleet(b *testing.B) {
	ctx := context.Background()
	fmt.Printf("machine: %s\n", machine())
	fmt.Printf("load average at the start (1, 5, 15 minutes; the machine is shared): %s\n", loadAverage())
	fmt.Printf("fleet: %d members behind a %s-each-way proxy (%s round trip), %d MySQLClusters each with 4 owned objects, controller as its own process (32 target workers)\n",
		members, latency, 2*latency, crsPerMember)
	hub := testenv.HubClient(b, env.Hub.RESTConfig())
	ns := "fleet"
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, m := range env.Members {
		kc, err := m.KubeconfigBytes()
		if err != nil {
			b.Fatal(err)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.Name + "-kubeconfig", Namespace: "rewind-system",
			Labels: map[string]string{controller.LabelMemberKubeconfig: "true"}}, Data: map[string][]byte{"kubeconfig": kc}}
		if err := hub.Create(ctx, sec); err != nil {
			b.Fatal(err)
		}
		mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name},
			Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: sec.Name, Key: "kubeconfig"}}}
		if err := hub.Create(ctx, mc); err != nil {
			b.Fatal(err)
		}
		names = append(names, m.Name)
	}
	makeRelease(b, hub, ns, "mysql-a", "1.0.0", "")
	makeRelease(b, hub, ns, "mysql-b", "2.0.0", "")
	makeRelease(b, hub, ns, "mysql-picky", "2.0.2", avoidMarked)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(env.Members))
	for _, m := range env.Members {
		wg.Go(func() {
			if _, err := apply.Objects(ctx, testenv.Member(b, m), []*unstructured.Unstructured{testfixture.MySQLCRD()}, apply.Options{}); err != nil {
				errs <- fmt.Errorf("%s: %w", m.Name, err)
				return
			}
			if err := testfixture.Populate(ctx, m.RESTConfig(), testfixture.Options{Namespaces: []string{"crs"}, Count: crsPerMember, Children: true, Parallelism: 8}); err != nil {
				errs <- fmt.Errorf("%s: %w", m.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	fmt.Printf("setup: %d members populated in %s\n", members, time.Since(start).Round(time.Second))

	p := startController(b)
	gates := v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: gateTimeout}}

	// Baseline for (b): one cluster's rollback, by the same controller, under the same load.
	solo := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: "mysql-a", InstallNamespace: "mysql-system", HealthGates: gates,
		Waves: []v1alpha1.Wave{{Name: "only", Clusters: []string{names[0]}, MaxConcurrency: 1}}}}
	if err := hub.Create(ctx, solo); err != nil {
		b.Fatal(err)
	}
	w := watch(hub, ns, "solo")
	w.until(b, 5*time.Minute, "mysql-a", phaseIs("mysql-a", v1alpha1.RolloutSucceeded))
	setRelease(b, hub, ns, "solo", "mysql-b")
	w.until(b, 5*time.Minute, "mysql-b", phaseIs("mysql-b", v1alpha1.RolloutSucceeded))
	setRelease(b, hub, ns, "solo", "mysql-a")
	w.until(b, 5*time.Minute, "mysql-a", phaseIs("mysql-a", v1alpha1.RolloutRolledBack))
	oneRestore := w.span(names[:1], v1alpha1.PathRestore)
	oneRollback := w.phaseAt[v1alpha1.RolloutRolledBack].Sub(w.phaseAt[v1alpha1.RolloutRollingBack])
	if err := hub.Delete(ctx, solo); err != nil {
		b.Fatal(err)
	}

	// The fleet: canary = 1 cluster, fleet = the others at once.
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: "mysql-a", InstallNamespace: "mysql-system", HealthGates: gates,
		Waves: []v1alpha1.Wave{
			{Name: "canary", Clusters: names[:1], MaxConcurrency: 1},
			{Name: "fleet", Clusters: names[1:], MaxConcurrency: int32(len(names) - 1)},
		}}}
	if err := hub.Create(ctx, ro); err != nil {
		b.Fatal(err)
	}
	w = watch(hub, ns, "fleet")
	w.until(b, 10*time.Minute, "mysql-a", phaseIs("mysql-a", v1alpha1.RolloutSucceeded))
	install := w.span(names[1:], v1alpha1.PathUpgrade)

	// The background: what the simulated clusters (and the controller) use with nothing
	// rolling out, over a few idle seconds.
	idleBefore, idleBusyBefore, idleWallBefore := cpuTimes(p), machineBusy(), time.Now()
	<-time.After(5 * time.Second)
	idleWall := time.Since(idleWallBefore).Seconds()
	idleBusy := (machineBusy() - idleBusyBefore) / idleWall
	idleRates := cpuTimes(p)
	for k, v := range idleRates {
		idleRates[k] = (v - idleBefore[k]) / idleWall
	}

	// (a) The upgrade: the canary wave, then the fleet wave.
	_, _ = p.resetPeak()
	reqBefore, memberBefore := p.requests(b)
	cpuBefore, busyBefore, wallBefore := p.cpuSeconds(), machineBusy(), time.Now()
	timesBefore := cpuTimes(p)
	stopProfile := p.profileDuring(b, "a", 8)
	sampler := sampleCPU(p)
	defer sampler.Stop()
	stepsBefore := p.stepSeconds(b, "fleet")
	retriesBefore, gatesBefore := p.faultRetries(b, ns, "fleet"), p.gateFailures(b, ns, "fleet")
	base := cycle{release: "mysql-b"}
	upStart := time.Now()
	setRelease(b, hub, ns, "fleet", "mysql-b")
	w = watch(hub, ns, "fleet")
	upgraded := w.until(b, 10*time.Minute, "mysql-b", phaseIs("mysql-b", v1alpha1.RolloutSucceeded))
	base.upgrade = time.Since(upStart)
	base.upgraded = upgradeResult(upgraded)
	base.waited = w.waited
	stopProfile()
	timesA := cpuTimes(p)
	breakdownA := cpuBreakdown(timesBefore, timesA)
	hubAPIUp := timesA["kube-apiserver (hub)"] - timesBefore["kube-apiserver (hub)"]
	reqAfter, memberAfter := p.requests(b)
	reqUpgrade, memberUpgrade := reqAfter-reqBefore, perCluster(memberBefore, memberAfter)
	cpuA, busyA, wallA := p.cpuSeconds()-cpuBefore, machineBusy()-busyBefore, time.Since(wallBefore)
	canary := w.span(names[:1], v1alpha1.PathUpgrade)
	wave := w.span(names[1:], v1alpha1.PathUpgrade)
	waveFrom, waveTo := w.window(names[1:], v1alpha1.PathUpgrade)
	floorA := floor(sampler, waveFrom, waveTo, idleBusy, time.Duration(1.5*float64(canary)))
	stepsA := stepBreakdown(stepsBefore, p.stepSeconds(b, "fleet"), names[0], names[1:], w.spans(names, v1alpha1.PathUpgrade))
	statusUpgrade, _ := json.Marshal(upgraded.Status)
	rssA, anonA := p.resetPeak()

	// (b) A release that fails on the last member only (its nodes are marked): the canary and
	// the others pass, the last fails its gate, and RollbackAll restores every cluster.
	markNodes(b, env.Members[len(env.Members)-1])
	reqBefore, memberBefore = p.requests(b)
	pickyStart, timesPicky := time.Now(), cpuTimes(p)
	setRelease(b, hub, ns, "fleet", "mysql-picky")
	w = watch(hub, ns, "fleet")
	w.until(b, 10*time.Minute, "mysql-picky", func(ro *v1alpha1.Rollout) bool { return ro.Status.Phase == v1alpha1.RolloutRollingBack })
	base.gate = w.phaseAt[v1alpha1.RolloutRollingBack].Sub(pickyStart)
	timesBefore = cpuTimes(p)
	stopProfile = p.profileDuring(b, "b", 10)
	rolledBack := w.until(b, 10*time.Minute, "mysql-b", phaseIs("mysql-b", v1alpha1.RolloutRolledBack))
	stopProfile()
	timesB := cpuTimes(p)
	breakdownB := cpuBreakdown(timesBefore, timesB)
	push := modeFigures{upgradeCPU: cpuA, backCPU: timesB["controller"] - timesPicky["controller"], restoreCPU: timesB["controller"] - timesBefore["controller"],
		hubAPIUp: hubAPIUp, hubAPIBack: timesB["kube-apiserver (hub)"] - timesPicky["kube-apiserver (hub)"]}
	reqAfter, memberAfter = p.requests(b)
	reqRollback, memberRollback := reqAfter-reqBefore, perCluster(memberBefore, memberAfter)
	push.hubUp, push.hubBack, push.memberUp, push.memberBack = reqUpgrade, reqRollback, memberUpgrade, memberRollback
	all := w.span(names, v1alpha1.PathRestore)
	fromGate := w.phaseAt[v1alpha1.RolloutRolledBack].Sub(w.phaseAt[v1alpha1.RolloutRollingBack])
	floorB := floor(sampler, w.phaseAt[v1alpha1.RolloutRollingBack], w.phaseAt[v1alpha1.RolloutRolledBack], idleBusy, 2*oneRollback)
	statusRollback, _ := json.Marshal(rolledBack.Status)
	rssB, anonB := p.resetPeak()
	base.canary, base.wave, base.rollback, base.restores = canary, wave, fromGate, all
	push.canary, push.wave, push.rollback = canary, wave, fromGate
	base.memberUp, base.memberBack = memberUpgrade, memberRollback
	maps.Copy(base.waited, w.waited)
	base.failed = w.failed
	base.retries = retryDelta(retriesBefore, p.faultRetries(b, ns, "fleet"))
	base.gateFailed = gateDelta(gatesBefore, p.gateFailures(b, ns, "fleet"))

	n := float64(members)
	perClusterUp, perClusterBack := reqUpgrade/n, reqRollback/n
	fmt.Printf("\n(a) upgrade wave of %d clusters at maxConcurrency %d: %s; canary wave of 1 cluster: %s; ratio %.2f (target <= 1.5)\n",
		members-1, members-1, wave.Round(10*time.Millisecond), canary.Round(10*time.Millisecond), wave.Seconds()/canary.Seconds())
	fmt.Printf("    (first install of the %d clusters of the fleet wave: %s)\n", members-1, install.Round(10*time.Millisecond))
	fmt.Printf("    during (a), %.1f s of wall time: the machine's %d cores were %.0f%% busy; the controller used %.1f CPU seconds (%.0f%% of the machine's busy time), the %d simulated clusters (API servers, etcd, controllers, kwok) the rest\n",
		wallA.Seconds(), runtime.NumCPU(), 100*busyA/(wallA.Seconds()*float64(runtime.NumCPU())), cpuA, 100*cpuA/busyA, members)
	fmt.Printf("    CPU seconds during (a) by process: %s\n", breakdownA)
	fmt.Printf("    idle, with nothing rolling out, the machine is %.0f%% busy: over (a)'s wall time that background is %.1f CPU seconds (%s)\n",
		100*idleBusy/float64(runtime.NumCPU()), idleBusy*wallA.Seconds(), cpuBreakdown(map[string]float64{}, scaled(idleRates, wallA.Seconds())))
	fmt.Printf("    seconds in each step during (a), canary / fleet-wave mean / fleet-wave largest: %s\n", stepsA)
	fmt.Printf("    the fleet wave on this machine: %s\n", floorA)
	fmt.Printf("(b) RollbackAll of %d clusters: %s from the failed gate to all restored and healthy (the restores alone: %s); one cluster's rollback, measured the same way: %s (its restore alone: %s); ratio %.2f (target <= 2)\n",
		members, fromGate.Round(10*time.Millisecond), all.Round(10*time.Millisecond), oneRollback.Round(10*time.Millisecond), oneRestore.Round(10*time.Millisecond), fromGate.Seconds()/oneRollback.Seconds())
	fmt.Printf("    CPU seconds during (b)'s restores by process: %s\n", breakdownB)
	fmt.Printf("    the rollback on this machine: %s\n", floorB)
	var snaps v1alpha1.SnapshotList
	if err := hub.List(ctx, &snaps, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	var snapBytes int64
	for _, s := range snaps.Items {
		snapBytes = max(snapBytes, s.Status.Bytes)
	}
	fmt.Printf("    each restore holds a snapshot of up to %.1f MiB uncompressed; the controller's --restore-memory default is %s\n", float64(snapBytes)/(1<<20), controllercmd.DefaultRestoreMemory)
	fmt.Printf("(c) controller (rewind-controller, the image's binary) peak RSS: %.0f MiB during (a), %.0f MiB during (b) (target <= 200 MiB); of which anonymous (heap, stacks; the rest is the program's file): %.0f and %.0f MiB\n",
		float64(rssA)/(1<<20), float64(rssB)/(1<<20), float64(anonA)/(1<<20), float64(anonB)/(1<<20))
	fmt.Printf("(d) hub API requests by the controller: %.0f per cluster for the upgrade, %.0f per cluster for the failed release and its rollback\n", perClusterUp, perClusterBack)
	fmt.Printf("    member API requests by the controller, per cluster: %s for the upgrade, %s for the failed release and its rollback\n", memberUpgrade, memberRollback)
	fmt.Printf("    extrapolated to 1,000 clusters (linear: requests = per-cluster x clusters): %.0f and %.0f\n", perClusterUp*1000, perClusterBack*1000)
	fmt.Printf("    Rollout status: %d bytes after the upgrade, %d after the rollback, at %d clusters; at 1,000 clusters the status holds the same fields\n",
		len(statusUpgrade), len(statusRollback), members)
	fmt.Printf("    (counts per phase, at most 10 failures of <= 512 bytes, at most 20 revisions of <= 1 KiB reasons): bounded by about 10 x 0.6 KiB + 20 x 1.2 KiB + 4 conditions x 4 KiB ~ 46 KiB, whatever the fleet\n")
	b.ReportMetric(wave.Seconds()/canary.Seconds(), "wave/canary")
	b.ReportMetric(fromGate.Seconds()/oneRollback.Seconds(), "rollback/one")
	b.ReportMetric(float64(max(rssA, rssB))/(1<<20), "MiB-RSS")

	if chaosOff {
		fmt.Printf("(e) chaos run skipped (REWIND_FLEET_CHAOS=off)\n")
	} else {
		chaos(b, hub, p, ns, names, base)
	}
	if pullOff {
		fmt.Printf("(f) pull mode skipped (REWIND_FLEET_PULL=off)\n")
		return
	}
	pullMode(b, hub, p, ns, push)
}

// loadAverage is /proc/loadavg's first three fields.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

func setRelease(b *testing.B, hub client.Client, ns, name, rel string) {
	b.Helper()
	ro := &v1alpha1.Rollout{}
	if err := hub.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		b.Fatal(err)
	}
	ro.Spec.Release = rel
	if err := hub.Update(context.Background(), ro); err != nil {
		b.Fatal(err)
	}
}
