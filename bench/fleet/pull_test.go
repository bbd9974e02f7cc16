//go:build !unit

package fleet

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/agentproc"
)

// pullOff (REWIND_FLEET_PULL=off) skips the pull-mode run (f).
var pullOff = os.Getenv("REWIND_FLEET_PULL") == "off"

// pullNS is the hub namespace of (f)'s Rollout, bound to every pull member.
const pullNS = "fleet-pull"

// modeFigures are what the hub spent on one upgrade and one failed release with its
// RollbackAll of the fleet, in one mode: (a) and (b) in push mode, (f) in pull mode.
type modeFigures struct {
	// upgradeCPU is the hub controller's CPU seconds from setting the release to the Rollout
	// seen Succeeded; backCPU from setting mysql-picky to the Rollout seen RolledBack;
	// restoreCPU the part of backCPU from RollingBack seen to RolledBack seen.
	upgradeCPU, backCPU, restoreCPU float64
	// hubAPIUp and hubAPIBack are the hub kube-apiserver's CPU seconds in the same windows.
	hubAPIUp, hubAPIBack float64
	// hubUp and hubBack are the hub API requests the controller made in those windows.
	hubUp, hubBack float64
	// memberUp and memberBack are the member API requests the controller made (perCluster).
	memberUp, memberBack string
	// canary and wave are the spans of the canary's and of the fleet wave's upgrades;
	// rollback is from RollingBack seen to RolledBack seen.
	canary, wave, rollback time.Duration
}

// agentFleet is (f)'s agents: one process per member, and their metrics.
type agentFleet struct {
	procs   map[string]*agentproc.Agent
	metrics map[string]*metricsEndpoint
}

// cpu is the CPU seconds every agent used so far.
func (f *agentFleet) cpu() float64 {
	sum := 0.0
	for _, a := range f.procs {
		sum += procCPU(a.PID())
	}
	return sum
}

// requests sums the agents' client-go request counters: to the hub, and to their members by
// method.
func (f *agentFleet) requests(b *testing.B) (hub float64, members map[string]float64) {
	members = map[string]float64{}
	for _, m := range f.metrics {
		h, byMethod := m.requests(b)
		hub += h
		for k, v := range byMethod {
			members[k] += v
		}
	}
	return hub, members
}

// gateFailures sums rewind_health_gate_failures_total of the agents, by cluster.
func (f *agentFleet) gateFailures(b *testing.B) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.metrics {
		for _, s := range m.samples(b, "rewind_health_gate_failures_total") {
			out[s.label("cluster")] += s.value
		}
	}
	return out
}

