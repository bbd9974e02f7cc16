//go:build !unit

// Package hub benchmarks the hub orchestrating many pull members: the real hub (the testbed's
// kube-apiserver and etcd, rewind's controller as its own process) and N simulated pull
// members (REWIND_HUB_MEMBERS, default 1,000), whose agents are stood in for by one
// goroutine pool of this process with its own client of the hub (agents_test.go): it renews
// every member's Lease on the agent's interval and runs every target copy the hub relays to
// a member's namespace as the agent would, writing the same journal with simulated step
// durations. It measures, beside the goals of issue 23:
//
//	(a) an upgrade in waves of 1, 99 and 900 clusters: from each wave's opening to all its
//	    targets done on the hub, beyond the agents' own step time (goal <= 30 s for 900);
//	(b) a RollbackAll of every cluster after one cluster of the last wave fails its gate:
//	    from the failed gate to every cluster's copy told to restore (goal <= 10 s) and to all
//	    restored on the hub (goal <= 60 s with 20 s simulated restores);
//	(c) the controller's peak RSS (goal <= 500 MiB), its hub API requests per cluster, and the
//	    hub kube-apiserver's (and etcd's) CPU seconds.
//
// Run it with `make bench-hub`.
package hub

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/agent"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/join"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var env *testbed.Testbed

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

var (
	// members is the number of simulated pull members (REWIND_HUB_MEMBERS, default 1000).
	members = envInt("REWIND_HUB_MEMBERS", 1000)
	// agentQPS is the agents' stand-in's request budget on the hub (REWIND_HUB_AGENT_QPS).
	agentQPS = envInt("REWIND_HUB_AGENT_QPS", 400)
	// heartbeat is the agents' Lease renewal interval (REWIND_HUB_HEARTBEAT, default the
	// agent's own default).
	heartbeat = envDuration("REWIND_HUB_HEARTBEAT", agent.DefaultHeartbeatInterval)
	// stepTime is each simulated upgrade step's time (REWIND_HUB_STEP, default 1s: about 6 s
	// an upgrade); restoreTime the simulated Restore step's (REWIND_HUB_RESTORE, 20s).
	stepTime    = envDuration("REWIND_HUB_STEP", time.Second)
	restoreTime = envDuration("REWIND_HUB_RESTORE", 20*time.Second)
	// ctrlArgs are more flags for the controller (REWIND_HUB_CONTROLLER_ARGS, space separated).
	ctrlArgs = strings.Fields(os.Getenv("REWIND_HUB_CONTROLLER_ARGS"))
	// profileDir (REWIND_HUB_PPROF) receives the controller's and the hub kube-apiserver's CPU
	// profiles of (a) and (b).
	profileDir = os.Getenv("REWIND_HUB_PPROF")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	// The hub's API server runs as a cluster's does by default: priority and fairness on.
	testenv.Main(m, testbed.Options{Members: 0, Profiling: profileDir != "", HubPriorityAndFairness: true}, &env)
}

// waveSizes splits n clusters into waves of 1, ~10% and the rest (1, 99, 900 for 1,000).
func waveSizes(n int) []int {
	second := max(1, (n-1)/10)
	return []int{1, second, n - 1 - second}
}

func BenchmarkHub(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if members < 3 {
		b.Fatalf("REWIND_HUB_MEMBERS=%d: at least 3 members (one per wave)", members)
	}
	d := durations{step: map[string]time.Duration{
		target.StepPrecheck: stepTime / 2, target.StepSnapshot: stepTime * 2, target.StepApplyCRDs: stepTime / 2,
		target.StepApplyRBAC: stepTime / 10, target.StepApplyConfig: stepTime / 10, target.StepApplyWebhooks: stepTime / 10,
		target.StepApplyWorkloads: stepTime / 2, target.StepApplyOthers: stepTime / 10, target.StepHealthGate: stepTime * 2,
		target.StepRecord: stepTime / 10, target.StepApplyRelease: stepTime,
	}, restore: restoreTime}
	sizes := waveSizes(members)
	fmt.Printf("machine: %s; load average at start: %s\n", machine(), loadavg())
	fmt.Printf("hub: the testbed's kube-apiserver and etcd, rewind-controller as its own process (the image's binary, default flags%s)\n", argsNote())
	fmt.Printf("members: %d simulated pull members in waves of %v; their agents stood in for by one process (client QPS %d, burst %d): Lease renewed every %s, simulated steps: upgrade %s, restore path %s (Restore %s)\n",
		members, sizes, agentQPS, 2*agentQPS, heartbeat, d.upgrade(), d.restorePath(), d.restore)

	admin := testenv.HubClient(b, env.Hub.RESTConfig())
	ns := "fleet"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	names := make([]string, members)
	for i := range names {
		names[i] = fmt.Sprintf("m%04d", i+1)
	}
	waveOf := func(i int) int {
		switch {
		case i < sizes[0]:
			return 1
		case i < sizes[0]+sizes[1]:
			return 2
		}
		return 3
	}
	// The members as `rewind clusters join` leaves them: a MemberCluster in mode Pull and its
	// hub namespace with the agent's ServiceAccount and RBAC, and the controller's RoleBinding
	// (join.Objects). The stand-in acts as each agent's ServiceAccount.
	start := time.Now()
	err := parallel(ctx, names, 32, func(ctx context.Context, m string) error {
		i, _ := strconv.Atoi(m[1:])
		for _, o := range join.Objects(m) {
			if err := admin.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
				return err
			}
		}
		mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m, Labels: map[string]string{"wave": strconv.Itoa(waveOf(i - 1))}},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull, BoundNamespaces: []string{ns}}}
		return client.IgnoreAlreadyExists(admin.Create(ctx, mc))
	})
	if err != nil {
		b.Fatal(err)
	}
	ag, err := newAgents(ctx, env.Hub.RESTConfig(), float32(agentQPS), names, heartbeat, d)
	if err != nil {
		b.Fatal(err)
	}
	if err := ag.join(ctx); err != nil {
		b.Fatal(err)
	}
	ag.beat(ctx)
	defer func() { cancel(); ag.wg.Wait() }()
	for _, r := range []struct{ name, version string }{{"mysql-a", "1.0.0"}, {"mysql-b", "2.0.0"}, {"mysql-c", "2.1.0"}} {
		if err := testfixture.CreateRelease(ctx, admin, b.TempDir(), ns, r.name, r.version, ""); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("setup: %d members joined in %s\n", members, time.Since(start).Round(time.Second))

	// The controller runs as it does in a hub: its own ServiceAccount with the shipped RBAC.
	ctrlCfg := testenv.ControllerConfig(b, env.Hub, ns)
	agentCfg := rest.CopyConfig(env.Hub.RESTConfig())
	agentCfg.Impersonate = agentIdentity(names[0])
	fmt.Printf("priority and fairness: the controller's requests go to %s, an agent's to %s\n",
		classify(b, ctrlCfg, "/apis/rewind.dev/v1alpha1/namespaces/"+ns+"/rollouts"),
		classify(b, agentCfg, "/apis/rewind.dev/v1alpha1/namespaces/"+v1alpha1.MemberNamespace(names[0])+"/rollouttargets"))
	p := startController(b, testenv.KubeconfigFile(b, ctrlCfg))
	w, err := watchTargets(ctx, ns)
	if err != nil {
		b.Fatal(err)
	}
	var waves []v1alpha1.Wave
	for i, n := range sizes {
		waves = append(waves, v1alpha1.Wave{Name: fmt.Sprintf("wave%d", i+1), MaxConcurrency: int32(n),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"wave": strconv.Itoa(i + 1)}}})
	}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "mysql", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: "mysql-a", InstallNamespace: "mysql-system", Waves: waves,
		FailurePolicy: v1alpha1.FailurePolicyRollbackAll,
		HealthGates:   v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: time.Minute}},
	}}
	start = time.Now()
	if err := admin.Create(ctx, ro); err != nil {
		b.Fatal(err)
	}
	waitPhase(b, admin, ns, "mysql-a", v1alpha1.RolloutSucceeded, 30*time.Minute)
	fmt.Printf("first install of mysql-a on %d members: %s in all;", members, time.Since(start).Round(time.Second))
	for i, n := range sizes {
		open, done := w.window(selectWave(names, waveOf, i+1), currentRevision(b, admin, ns), target.Terminal)
		fmt.Printf(" wave of %d: %.1f s;", n, done.Sub(open).Seconds())
	}
	fmt.Printf(" load average %s\n", loadavg())
	<-time.After(5 * time.Second) // a few idle seconds: the background of heartbeats and checks
	idleFrom, idleCPU := time.Now(), cpuTimes(p)
	<-time.After(10 * time.Second)
	idleWall, idleCPU2 := time.Since(idleFrom).Seconds(), cpuTimes(p)

	// (a) The upgrade to mysql-b, wave by wave.
	_, _ = p.resetPeak()
	reqBefore := p.hubRequests(b)
	cpuBefore := cpuTimes(p)
	apiBefore := apiRequests(b)
	stopProfile := p.profile(b, "a", 20)
	upStart := time.Now()
	setRelease(b, admin, ns, "mysql-b", nil)
	waitPhase(b, admin, ns, "mysql-b", v1alpha1.RolloutSucceeded, 30*time.Minute)
	stopProfile()
	upWall := time.Since(upStart)
	reqUp := p.hubRequests(b) - reqBefore
	cpuUp := diff(cpuBefore, cpuTimes(p))
	apiUp := diff(apiBefore, apiRequests(b))
	rssA, _ := p.resetPeak()
	revB := currentRevision(b, admin, ns)
	type waveResult struct {
		n          int
		span, over time.Duration
	}
	var upWaves []waveResult
	for i, n := range sizes {
		clusters := selectWave(names, waveOf, i+1)
		open, done := w.window(clusters, revB, target.Terminal)
		if open.IsZero() || done.IsZero() {
			b.Fatalf("wave %d: not every target was seen opened and done", i+1)
		}
		upWaves = append(upWaves, waveResult{n: n, span: done.Sub(open), over: done.Sub(open) - d.upgrade()})
	}

	fmt.Printf("\nload average after the upgrade: %s; controller peak RSS during it %.0f MiB, hub API requests by the controller %.1f per cluster\n",
		loadavg(), float64(rssA)/(1<<20), reqUp/float64(members))
	fmt.Printf("(a) upgrade mysql-a -> mysql-b, %s in all (simulated agent time per cluster: %s)\n", upWall.Round(100*time.Millisecond), d.upgrade())
	for i, r := range upWaves {
		goal := ""
		if i == 2 {
			goal = " (goal for the 900-cluster wave: <= 30 s)"
		}
		fmt.Printf("    wave of %4d clusters: %6.1f s from its opening to all its targets done on the hub; beyond the agents' own %.1f s: %6.1f s%s\n",
			r.n, r.span.Seconds(), d.upgrade().Seconds(), r.over.Seconds(), goal)
	}

	// (b) mysql-c: the last member of the last wave fails its health gate; RollbackAll.
	ag.mu.Lock()
	ag.failRelease, ag.failCluster = "mysql-c", names[len(names)-1]
	ag.mu.Unlock()
	reqBefore = p.hubRequests(b)
	cpuBefore = cpuTimes(p)
	apiBefore = apiRequests(b)
	tell := watchTellWindow(ctx, ag, p, members)
	setRelease(b, admin, ns, "mysql-c", nil)
	waitRollout(b, admin, ns, 30*time.Minute, func(ro *v1alpha1.Rollout) bool { return ro.Status.Phase == v1alpha1.RolloutRollingBack })
	stopProfile = p.profile(b, "b", 20)
	rolled := waitPhase(b, admin, ns, "mysql-b", v1alpha1.RolloutRolledBack, 30*time.Minute)
	stopProfile()
	reqBack := p.hubRequests(b) - reqBefore
	cpuBack := diff(cpuBefore, cpuTimes(p))
	apiBack := diff(apiBefore, apiRequests(b))
	rssB, _ := p.resetPeak()
	revBack := rolled.Status.Revision
	ag.mu.Lock()
	failedAt := ag.failedAt
	ag.mu.Unlock()
	told := ag.restoreTold(revBack)
	var lastTold time.Time
	for _, t := range told {
		lastTold = later(lastTold, t)
	}
	var restoreClusters []string
	for c := range told {
		restoreClusters = append(restoreClusters, c)
	}
	_, allRestored := w.window(restoreClusters, revBack, func(p string) bool { return p == v1alpha1.ClusterRolledBack })

	fmt.Printf("(b) RollbackAll of %d clusters after %s failed its gate in mysql-c (simulated restore path per cluster: %s)\n", len(told), ag.failCluster, d.restorePath())
	if failedAt.IsZero() || len(told) == 0 {
		b.Fatalf("no failed gate or no restore seen (failed at %v, %d told)", failedAt, len(told))
	}
	fmt.Printf("    from the failed gate to every cluster's copy told to restore: %6.1f s (goal <= 10 s)\n", lastTold.Sub(failedAt).Seconds())
	fmt.Printf("    from the failed gate to all %d restored on the hub:          %6.1f s (goal <= 60 s; the agents' own restore path: %.1f s)\n",
		len(restoreClusters), allRestored.Sub(failedAt).Seconds(), d.restorePath().Seconds())
	fmt.Printf("    timeline from the failed gate, every 5 s: targets of the rollback written / opened on the hub / copies told to restore / targets %s / %s on the hub:\n",
		v1alpha1.ClusterRollingBack, v1alpha1.ClusterRolledBack)
	w.timeline(failedAt, 5*time.Second, revBack, len(told), told, v1alpha1.ClusterRollingBack, v1alpha1.ClusterRolledBack)
	seen, first, last := w.reaction(revBack-1, ag.failCluster, revBack)
	fmt.Printf("    the failed gate on the hub's target (relayed) at +%.1f s; the rollback's first target written at +%.1f s, its last at +%.1f s\n",
		seen.Sub(failedAt).Seconds(), first.Sub(failedAt).Seconds(), last.Sub(failedAt).Seconds())
	tell.print(b, float64(members))
	fmt.Printf("    load average after the rollback: %s\n", loadavg())
	fmt.Printf("(c) controller peak RSS: %.0f MiB during (a), %.0f MiB during (b) (goal <= 500 MiB)\n", float64(rssA)/(1<<20), float64(rssB)/(1<<20))
	n := float64(members)
	fmt.Printf("    hub API requests by the controller per cluster: %.1f for (a), %.1f for (b) (%.0f and %.0f in all)\n", reqUp/n, reqBack/n, reqUp, reqBack)
	fmt.Printf("    CPU seconds during (a) (%.0f s): %s\n", upWall.Seconds(), breakdown(cpuUp))
	fmt.Printf("    CPU seconds during (b): %s\n", breakdown(cpuBack))
	fmt.Printf("    per cluster: controller %.3f (a) and %.3f (b); hub kube-apiserver %.3f (a) and %.3f (b) CPU seconds\n",
		cpuUp["controller"]/n, cpuBack["controller"]/n, cpuUp["kube-apiserver (hub)"]/n, cpuBack["kube-apiserver (hub)"]/n)
	fmt.Printf("    hub kube-apiserver requests per cluster by verb and resource (everyone's: the controller's and the agents'; 409: those of them refused for a conflict), (a): %s\n", perCluster(apiUp, n))
	fmt.Printf("    the same for (b): %s\n", perCluster(apiBack, n))
	idle := diff(idleCPU, idleCPU2)
	for k, v := range idle {
		idle[k] = v / idleWall
	}
	fmt.Printf("    idle background (heartbeats, member checks), CPU seconds per second: %s\n", breakdown(idle))
	fmt.Printf("    the agents' stand-in: %d status writes, %d Lease renewals, %d writes that failed after retries\n",
		ag.statusWrites.Load(), ag.leaseRenewals.Load(), ag.writeErrors.Load())
	b.ReportMetric(upWaves[2].over.Seconds(), "s-wave3-overhead")
	b.ReportMetric(lastTold.Sub(failedAt).Seconds(), "s-told-restore")
	b.ReportMetric(float64(max(rssA, rssB))/(1<<20), "MiB-RSS")
}