// exited names the agents whose process ended.
func (f *agentFleet) exited() []string {
	var out []string
	for name, a := range f.procs {
		if a.Exited() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// reading is the CPU seconds and requests of the hub controller and of the agents at one time.
type reading struct {
	times                map[string]float64 // by kind of process, as cpuTimes, with "agents (members)"
	hub, agentHub        float64
	members, agentMember map[string]float64
}

func read(b *testing.B, p *controllerProcess, agents *agentFleet) reading {
	r := reading{times: cpuTimes(p)}
	r.times["agents (members)"] = agents.cpu()
	r.hub, r.members = p.requests(b)
	r.agentHub, r.agentMember = agents.requests(b)
	return r
}

// pullMode is (f): the push Rollout of (a) and (b) and the push members' registrations go; the
// same members join in mode Pull (rewind clusters join, bound to namespace pullNS), each with
// its agent, the image's binary (rewind-controller agent) in a process of its own that reaches
// its member's API server through the same latency proxy as the controller did in push mode,
// and the hub directly as the controller does. A Rollout of the same shape adopts what the
// fleet runs, then runs the cycle of (a) and (b): an upgrade to a release the fleet never ran
// (canary wave, then fleet wave), and mysql-picky, whose gate fails on the last member, with
// its RollbackAll. The hub controller's CPU and requests per cluster are printed against push
// mode's (push), with the agents'; the run is checked as (b) and (e) check theirs.
func pullMode(b *testing.B, hub client.Client, p *controllerProcess, pushNS string, push modeFigures) {
	ctx := context.Background()
	names := make([]string, 0, len(env.Members))
	for _, m := range env.Members {
		names = append(names, m.Name)
	}
	running := retirePush(b, hub, pushNS)

	// The releases: the one the fleet runs (same manifests, so the new Rollout adopts it), one
	// it never ran, and mysql-picky.
	if err := hub.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pullNS}}); err != nil {
		b.Fatal(err)
	}
	makeRelease(b, hub, pullNS, running.Name, running.Spec.Version, "")
	adopted := &v1alpha1.OperatorRelease{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: pullNS, Name: running.Name}, adopted); err != nil {
		b.Fatal(err)
	}
	if adopted.Spec.Digest != running.Spec.Digest {
		b.Fatalf("release %s made again in %s has digest %s, the one the fleet runs %s: the pull Rollout could not adopt the fleet", running.Name, pullNS, adopted.Spec.Digest, running.Spec.Digest)
	}
	const upgradeTo = "mysql-e"
	makeRelease(b, hub, pullNS, upgradeTo, "2.3.0", "")
	makeRelease(b, hub, pullNS, "mysql-picky", "2.0.2", avoidMarked)

	joinStart := time.Now()
	agents := startAgents(b, hub, p.bin, names)
	fmt.Printf("\n(f) pull mode: the same %d members joined in mode Pull (rewind clusters join --bind %s) in %s, each with its agent (rewind-controller agent, the image's binary, a process of its own, 32 workers, 10 s heartbeat) reaching its member's API server through the same %s-each-way proxy and the hub directly, as the controller does; the same Rollout shape in namespace %s (canary wave of 1, fleet wave of %d), adopting %s, then the cycle of (a) and (b): an upgrade to %s, a release the fleet never ran, then mysql-picky, whose gate fails on %s, and the RollbackAll\n",
		members, pullNS, time.Since(joinStart).Round(time.Second), latency, pullNS, members-1, running.Name, upgradeTo, names[len(names)-1])

	gates := v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: gateTimeout}}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: pullNS}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: running.Name, InstallNamespace: "mysql-system", HealthGates: gates,
		Waves: []v1alpha1.Wave{
			{Name: "canary", Clusters: names[:1], MaxConcurrency: 1},
			{Name: "fleet", Clusters: names[1:], MaxConcurrency: int32(len(names) - 1)},
		}}}
	if err := hub.Create(ctx, ro); err != nil {
		b.Fatal(err)
	}
	w := watch(hub, pullNS, "fleet")
	adoptedRo := w.until(b, 10*time.Minute, running.Name, func(ro *v1alpha1.Rollout) bool {
		return ro.Status.Phase == v1alpha1.RolloutSucceeded || ro.Status.Phase == v1alpha1.RolloutFailed
	})
	if adoptedRo.Status.Phase != v1alpha1.RolloutSucceeded {
		b.Fatalf("the pull Rollout did not adopt %s: %s (failures %+v)", running.Name, upgradeResult(adoptedRo), adoptedRo.Status.Failures)
	}

	// Idle: the controller and the agents with nothing rolling out (Leases, probes, resyncs).
	idleFrom, idleAt := read(b, p, agents), time.Now()
	<-time.After(10 * time.Second)
	idleTo, idleWall := read(b, p, agents), time.Since(idleAt).Seconds()

	// The upgrade.
	pull := modeFigures{}
	gatesBefore := agents.gateFailures(b)
	c := cycle{release: upgradeTo, waited: map[string]string{}}
	r0 := read(b, p, agents)
	rev := adoptedRo.Status.Revision
	start := time.Now()
	setRelease(b, hub, pullNS, "fleet", upgradeTo)
	w = watch(hub, pullNS, "fleet")
	upgraded := w.until(b, 15*time.Minute, upgradeTo, settledAfter(rev))
	c.upgrade = time.Since(start)
	r1 := read(b, p, agents)
	c.upgraded = upgradeResult(upgraded)
	pull.canary, pull.wave = w.span(names[:1], v1alpha1.PathUpgrade), w.span(names[1:], v1alpha1.PathUpgrade)
	maps.Copy(c.waited, w.waited)
	c.failed = w.failed
	if upgraded.Status.Phase != v1alpha1.RolloutSucceeded || upgraded.Status.CurrentRelease != upgradeTo || int(upgraded.Status.Targets.Succeeded) != members {
		b.Fatalf("(f) the upgrade in pull mode: %s, want Succeeded at %s on %d of %d (failures %+v; agents exited: %v)",
			c.upgraded, upgradeTo, members, members, upgraded.Status.Failures, agents.exited())
	}

	// The failed release and its RollbackAll.
	markNodes(b, env.Members[len(env.Members)-1])
	rev = upgraded.Status.Revision
	setRelease(b, hub, pullNS, "fleet", "mysql-picky")
	w = watch(hub, pullNS, "fleet")
	w.until(b, 15*time.Minute, "mysql-picky", func(ro *v1alpha1.Rollout) bool {
		return ro.Status.Revision > rev && ro.Status.Phase == v1alpha1.RolloutRollingBack || settledAfter(rev)(ro)
	})
	r2 := read(b, p, agents)
	w.until(b, 15*time.Minute, upgradeTo, settledAfter(rev))
	r3 := read(b, p, agents)
	if from, ok := w.phaseAt[v1alpha1.RolloutRollingBack]; ok {
		pull.rollback = w.phaseAt[v1alpha1.RolloutRolledBack].Sub(from)
	}
	c.restores = w.span(names, v1alpha1.PathRestore)
	c.wall = time.Since(start)
	maps.Copy(c.waited, w.waited)
	maps.Copy(c.failed, w.failed)
	c.gateFailed = gateDelta(gatesBefore, agents.gateFailures(b))
	c.out = observe(b, hub, pullNS, "fleet", true)

	pull.upgradeCPU, pull.backCPU, pull.restoreCPU = r1.times["controller"]-r0.times["controller"], r3.times["controller"]-r1.times["controller"], r3.times["controller"]-r2.times["controller"]
	pull.hubUp, pull.hubBack = r1.hub-r0.hub, r3.hub-r1.hub
	const hubAPI = "kube-apiserver (hub)"
	pull.hubAPIUp, pull.hubAPIBack = r1.times[hubAPI]-r0.times[hubAPI], r3.times[hubAPI]-r1.times[hubAPI]
	pull.memberUp, pull.memberBack = perCluster(r0.members, r1.members), perCluster(r1.members, r3.members)
	agentUp, agentBack, agentRestore := r1.times["agents (members)"]-r0.times["agents (members)"], r3.times["agents (members)"]-r1.times["agents (members)"], r3.times["agents (members)"]-r2.times["agents (members)"]

	n := float64(members)
	fmt.Printf("    upgrade: canary wave of 1 cluster %s, fleet wave of %d clusters %s (push mode, (a): %s and %s); RollbackAll: %s from the failed gate to all restored and healthy (push mode, (b): %s)\n",
		pull.canary.Round(10*time.Millisecond), members-1, pull.wave.Round(10*time.Millisecond), push.canary.Round(10*time.Millisecond), push.wave.Round(10*time.Millisecond),
		pull.rollback.Round(10*time.Millisecond), push.rollback.Round(10*time.Millisecond))
	fmt.Printf("    %-78s %8s %8s %10s\n", "per cluster", "push", "pull", "pull/push")
	row := func(what string, pushV, pullV float64, format string) {
		r := "-"
		if pushV > 0 {
			r = fmt.Sprintf("%.2f", pullV/pushV)
		}
		fmt.Printf("    %-78s %8s %8s %10s\n", what, fmt.Sprintf(format, pushV), fmt.Sprintf(format, pullV), r)
	}
	row("hub controller CPU seconds, upgrade (release set to Succeeded)", push.upgradeCPU/n, pull.upgradeCPU/n, "%.3f")
	row("hub controller CPU seconds, failed release and its RollbackAll", push.backCPU/n, pull.backCPU/n, "%.3f")
	row("  of which the restores (RollingBack to RolledBack)", push.restoreCPU/n, pull.restoreCPU/n, "%.3f")
	row("agents' CPU seconds, upgrade (in their members; push mode has none)", 0, agentUp/n, "%.3f")
	row("agents' CPU seconds, failed release and its RollbackAll", 0, agentBack/n, "%.3f")
	row("  of which the restores", 0, agentRestore/n, "%.3f")
	row("hub kube-apiserver CPU seconds, upgrade", push.hubAPIUp/n, pull.hubAPIUp/n, "%.3f")
	row("hub kube-apiserver CPU seconds, failed release and its RollbackAll", push.hubAPIBack/n, pull.hubAPIBack/n, "%.3f")
	row("hub API requests by the controller, upgrade", push.hubUp/n, pull.hubUp/n, "%.0f")
	row("hub API requests by the controller, failed release and its RollbackAll", push.hubBack/n, pull.hubBack/n, "%.0f")
	row("hub API requests by the agents, upgrade (push mode has none)", 0, (r1.agentHub-r0.agentHub)/n, "%.0f")
	row("hub API requests by the agents, failed release and its RollbackAll", 0, (r3.agentHub-r1.agentHub)/n, "%.0f")
	fmt.Printf("    member API requests across the proxy, per cluster: by the hub controller %s (push: %s) for the upgrade, %s (push: %s) for the failed release and its RollbackAll; by the agents %s and %s\n",
		pull.memberUp, push.memberUp, pull.memberBack, push.memberBack, perCluster(r0.agentMember, r1.agentMember), perCluster(r1.agentMember, r3.agentMember))
	fmt.Printf("    CPU seconds during the pull upgrade by process: %s\n", cpuBreakdown(r0.times, r1.times))
	fmt.Printf("    CPU seconds during the pull failed release and its RollbackAll by process: %s\n", cpuBreakdown(r1.times, r3.times))
	fmt.Printf("    idle, nothing rolling out (%.0f s): the hub controller %.3f CPU seconds per second with %d pull members (Leases every 10 s), the %d agents together %.3f\n",
		idleWall, (idleTo.times["controller"]-idleFrom.times["controller"])/idleWall, members, members, (idleTo.times["agents (members)"]-idleFrom.times["agents (members)"])/idleWall)
	fmt.Printf("    on %d cores at load average %s now\n", runtime.NumCPU(), loadAverage())
	fmt.Printf("    outcome: %s\n", c.summary(members))

	// Correctness, as (b) and (e) check theirs: every member upgraded (checked above), then
	// the gate failed on the last member only, and every member was restored exactly.
	var wrong []string
	last := names[len(names)-1]
	if o := c.out; o.phase != v1alpha1.RolloutRolledBack || o.release != upgradeTo || o.failedRelease != "mysql-picky" {
		wrong = append(wrong, fmt.Sprintf("the Rollout ended %s at %s (failed release %q), want RolledBack at %s holding mysql-picky", o.phase, o.release, o.failedRelease, upgradeTo))
	}
	if g := slices.Sorted(maps.Keys(c.gateFailed)); !slices.Equal(g, []string{last}) {
		wrong = append(wrong, fmt.Sprintf("health gates failed on %v, want %s only", g, last))
	}
	for _, m := range names {
		if got := c.out.targets[m]; got != v1alpha1.PathRestore+" "+v1alpha1.ClusterRolledBack {
			wrong = append(wrong, fmt.Sprintf("%s's target: %q, want Restore RolledBack", m, got))
		}
		if got := c.out.records[m]; got != upgradeTo {
			wrong = append(wrong, fmt.Sprintf("%s's record: %s, want %s", m, got, upgradeTo))
		}
		if e := c.out.exact[m]; e != "" {
			wrong = append(wrong, fmt.Sprintf("%s is not exact: %s", m, e))
		}
	}
	if ex := agents.exited(); len(ex) > 0 {
		wrong = append(wrong, fmt.Sprintf("agents exited: %v", ex))
	}
	if len(wrong) > 0 {
		b.Errorf("(f) pull mode did not end as it must: %s", strings.Join(wrong, "; "))
	} else {
		fmt.Printf("    as it must: every member upgraded, the gate failed on %s only, every member rolled back to %s and equal to its snapshot object by object\n", last, upgradeTo)
	}
	if push.upgradeCPU > 0 && push.backCPU > 0 {
		b.ReportMetric(pull.upgradeCPU/push.upgradeCPU, "pull/push-upgrade-cpu")
		b.ReportMetric(pull.backCPU/push.backCPU, "pull/push-rollback-cpu")
	}
}