func argsNote() string {
	if len(ctrlArgs) == 0 {
		return ""
	}
	return " and " + strings.Join(ctrlArgs, " ")
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func selectWave(names []string, waveOf func(int) int, w int) []string {
	var out []string
	for i, n := range names {
		if waveOf(i) == w {
			out = append(out, n)
		}
	}
	return out
}

// targetWatch records, from a watch of the Rollout's targets on the hub, when each cluster's
// target was first seen opened (spec.start) and first seen in a phase, by revision.
type targetWatch struct {
	mu sync.Mutex
	// written: when each cluster's target was first seen planned at a revision.
	written map[int32]map[string]time.Time
	opened  map[int32]map[string]time.Time
	phase   map[int32]map[string]map[string]time.Time
}

func watchTargets(ctx context.Context, ns string) (*targetWatch, error) {
	w := &targetWatch{written: map[int32]map[string]time.Time{}, opened: map[int32]map[string]time.Time{}, phase: map[int32]map[string]map[string]time.Time{}}
	ca, err := cache.New(env.Hub.RESTConfig(), cache.Options{Scheme: testenv.HubScheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	inf, err := ca.GetInformer(ctx, &v1alpha1.RolloutTarget{})
	if err != nil {
		return nil, err
	}
	see := func(o any) {
		t := o.(*v1alpha1.RolloutTarget)
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		r := t.Spec.Revision
		if w.written[r] == nil {
			w.written[r] = map[string]time.Time{}
		}
		if _, ok := w.written[r][t.Spec.Cluster]; !ok {
			w.written[r][t.Spec.Cluster] = now
		}
		if t.Spec.Start {
			if w.opened[r] == nil {
				w.opened[r] = map[string]time.Time{}
			}
			if _, ok := w.opened[r][t.Spec.Cluster]; !ok {
				w.opened[r][t.Spec.Cluster] = now
			}
		}
		if t.Status.Revision == r && t.Status.Phase != "" {
			if w.phase[r] == nil {
				w.phase[r] = map[string]map[string]time.Time{}
			}
			if w.phase[r][t.Spec.Cluster] == nil {
				w.phase[r][t.Spec.Cluster] = map[string]time.Time{}
			}
			if _, ok := w.phase[r][t.Spec.Cluster][t.Status.Phase]; !ok {
				w.phase[r][t.Spec.Cluster][t.Status.Phase] = now
			}
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }}); err != nil {
		return nil, err
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the benchmark's cache did not sync")
	}
	return w, nil
}

// timeline prints, every step from start until each count reaches total, how many
// clusters had their target of revision rev written, opened, their copy told (told), their
// target seen in phase active and in phase done, on the hub.
func (w *targetWatch) timeline(start time.Time, step time.Duration, rev int32, total int, told map[string]time.Time, active, done string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	phase := func(ph string) map[string]time.Time {
		out := map[string]time.Time{}
		for c, seen := range w.phase[rev] {
			if at, ok := seen[ph]; ok {
				out[c] = at
			}
		}
		return out
	}
	series := []map[string]time.Time{w.written[rev], w.opened[rev], told, phase(active), phase(done)}
	count := func(m map[string]time.Time, by time.Time) (n int) {
		for _, at := range m {
			if !at.After(by) {
				n++
			}
		}
		return n
	}
	var line []string
	for at := start; ; at = at.Add(step) {
		var parts []string
		all := true
		for _, m := range series {
			n := count(m, at)
			all = all && n >= total
			parts = append(parts, strconv.Itoa(n))
		}
		line = append(line, fmt.Sprintf("+%.0fs %s", at.Sub(start).Seconds(), strings.Join(parts, "/")))
		if all || at.Sub(start) > 10*time.Minute {
			break
		}
	}
	for i := 0; i < len(line); i += 6 {
		fmt.Printf("      %s\n", strings.Join(line[i:min(i+6, len(line))], "   "))
	}
}

// reaction is when the hub's target of cluster was first seen Failed in revision failedRev,
// and when the first and the last target of revision rev were written.
func (w *targetWatch) reaction(failedRev int32, cluster string, rev int32) (failed, first, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	failed = w.phase[failedRev][cluster][v1alpha1.ClusterFailed]
	for _, at := range w.written[rev] {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		last = later(last, at)
	}
	return failed, first, last
}

// window is the first opening and the last time a phase done says so was seen among
// clusters in revision rev (zero unless every cluster was seen both).
func (w *targetWatch) window(clusters []string, rev int32, done func(string) bool) (first, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range clusters {
		o, ok := w.opened[rev][c]
		if !ok {
			return time.Time{}, time.Time{}
		}
		var f time.Time
		for ph, at := range w.phase[rev][c] {
			if done(ph) && (f.IsZero() || at.Before(f)) {
				f = at
			}
		}
		if f.IsZero() {
			return time.Time{}, time.Time{}
		}
		if first.IsZero() || o.Before(first) {
			first = o
		}
		last = later(last, f)
	}
	return first, last
}

func getRollout(ctx context.Context, c client.Client, ns string) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	return ro, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mysql"}, ro)
}

func setRelease(b *testing.B, c client.Client, ns, rel string, mut func(*v1alpha1.RolloutSpec)) {
	b.Helper()
	err := retry(context.Background(), func() error {
		ro, err := getRollout(context.Background(), c, ns)
		if err != nil {
			return err
		}
		ro.Spec.Release = rel
		if mut != nil {
			mut(&ro.Spec)
		}
		return c.Update(context.Background(), ro)
	})
	if err != nil {
		b.Fatal(err)
	}
}

func currentRevision(b *testing.B, c client.Client, ns string) int32 {
	b.Helper()
	ro, err := getRollout(context.Background(), c, ns)
	if err != nil {
		b.Fatal(err)
	}
	return ro.Status.Revision
}

func waitRollout(b *testing.B, c client.Client, ns string, timeout time.Duration, done func(*v1alpha1.Rollout) bool) *v1alpha1.Rollout {
	b.Helper()
	var ro *v1alpha1.Rollout
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		r, err := getRollout(ctx, c, ns)
		if err != nil {
			return false, nil
		}
		ro = r
		return done(ro), nil
	})
	if err != nil {
		b.Fatalf("rollout: %v (phase %s, release %s, targets %+v, conditions %+v)", err, ro.Status.Phase, ro.Status.CurrentRelease, ro.Status.Targets, ro.Status.Conditions)
	}
	return ro
}

func waitPhase(b *testing.B, c client.Client, ns, release, phase string, timeout time.Duration) *v1alpha1.Rollout {
	b.Helper()
	return waitRollout(b, c, ns, timeout, func(ro *v1alpha1.Rollout) bool {
		return ro.Status.CurrentRelease == release && ro.Status.Phase == phase
	})
}

// controllerProcess is rewind's controller as its own process (as bench/fleet runs it).
type controllerProcess struct {
	cmd     *exec.Cmd
	metrics string
	pprof   string
	mu      sync.Mutex
	peakRSS int64
	stop    chan struct{}
	done    chan struct{}
}

func freePort(b *testing.B) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// classify makes one request (GET path) as cfg and names the FlowSchema and priority level the
// hub's API server put it in.
func classify(b *testing.B, cfg *rest.Config, path string) string {
	b.Helper()
	fsUID, plUID, status := testenv.PriorityOf(b, cfg, path)
	if status != http.StatusOK {
		b.Fatalf("GET %s: status %d", path, status)
	}
	admin := testenv.HubClient(b, env.Hub.RESTConfig())
	var fss flowcontrolv1.FlowSchemaList
	var pls flowcontrolv1.PriorityLevelConfigurationList
	if err := admin.List(b.Context(), &fss); err != nil {
		b.Fatal(err)
	}
	if err := admin.List(b.Context(), &pls); err != nil {
		b.Fatal(err)
	}
	names := map[string]string{}
	for _, f := range fss.Items {
		names[string(f.UID)] = f.Name
	}
	for _, p := range pls.Items {
		names[string(p.UID)] = p.Name
	}
	return fmt.Sprintf("priority level %s (FlowSchema %s)", names[plUID], names[fsUID])
}