// retirePush deletes the push Rollout of (a) to (e) with its targets (the hub runs no garbage
// collector), then the push members' MemberClusters and kubeconfig Secrets, and waits until
// they are gone: the controller is left with nothing of push mode to do. It returns the
// release the fleet runs.
func retirePush(b *testing.B, hub client.Client, ns string) *v1alpha1.OperatorRelease {
	b.Helper()
	ctx := context.Background()
	ro := &v1alpha1.Rollout{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fleet"}, ro); err != nil {
		b.Fatal(err)
	}
	rel := &v1alpha1.OperatorRelease{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: ro.Status.CurrentRelease}, rel); err != nil {
		b.Fatal(err)
	}
	if err := hub.Delete(ctx, ro); err != nil {
		b.Fatal(err)
	}
	// Every target of the namespace: "solo"'s, deleted before (a), are still there too.
	if err := hub.DeleteAllOf(ctx, &v1alpha1.RolloutTarget{}, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	for _, m := range env.Members {
		if err := hub.Delete(ctx, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}); err != nil {
			b.Fatal(err)
		}
		if err := hub.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rewind-system", Name: m.Name + "-kubeconfig"}}); err != nil {
			b.Fatal(err)
		}
	}
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var mcs v1alpha1.MemberClusterList
		var targets v1alpha1.RolloutTargetList
		if err := hub.List(ctx, &mcs); err != nil {
			return false, nil
		}
		if err := hub.List(ctx, &targets, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		left = nil
		for _, mc := range mcs.Items {
			left = append(left, fmt.Sprintf("MemberCluster %s (finalizers %v)", mc.Name, mc.Finalizers))
		}
		for _, t := range targets.Items {
			left = append(left, fmt.Sprintf("RolloutTarget %s (finalizers %v)", t.Name, t.Finalizers))
		}
		if err := hub.Get(ctx, client.ObjectKeyFromObject(ro), &v1alpha1.Rollout{}); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("Rollout %s (%v)", ro.Name, err))
		}
		return len(left) == 0, nil
	})
	if err != nil {
		b.Fatalf("the push Rollout, its targets and the push members did not go: %v; left: %s", err, strings.Join(left, ", "))
	}
	return rel
}