func startController(b *testing.B, kubeconfig string) *controllerProcess {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "rewind-controller")
	build := exec.Command("go", "build", "-trimpath", "-tags", "disable_grpc_modules", "-ldflags", "-s -w", "-o", bin, "github.com/rewind-dev/rewind/cmd/rewind-controller")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building rewind-controller: %v\n%s", err, out)
	}
	port := freePort(b)
	p := &controllerProcess{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port), stop: make(chan struct{}), done: make(chan struct{})}
	args := []string{"--kubeconfig", kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--health-probe-bind-address", "0", "--metrics-secure=false"}
	if profileDir != "" {
		pp := freePort(b)
		p.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", pp)
		args = append(args, "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pp))
	}
	args = append(args, ctrlArgs...)
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
			if m, err := testbed.ReadMemory(testbed.ProcessRecord{Name: "controller", PID: p.cmd.Process.Pid}); err == nil {
				p.mu.Lock()
				p.peakRSS = max(p.peakRSS, m.RSS)
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

func (p *controllerProcess) resetPeak() (int64, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.peakRSS
	p.peakRSS = 0
	return r, 0
}

// profile saves a CPU profile of the controller's next seconds (REWIND_HUB_PPROF).
func (p *controllerProcess) profile(b *testing.B, label string, seconds int) (wait func()) {
	if profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		cs, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
		if err != nil {
			b.Logf("API server profile: %v", err)
			return
		}
		data, err := cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", fmt.Sprint(seconds)).Timeout(time.Duration(seconds+30) * time.Second).DoRaw(context.Background())
		if err != nil {
			b.Logf("API server profile: %v", err)
			return
		}
		_ = os.WriteFile(filepath.Join(profileDir, label+".apiserver.cpu.pprof"), data, 0o644)
	})
	wg.Go(func() {
		resp, err := http.Get(fmt.Sprintf("%s/profile?seconds=%d", p.pprof, seconds))
		if err != nil {
			b.Logf("profile: %v", err)
			return
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		_ = os.WriteFile(filepath.Join(profileDir, label+".cpu.pprof"), data, 0o644)
		if resp, err := http.Get(p.pprof + "/heap"); err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = os.WriteFile(filepath.Join(profileDir, label+".heap.pprof"), data, 0o644)
		}
	})
	return wg.Wait
}

// hubRequests reads the controller's client-go request counter for the hub.
func (p *controllerProcess) hubRequests(b *testing.B) float64 {
	b.Helper()
	resp, err := http.Get(p.metrics)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	hubHost := strings.TrimPrefix(env.Hub.Server, "https://")
	sum := 0.0
	for labels, v := range counter(b, data, "rest_client_requests_total") {
		if labels["host"] == hubHost {
			sum += v
		}
	}
	return sum
}

// counter is every series of the counter name in data (Prometheus text exposition, parsed with
// expfmt), as its labels and value.
func counter(b *testing.B, data []byte, name string) iter.Seq2[map[string]string, float64] {
	b.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		b.Fatalf("parsing metrics: %v", err)
	}
	return counterOf(families, name)
}

// counterOf yields each series of counter name in families with its labels.
func counterOf(families map[string]*dto.MetricFamily, name string) iter.Seq2[map[string]string, float64] {
	return func(yield func(map[string]string, float64) bool) {
		f := families[name]
		if f == nil {
			return
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !yield(labels, m.GetCounter().GetValue()) {
				return
			}
		}
	}
}

// apiRequests reads the hub kube-apiserver's request counter (apiserver_request_total), summed
// by verb and resource ("PATCH rollouttargets/status"), everyone's requests: the controller's,
// the agents' stand-in's and the benchmark's own watch. Those refused for a conflict (409: an
// optimistic lock that lost, each a request wasted and a write again) are counted again under
// "409 " and the same key.
func apiRequests(b *testing.B) map[string]float64 {
	b.Helper()
	fams, err := hubMetrics()
	if err != nil {
		b.Fatal(err)
	}
	return requestCounts(fams)
}

// hubMetrics reads and parses the hub kube-apiserver's /metrics.
func hubMetrics() (map[string]*dto.MetricFamily, error) {
	cs, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		return nil, err
	}
	data, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return nil, fmt.Errorf("reading the hub API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(bytes.NewReader(data))
}

// requestCounts sums apiserver_request_total as apiRequests words it.
func requestCounts(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for l, v := range counterOf(fams, "apiserver_request_total") {
		if l["verb"] == "WATCH" || l["resource"] == "" {
			continue // long-running, or not a resource (discovery, /metrics)
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
		if l["code"] == "409" {
			out["409 "+key] += v
		}
	}
	return out
}

// perCluster words the largest counts of m per cluster.
func perCluster(m map[string]float64, n float64) string {
	scaled := map[string]float64{}
	for k, v := range m {
		if v/n >= 0.05 {
			scaled[k] = v / n
		}
	}
	return breakdown(scaled)
}

// cpuTimes returns the CPU seconds used so far by the controller, this process (the agents'
// stand-in and the benchmark's watch) and each testbed process (etcd, kube-apiserver (hub)).
func cpuTimes(p *controllerProcess) map[string]float64 {
	out := map[string]float64{"controller": procCPU(p.cmd.Process.Pid), "agents' stand-in (this process)": procCPU(os.Getpid())}
	for _, r := range env.Processes() {
		kind, cluster, _ := strings.Cut(r.Name, "/")
		if cluster != "" {
			kind += " (" + cluster + ")"
		}
		out[kind] += procCPU(r.PID)
	}
	return out
}

func diff(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

func breakdown(m map[string]float64) string {
	keys := slices.Collect(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(keys, func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if m[k] >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// procCPU returns the CPU seconds process pid used so far (0 if it is gone).
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:3], " ")
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
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// tellWindow holds the hub API server's requests and every process's CPU seconds at the failed
// gate and when the last cluster was told to restore: what the hub did while it told the fleet.
type tellWindow struct {
	done           chan struct{}
	from, to       time.Time
	apiFrom, apiTo map[string]float64
	// apfFrom and apfTo: the API server's priority and fairness queue waits (the sum of the
	// seconds and the count of requests), by priority level.
	apfFrom, apfTo map[string][2]float64
	cpuFrom, cpuTo map[string]float64
	told           int // clusters told to restore after the failed gate
	// queue is the deepest each of the controller's work queues was in the window (sampled every
	// 500 ms), and wait the mean time an item waited in it before a worker took it.
	queue, wait map[string]float64
	err         error
}

// watchTellWindow samples the window of (b) from the failed gate to n clusters told to restore
// (polled every 100 ms; the API server's metrics are read at its ends only, the controller's
// work queues every 500 ms).
func watchTellWindow(ctx context.Context, ag *agents, p *controllerProcess, n int) *tellWindow {
	w := &tellWindow{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ag.failed().IsZero() {
			select {
			case <-ctx.Done():
				w.err = ctx.Err()
				return
			case <-tick.C:
			}
		}
		w.from, w.cpuFrom = time.Now(), cpuTimes(p)
		w.apiFrom, w.apfFrom = apiRequestsOrNil()
		_, waitFrom := p.queues()
		failed := ag.failed()
		w.queue = map[string]float64{}
		for i := 0; ag.toldSince(failed) < n; i++ {
			select {
			case <-ctx.Done():
				w.err = ctx.Err()
				return
			case <-tick.C:
			}
			if i%5 != 0 {
				continue
			}
			depth, _ := p.queues()
			for k, v := range depth {
				w.queue[k] = max(w.queue[k], v)
			}
		}
		w.to, w.cpuTo = time.Now(), cpuTimes(p)
		w.apiTo, w.apfTo = apiRequestsOrNil()
		_, waitTo := p.queues()
		w.wait = meanGrowth(waitFrom, waitTo, 1)
		w.told = ag.toldSince(failed)
	}()
	return w
}

// apiRequestsOrNil is apiRequests outside the benchmark's goroutine (nil when it fails), with
// the priority and fairness queue waits by priority level (the sum and count of
// apiserver_flowcontrol_request_wait_duration_seconds).
func apiRequestsOrNil() (map[string]float64, map[string][2]float64) {
	fams, err := hubMetrics()
	if err != nil {
		return nil, nil
	}
	return requestCounts(fams), histogramSums(fams, "apiserver_flowcontrol_request_wait_duration_seconds", "priority_level")
}

// histogramSums sums the sample sum and count of histogram name in fams by the value of label.
func histogramSums(fams map[string]*dto.MetricFamily, name, label string) map[string][2]float64 {
	out := map[string][2]float64{}
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			v := out[labelValue(m, label)]
			out[labelValue(m, label)] = [2]float64{v[0] + h.GetSampleSum(), v[1] + float64(h.GetSampleCount())}
		}
	}
	return out
}

// labelValue is the value of m's label name ("" when it has none).
func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// meanGrowth is, for each key, the growth of a sum between two readings of (sum, count)
// divided by the growth of the count, times scale (keys whose count did not grow are left out).
func meanGrowth(from, to map[string][2]float64, scale float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range to {
		if c := v[1] - from[k][1]; c > 0 {
			out[k] = scale * (v[0] - from[k][0]) / c
		}
	}
	return out
}

func (w *tellWindow) print(b *testing.B, n float64) {
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		b.Logf("the tell window did not end")
		return
	}
	if w.err != nil || w.apiFrom == nil || w.apiTo == nil {
		b.Logf("the tell window was not measured: %v", w.err)
		return
	}
	secs := w.to.Sub(w.from).Seconds()
	fmt.Printf("    while the hub told the fleet (%.1f s from the failed gate to the last copy told, sampled within 0.1 s; %d clusters told in it): requests per cluster %s\n",
		secs, w.told, perCluster(diff(w.apiFrom, w.apiTo), n))
	cpu := diff(w.cpuFrom, w.cpuTo)
	for k, v := range cpu {
		cpu[k] = v / secs
	}
	fmt.Printf("      CPU seconds per second in it: %s\n", breakdown(cpu))
	fmt.Printf("      the hub API server's priority and fairness in it, mean wait of a request in its queue by priority level (ms): %s\n",
		breakdown(meanGrowth(w.apfFrom, w.apfTo, 1000)))
	fmt.Printf("      the controller's work queues in it: deepest %s; mean wait of an item before a worker took it (s) %s\n", breakdown(w.queue), breakdown(w.wait))
}

// queues reads the controller's work queues: each one's depth now, and the sum and count of
// the time its items waited (workqueue_queue_duration_seconds), by controller name.
func (p *controllerProcess) queues() (depth map[string]float64, wait map[string][2]float64) {
	depth, wait = map[string]float64{}, map[string][2]float64{}
	resp, err := http.Get(p.metrics)
	if err != nil {
		return depth, wait
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return depth, wait
	}
	if f := fams["workqueue_depth"]; f != nil {
		for _, m := range f.GetMetric() {
			depth[labelValue(m, "name")] += m.GetGauge().GetValue()
		}
	}
	return depth, histogramSums(fams, "workqueue_queue_duration_seconds", "name")
}