// startAgents joins every member in mode Pull, bound to pullNS, and starts its agent; it
// returns once every member is Reachable (its agent's Lease is fresh).
func startAgents(b *testing.B, hub client.Client, bin string, names []string) *agentFleet {
	b.Helper()
	ctx := context.Background()
	rewind, err := agentproc.BuildRewind(filepath.Join(env.StateDir, "bin"))
	if err != nil {
		b.Fatal(err)
	}
	f := &agentFleet{procs: map[string]*agentproc.Agent{}, metrics: map[string]*metricsEndpoint{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	errs := make(chan error, len(names))
	for i, m := range env.Members {
		port := freePort(b)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			bootstrap := filepath.Join(env.StateDir, m.Name+".bootstrap.yaml")
			if err := agentproc.Join(ctx, rewind, env.Hub.Kubeconfig, m.Name, bootstrap, "--bind", pullNS, "--label", fmt.Sprintf("index=%d", i+1)); err != nil {
				errs <- err
				return
			}
			a, err := agentproc.Start(agentproc.Options{Bin: bin, Cluster: m.Name,
				CredentialFile: filepath.Join(env.StateDir, m.Name+".credential.json"), BootstrapFile: bootstrap, MemberKubeconfig: m.Kubeconfig,
				Args: []string{"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port), "--gate-poll", "500ms"},
				Log:  filepath.Join(env.StateDir, m.Name+".agent.log")})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			f.procs[m.Name] = a
			f.metrics[m.Name] = &metricsEndpoint{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	b.Cleanup(func() {
		var stop sync.WaitGroup
		for _, a := range f.procs {
			stop.Go(func() { a.Stop(syscall.SIGTERM) })
		}
		stop.Wait()
	})
	for err := range errs {
		b.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var mcs v1alpha1.MemberClusterList
		if err := hub.List(ctx, &mcs); err != nil {
			return false, nil
		}
		ready := 0
		for _, mc := range mcs.Items {
			if mc.Spec.Mode == v1alpha1.ModePull && meta.IsStatusConditionTrue(mc.Status.Conditions, v1alpha1.ConditionReachable) {
				ready++
			}
		}
		for _, m := range f.metrics {
			if _, err := m.scrape("rest_client_requests_total"); err != nil {
				return false, nil
			}
		}
		return ready == len(names), nil
	})
	if err != nil {
		b.Fatalf("the pull members did not all become Reachable (agents exited: %v; their logs: %s/*.agent.log): %v", f.exited(), env.StateDir, err)
	}
	return f
}
