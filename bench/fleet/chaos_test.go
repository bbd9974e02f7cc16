//go:build !unit

package fleet

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// chaosOff (REWIND_FLEET_CHAOS=off) skips the chaos run (e).
var chaosOff = os.Getenv("REWIND_FLEET_CHAOS") == "off"

// chaosFaults are the faults of the chaos run: every open connection to every member is reset
// every 10 s, and new connections are refused for the proxy's default moment
// (testbed.DefaultRefuseFor) after each reset. runCycle staggers the members (see
// setStaggered).
var chaosFaults = testbed.Faults{ResetEvery: 10 * time.Second}

// chaosTarget is the goal for each wall time of the chaos run against the same one without
// faults.
const chaosTarget = 1.5

// cycle is one upgrade (from the release the fleet runs to a release it never ran: the canary
// wave, then the fleet wave) and one failed release with its RollbackAll (mysql-picky, whose
// gate fails on the last member), as measured and as they ended.
type cycle struct {
	// release is the release upgraded to, and rolled back to.
	release string
	// faults are the faults injected through the cycle (nil: none).
	faults *testbed.Faults
	// upgrade is from setting the release to the Rollout seen Succeeded; canary and wave are
	// the spans of the canary wave's cluster and of the fleet wave's clusters within it.
	upgrade, canary, wave time.Duration
	// upgraded is how the upgrade ended (the Rollout's phase and target counts).
	upgraded string
	// gate is from setting the failed release to the Rollout seen RollingBack: the failing
	// gate's timeout is most of it.
	gate time.Duration
	// rollback is from RollingBack to RolledBack seen; restores from the first restore's
	// start to the last one's finish.
	rollback, restores time.Duration
	// wall is the whole cycle, from setting the release to the end of the rollback.
	wall time.Duration
	// memberUp and memberBack are the member API requests per cluster of the upgrade and of
	// the failed release with its rollback.
	memberUp, memberBack string
	// injected are the faults the member proxy injected during the cycle.
	injected testbed.FaultCounts
	// retries are the faults the controller retried in place (rewind_fault_retries_total).
	retries map[retryKey]float64
	// gateFailed is the health gates that failed, by cluster (rewind_health_gate_failures_total).
	gateFailed map[string]float64
	// probes says how close the members' health probes came to an unreachable member.
	probes string
	// rss and anon are the controller's peak RSS and RssAnon during the cycle.
	rss, anon int64
	// stepsUp and stepsBack are the runs of each step (and the seconds they ran), summed over
	// the clusters, in the upgrade and in the failed release with its rollback.
	stepsUp, stepsBack map[string]stepRuns
	// waited is each cluster/path that waited (status.waitingFor) and why.
	waited map[string]string
	// failed is each cluster/path seen failed, with its step and message (the watcher polls,
	// so a failure the failure policy acts on at once may go unseen; gateFailed counts them).
	failed map[string]string
	// out is the end state after the rollback.
	out outcome
}

// stepRuns is how often a step ran (a run that met a fault and was retried counts as one) and
// the seconds those runs took (not the backoff between them), summed over the clusters.
type stepRuns struct {
	runs    float64
	seconds float64
}

// stepTotals reads rewind_step_duration_seconds of a rollout: runs and seconds by step, summed
// over the clusters.
func (p *metricsEndpoint) stepTotals(b *testing.B, rollout string) map[string]stepRuns {
	out := map[string]stepRuns{}
	for _, suffix := range []string{"_count", "_sum"} {
		for _, s := range p.samples(b, "rewind_step_duration_seconds"+suffix) {
			if s.label("rollout") != rollout {
				continue
			}
			r := out[s.label("step")]
			if suffix == "_count" {
				r.runs += s.value
			} else {
				r.seconds += s.value
			}
			out[s.label("step")] = r
		}
	}
	return out
}

// stepDelta is the runs between two readings of stepTotals.
func stepDelta(before, after map[string]stepRuns) map[string]stepRuns {
	out := map[string]stepRuns{}
	for st, a := range after {
		if d := (stepRuns{a.runs - before[st].runs, a.seconds - before[st].seconds}); d.runs > 0 {
			out[st] = d
		}
	}
	return out
}

// stepCompare formats the runs and seconds of each step without faults and with them.
func stepCompare(without, with map[string]stepRuns) string {
	steps := map[string]bool{}
	for st := range without {
		steps[st] = true
	}
	for st := range with {
		steps[st] = true
	}
	var parts []string
	for _, st := range slices.Sorted(maps.Keys(steps)) {
		a, c := without[st], with[st]
		parts = append(parts, fmt.Sprintf("%s %.0f runs %.1f s -> %.0f runs %.1f s", st, a.runs, a.seconds, c.runs, c.seconds))
	}
	return strings.Join(parts, "; ")
}

// retryKey is one series of rewind_fault_retries_total within a rollout.
type retryKey struct{ cluster, step string }

// faultRetries reads rewind_fault_retries_total of a rollout, by cluster and step.
func (p *metricsEndpoint) faultRetries(b *testing.B, ns, rollout string) map[retryKey]float64 {
	out := map[retryKey]float64{}
	for _, s := range p.samples(b, "rewind_fault_retries_total") {
		if s.label("namespace") == ns && s.label("rollout") == rollout {
			out[retryKey{s.label("cluster"), s.label("step")}] += s.value
		}
	}
	return out
}

// retryDelta is the retries made between two readings of faultRetries.
func retryDelta(before, after map[retryKey]float64) map[retryKey]float64 {
	out := map[retryKey]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// gateFailures reads rewind_health_gate_failures_total of a rollout, by cluster.
func (p *metricsEndpoint) gateFailures(b *testing.B, ns, rollout string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range p.samples(b, "rewind_health_gate_failures_total") {
		if s.label("namespace") == ns && s.label("rollout") == rollout {
			out[s.label("cluster")] += s.value
		}
	}
	return out
}

// gateDelta is the gate failures between two readings of gateFailures, as "cluster: n".
func gateDelta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// retrySummary formats retries: the total, by step, and how they spread over the clusters.
func retrySummary(r map[retryKey]float64, clusters int) string {
	var total float64
	byStep, byCluster := map[string]float64{}, map[string]float64{}
	for k, v := range r {
		total += v
		byStep[k.step] += v
		byCluster[k.cluster] += v
	}
	if total == 0 {
		return "none"
	}
	var steps []string
	for _, st := range slices.Sorted(maps.Keys(byStep)) {
		steps = append(steps, fmt.Sprintf("%s %.0f", st, byStep[st]))
	}
	most, top := "", 0.0
	for _, c := range slices.Sorted(maps.Keys(byCluster)) {
		if byCluster[c] > top {
			most, top = c, byCluster[c]
		}
	}
	keys := slices.SortedFunc(maps.Keys(r), func(a, b retryKey) int {
		if r[a] != r[b] {
			return cmpFloat(r[b], r[a])
		}
		return strings.Compare(a.cluster+a.step, b.cluster+b.step)
	})
	var tops []string
	for _, k := range keys[:min(3, len(keys))] {
		tops = append(tops, fmt.Sprintf("%s %s %.0f", k.cluster, k.step, r[k]))
	}
	return fmt.Sprintf("%.0f in all; by step: %s; %d of %d clusters retried, at most %.0f on one (%s); most in one step: %s",
		total, strings.Join(steps, ", "), len(byCluster), clusters, top, most, strings.Join(tops, ", "))
}

// subCounts is the faults injected between two readings of FaultCounts (no HTTP faults here).
func subCounts(after, before testbed.FaultCounts) testbed.FaultCounts {
	return testbed.FaultCounts{
		Resets: after.Resets - before.Resets, ConnsReset: after.ConnsReset - before.ConnsReset, ConnsRefused: after.ConnsRefused - before.ConnsRefused,
		HTTPRequests: after.HTTPRequests - before.HTTPRequests, HTTPFaults: after.HTTPFaults - before.HTTPFaults,
	}
}

// probeWatch samples the controller's rewind_member_probe_consecutive_failures every 500 ms
// and keeps each member's largest value: how close the health probe came to finding a member
// unreachable (--probe-failure-threshold, 3).
type probeWatch struct {
	mu   sync.Mutex
	max  map[string]float64
	errs int
	stop chan struct{}
	done sync.WaitGroup
}

func watchProbes(p *controllerProcess) *probeWatch {
	w := &probeWatch{max: map[string]float64{}, stop: make(chan struct{})}
	w.done.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			samples, err := p.scrape("rewind_member_probe_consecutive_failures")
			w.mu.Lock()
			if err != nil {
				w.errs++
			}
			for _, s := range samples {
				c := s.label("cluster")
				w.max[c] = max(w.max[c], s.value)
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
		}
	})
	return w
}

// Stop ends the sampling and says the largest count of consecutive probe failures seen.
func (w *probeWatch) Stop() string {
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	top, who, failing := 0.0, "", 0
	for _, c := range slices.Sorted(maps.Keys(w.max)) {
		if w.max[c] > 0 {
			failing++
		}
		if w.max[c] > top {
			top, who = w.max[c], c
		}
	}
	s := fmt.Sprintf("%d of %d members had a failed probe; at most %.0f in a row (%s; a member is unreachable at 3)", failing, len(w.max), top, cmpOr(who, "none"))
	if w.errs > 0 {
		s += fmt.Sprintf(" (%d scrapes of /metrics failed)", w.errs)
	}
	return s
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpOr(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// outcome is how a failed release and its RollbackAll ended: the Rollout, every target of its
// last revision, every member's installed-version record, and every member compared object by
// object with the snapshot it was restored to.
type outcome struct {
	phase, release, failedRelease string
	// rolledBack is the reason of the RolledBack condition ("" when there is none).
	rolledBack string
	// history is the last two revisions: release, outcome, and whether automatic.
	history string
	// targets is each cluster's path and phase in the last revision.
	targets map[string]string
	// messages are the status messages of targets that did not end RolledBack.
	messages []string
	// records is each member's installed-version record's release ("none" when missing).
	records map[string]string
	// exact is "" for a member whose every snapshot object equals the live one (and which
	// has no custom resource the snapshot does not hold), else what differs.
	exact map[string]string
	// compared is the number of objects compared on each member.
	compared map[string]int
}

// directMembers are clients of the members' API servers that bypass the member proxy: the
// comparison after a run reads 1,000 objects per member and is not part of what is measured.
var (
	directMu      sync.Mutex
	directMembers = map[string]*member.Cluster{}
)

func direct(b *testing.B, m *testbed.Cluster) *member.Cluster {
	b.Helper()
	directMu.Lock()
	defer directMu.Unlock()
	if cl := directMembers[m.Name]; cl != nil {
		return cl
	}
	cfg := rest.CopyConfig(m.RESTConfig())
	if m.DirectServer != "" {
		cfg.Host = m.DirectServer
	}
	cl, err := member.New(m.Name, cfg)
	if err != nil {
		b.Fatal(err)
	}
	directMembers[m.Name] = cl
	return cl
}

// observe reads how the rollout ended; pull says its members are pull members, whose
// snapshots are in their hub namespaces, under their own keys.
func observe(b *testing.B, hub client.Client, ns, rollout string, pull bool) outcome {
	b.Helper()
	ctx := context.Background()
	ro := &v1alpha1.Rollout{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: rollout}, ro); err != nil {
		b.Fatal(err)
	}
	o := outcome{phase: ro.Status.Phase, release: ro.Status.CurrentRelease, failedRelease: ro.Status.FailedRelease,
		targets: map[string]string{}, records: map[string]string{}, exact: map[string]string{}, compared: map[string]int{}}
	if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack); c != nil && c.Status == metav1.ConditionTrue {
		o.rolledBack = c.Reason
	}
	var hist []string
	for _, h := range ro.Status.History[max(0, len(ro.Status.History)-2):] {
		e := h.Release + " " + h.Outcome
		if h.Automatic {
			e += " (automatic)"
		}
		hist = append(hist, e)
	}
	o.history = strings.Join(hist, ", then ")

	var list v1alpha1.RolloutTargetList
	if err := hub.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelRollout: rollout}); err != nil {
		b.Fatal(err)
	}
	snaps := map[string]string{}
	for _, t := range list.Items {
		if t.Spec.Revision != ro.Status.Revision {
			continue
		}
		o.targets[t.Spec.Cluster] = t.Spec.Path + " " + t.Status.Phase
		if t.Status.Phase != v1alpha1.ClusterRolledBack {
			o.messages = append(o.messages, fmt.Sprintf("%s: %s %s at step %s (faults %d, waiting for %q): %s",
				t.Spec.Cluster, t.Spec.Path, t.Status.Phase, t.Status.Step, t.Status.Faults, t.Status.WaitingFor, t.Status.Message))
		}
		if t.Spec.Path == v1alpha1.PathRestore {
			snaps[t.Spec.Cluster] = t.Spec.Snapshot
		}
	}
	slices.Sort(o.messages)

	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, m := range env.Members {
		cl := direct(b, m)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rel := "none"
			rec, err := member.ReadRecord(ctx, cl.Client, "mysql-operator")
			switch {
			case err != nil:
				rel = "unreadable: " + err.Error()
			case rec != nil:
				rel = rec.Release
			}
			exact, n := "no Restore target, so no snapshot to compare with", 0
			if snap := snaps[m.Name]; snap != "" {
				snapNS, keyNS := ns, ""
				if pull {
					snapNS, keyNS = v1alpha1.MemberNamespace(m.Name), v1alpha1.MemberNamespace(m.Name)
				}
				exact, n = compareWithSnapshot(ctx, hub, cl, snapNS, keyNS, snap)
			}
			mu.Lock()
			o.records[m.Name], o.exact[m.Name], o.compared[m.Name] = rel, exact, n
			mu.Unlock()
		})
	}
	wg.Wait()
	return o
}

// compareWithSnapshot compares every object of snapshot snap (in namespace ns, its key in
// keyNS: "" for the hub's default) with the live one on cl, as
// test/e2e's assertEqualsSnapshot does (restore.Equal), reading the live objects with one LIST
// per kind and namespace; it also counts custom resources the snapshot does not hold. It
// returns "" when the member is exact, else what differs, and the number of objects compared.
func compareWithSnapshot(ctx context.Context, hub client.Client, cl *member.Cluster, ns, keyNS, snap string) (string, int) {
	s := &v1alpha1.Snapshot{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: snap}, s); err != nil {
		return fmt.Sprintf("snapshot %s: %v", snap, err), 0
	}
	_, entries, err := (&snapshot.Hub{Client: hub, KeyNamespace: keyNS}).Load(ctx, s)
	if err != nil {
		return fmt.Sprintf("loading snapshot %s: %v", snap, err), 0
	}
	type group struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	groups := map[group][]snapshot.Entry{}
	for _, e := range entries {
		g := group{e.Object.GroupVersionKind(), e.Object.GetNamespace()}
		groups[g] = append(groups[g], e)
	}
	var diffs []string
	compared, crs := 0, 0
	for g, es := range groups {
		ri, _, err := cl.ResourceClient(cl.Dynamic, es[0].Object)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("%s: %v", g.gvk.Kind, err))
			continue
		}
		live, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("listing %s in %q: %v", g.gvk.Kind, g.ns, err))
			continue
		}
		byName := map[string]*unstructured.Unstructured{}
		for i := range live.Items {
			byName[live.Items[i].GetName()] = &live.Items[i]
		}
		inSnap := map[string]bool{}
		custom := false
		for _, e := range es {
			name := e.Object.GetName()
			inSnap[name] = true
			custom = custom || e.Section == snapshot.SectionCR
			if e.Section == snapshot.SectionCR {
				crs++
			}
			compared++
			l := byName[name]
			switch {
			case l == nil:
				diffs = append(diffs, fmt.Sprintf("%s %s/%s is missing", g.gvk.Kind, g.ns, name))
			case !restore.Equal(e.Object, l):
				diffs = append(diffs, fmt.Sprintf("%s %s/%s differs", g.gvk.Kind, g.ns, name))
			}
		}
		if custom {
			for name := range byName {
				if !inSnap[name] {
					diffs = append(diffs, fmt.Sprintf("%s %s/%s is not in the snapshot", g.gvk.Kind, g.ns, name))
				}
			}
		}
	}
	if crs == 0 {
		diffs = append(diffs, "the snapshot holds no custom resources: the comparison proves nothing")
	}
	if len(diffs) == 0 {
		return "", compared
	}
	slices.Sort(diffs)
	more := ""
	if len(diffs) > 5 {
		more = fmt.Sprintf(" and %d more", len(diffs)-5)
		diffs = diffs[:5]
	}
	return fmt.Sprintf("%d of %d objects of snapshot %s: %s%s", len(diffs), compared, snap, strings.Join(diffs, "; "), more), compared
}

// counted formats a map's values with how many keys have each, e.g. "19 Restore RolledBack, 1
// Restore Failed".
func counted(m map[string]string) string {
	n := map[string]int{}
	for _, v := range m {
		n[v]++
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%d %s", n[v], v))
	}
	return strings.Join(parts, ", ")
}

// gatesFailed formats gate failures by cluster.
func gatesFailed(g map[string]float64) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(g)) {
		parts = append(parts, fmt.Sprintf("%s (%.0f)", c, g[c]))
	}
	return cmpOr(strings.Join(parts, ", "), "none")
}

// summary is the cycle's end in one paragraph.
func (c cycle) summary(clusters int) string {
	o := c.out
	exact, objects := 0, 0
	var inexact []string
	for _, m := range slices.Sorted(maps.Keys(o.exact)) {
		if o.exact[m] == "" {
			exact++
			objects += o.compared[m]
			continue
		}
		inexact = append(inexact, m+": "+o.exact[m])
	}
	s := fmt.Sprintf("upgrade to %s: %s; mysql-picky: health gates failed on %s; then Rollout %s at %s (failed release held: %s; RolledBack condition: %s; last revisions: %s); targets of the last revision: %s; installed-version records: %s; %d of %d members exact (every object of the snapshot each was restored to equals the live one, %d objects compared)",
		c.release, c.upgraded, gatesFailed(c.gateFailed), o.phase, o.release, cmpOr(o.failedRelease, "none"), cmpOr(o.rolledBack, "none"), o.history,
		counted(o.targets), counted(o.records), exact, clusters, objects)
	if len(c.waited) > 0 {
		s += fmt.Sprintf("; targets that waited: %v", c.waited)
	}
	for _, k := range slices.Sorted(maps.Keys(c.failed)) {
		// The benchmark polls every 100 ms: a target is Failed only until the failure
		// policy gives it a new revision, so this is seen in some runs, not all.
		s += "\n      seen failed: " + k + " " + c.failed[k]
	}
	for _, m := range o.messages {
		s += "\n      not rolled back: " + m
	}
	for _, m := range inexact {
		s += "\n      not exact: " + m
	}
	return s
}

// generic replaces the cycle's own release by R in s, so that cycles to different releases
// compare.
func (c cycle) generic(s string) string { return strings.ReplaceAll(s, c.release, "R") }

// differences lists where c ended otherwise than base.
func (c cycle) differences(base cycle) []string {
	var d []string
	same := func(what, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s: %q without faults (to %s), %q with faults (to %s)", what, a, base.release, b, c.release))
		}
	}
	same("upgrade", base.generic(base.upgraded), c.generic(c.upgraded))
	same("health gates failed", gatesFailed(base.gateFailed), gatesFailed(c.gateFailed))
	same("Rollout phase", base.out.phase, c.out.phase)
	same("Rollout release", base.generic(base.out.release), c.generic(c.out.release))
	same("failed release held", base.out.failedRelease, c.out.failedRelease)
	same("RolledBack condition", base.out.rolledBack, c.out.rolledBack)
	same("last revisions", base.generic(base.out.history), c.generic(c.out.history))
	for _, m := range slices.Sorted(maps.Keys(c.out.records)) {
		same(m+" target", base.out.targets[m], c.out.targets[m])
		same(m+" record", base.generic(base.out.records[m]), c.generic(c.out.records[m]))
		if c.out.exact[m] != "" {
			d = append(d, fmt.Sprintf("%s is not exact with faults: %s", m, c.out.exact[m]))
		}
	}
	return d
}

// upgradeResult is how an upgrade ended.
func upgradeResult(ro *v1alpha1.Rollout) string {
	t := ro.Status.Targets
	return fmt.Sprintf("%s at %s, %d of %d targets Succeeded", ro.Status.Phase, ro.Status.CurrentRelease, t.Succeeded, t.Total)
}

// settledAfter says whether a revision after rev has ended (Succeeded, Failed or RolledBack).
func settledAfter(rev int32) func(*v1alpha1.Rollout) bool {
	return func(ro *v1alpha1.Rollout) bool {
		if ro.Status.Revision <= rev || ro.Status.ObservedGeneration != ro.Generation {
			return false
		}
		switch ro.Status.Phase {
		case v1alpha1.RolloutSucceeded, v1alpha1.RolloutFailed, v1alpha1.RolloutRolledBack:
			return true
		}
		return false
	}
}

func revisionOf(b *testing.B, hub client.Client, ns, name string) int32 {
	b.Helper()
	ro := &v1alpha1.Rollout{}
	if err := hub.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		b.Fatal(err)
	}
	return ro.Status.Revision
}

func ratio(a, b time.Duration) float64 { return a.Seconds() / b.Seconds() }

// setStaggered sets the faults of every member, one after another, ResetEvery/members apart.
// A member's first reset comes one interval after its faults are set (FaultInjector.Set), so
// setting them all at once would reset every member in step; staggered, some member is reset
// every ResetEvery/members and each every ResetEvery, from the moment this returns (the last
// is set then, the first is reset ResetEvery/members later).
func setStaggered(b *testing.B, f testbed.Faults) {
	b.Helper()
	t := time.NewTicker(f.ResetEvery / time.Duration(len(env.Members)))
	defer t.Stop()
	for i, m := range env.Members {
		if i > 0 {
			<-t.C
		}
		if err := m.Faults().Set(f); err != nil {
			b.Fatal(err)
		}
	}
}

// runCycle runs a cycle on the fleet rollout: an upgrade to release (one the fleet never ran,
// so every cluster takes the Upgrade path as in (a)), then mysql-picky, whose gate fails on
// the last member, and its RollbackAll to release, as in (b); with faults when set. The
// Rollout must have ended its last revision.
func runCycle(b *testing.B, hub client.Client, p *controllerProcess, ns string, names []string, release string, faults *testbed.Faults) cycle {
	b.Helper()
	const rollout = "fleet"
	c := cycle{release: release, faults: faults, waited: map[string]string{}}
	countsBefore := env.FaultCounts()
	retriesBefore, gatesBefore := p.faultRetries(b, ns, rollout), p.gateFailures(b, ns, rollout)
	_, memberBefore := p.requests(b)
	stepsBefore := p.stepTotals(b, rollout)
	_, _ = p.resetPeak()
	probes := watchProbes(p)
	if faults != nil {
		setStaggered(b, *faults)
	}

	rev := revisionOf(b, hub, ns, rollout)
	start := time.Now()
	setRelease(b, hub, ns, rollout, release)
	w := watch(hub, ns, rollout)
	upgraded := w.until(b, 15*time.Minute, release, settledAfter(rev))
	c.upgrade = time.Since(start)
	c.upgraded = upgradeResult(upgraded)
	c.canary, c.wave = w.span(names[:1], v1alpha1.PathUpgrade), w.span(names[1:], v1alpha1.PathUpgrade)
	maps.Copy(c.waited, w.waited)
	c.failed = w.failed
	_, memberMid := p.requests(b)
	c.memberUp = perCluster(memberBefore, memberMid)
	stepsMid := p.stepTotals(b, rollout)
	c.stepsUp = stepDelta(stepsBefore, stepsMid)

	if upgraded.Status.Phase == v1alpha1.RolloutSucceeded && upgraded.Status.CurrentRelease == release {
		rev = upgraded.Status.Revision
		pickyStart := time.Now()
		setRelease(b, hub, ns, rollout, "mysql-picky")
		w = watch(hub, ns, rollout)
		w.until(b, 15*time.Minute, "mysql-picky", func(ro *v1alpha1.Rollout) bool {
			return ro.Status.Revision > rev && ro.Status.Phase == v1alpha1.RolloutRollingBack || settledAfter(rev)(ro)
		})
		if at, ok := w.phaseAt[v1alpha1.RolloutRollingBack]; ok {
			c.gate = at.Sub(pickyStart)
		}
		w.until(b, 15*time.Minute, release, settledAfter(rev))
		if from, ok := w.phaseAt[v1alpha1.RolloutRollingBack]; ok {
			c.rollback = w.phaseAt[v1alpha1.RolloutRolledBack].Sub(from)
		}
		c.restores = w.span(names, v1alpha1.PathRestore)
		maps.Copy(c.waited, w.waited)
		c.failed = w.failed
	}
	c.wall = time.Since(start)

	if faults != nil {
		for _, m := range env.Members {
			m.Faults().SetEnabled(false)
		}
	}
	c.injected = subCounts(env.FaultCounts(), countsBefore)
	c.probes = probes.Stop()
	c.rss, c.anon = p.resetPeak()
	c.retries = retryDelta(retriesBefore, p.faultRetries(b, ns, rollout))
	c.gateFailed = gateDelta(gatesBefore, p.gateFailures(b, ns, rollout))
	_, memberAfter := p.requests(b)
	c.memberBack = perCluster(memberMid, memberAfter)
	c.stepsBack = stepDelta(stepsMid, p.stepTotals(b, rollout))
	c.out = observe(b, hub, ns, rollout, false)
	return c
}

// chaos is (e): base is (a) and (b), the upgrade to mysql-b and the RollbackAll from
// mysql-picky, without faults. The same cycle runs again to a release the fleet never ran
// (mysql-c) with every open connection to every member reset every 10 s, then once more
// without faults (mysql-d), all in the same process with the same controller: a run without
// faults on each side of the chaos run.
func chaos(b *testing.B, hub client.Client, p *controllerProcess, ns string, names []string, before cycle) {
	makeRelease(b, hub, ns, "mysql-c", "2.1.0", "")
	makeRelease(b, hub, ns, "mysql-d", "2.2.0", "")
	before.out = observe(b, hub, ns, "fleet", false)
	before.injected = env.FaultCounts() // everything since the testbed started: (a), (b) and what came before
	faults := chaosFaults
	ch := runCycle(b, hub, p, ns, names, "mysql-c", &faults)
	after := runCycle(b, hub, p, ns, names, "mysql-d", nil)
	last := names[len(names)-1]

	fmt.Printf("\n(e) chaos: the cycle of (a) and (b) (an upgrade, canary wave then fleet wave, to a release the fleet never ran; then mysql-picky, whose gate fails on %s, and the RollbackAll of every cluster) with every open connection to every member reset every %s and new ones refused for %s after each reset (the members staggered: some member is reset every %s, from the start of the upgrade); interleaved with the same cycle without faults, same process, same controller: (a) and (b) to mysql-b before it, the chaos run to mysql-c, then once more without faults to mysql-d\n",
		last, chaosFaults.ResetEvery, testbed.DefaultRefuseFor, (chaosFaults.ResetEvery / time.Duration(members)).Round(10*time.Millisecond))
	fmt.Printf("    faults injected over the chaos run's %.1f s (the proxy's counters): %s; without faults: %s (since the testbed started, through (a) and (b)), %s (after)\n",
		ch.wall.Seconds(), ch.injected, before.injected, after.injected)
	fmt.Printf("    retries the controller made in place (rewind_fault_retries_total): %s; without faults: %s (before), %s (after)\n",
		retrySummary(ch.retries, members), retrySummary(before.retries, members), retrySummary(after.retries, members))
	fmt.Printf("    the members' health probes during the chaos run: %s\n", ch.probes)
	fmt.Printf("    member API requests by the controller, per cluster, for the upgrade: %s with faults, %s and %s without; for the failed release and its rollback: %s with faults, %s and %s without\n",
		ch.memberUp, before.memberUp, after.memberUp, ch.memberBack, before.memberBack, after.memberBack)
	fmt.Printf("    step runs (a run that meets a fault and is retried counts again) and seconds running (backoff excluded), summed over the %d clusters, without faults (after) -> with faults:\n", members)
	fmt.Printf("      upgrade: %s\n", stepCompare(after.stepsUp, ch.stepsUp))
	fmt.Printf("      failed release and its rollback: %s\n", stepCompare(after.stepsBack, ch.stepsBack))
	fmt.Printf("    controller peak RSS: %.0f MiB during the chaos run (anonymous %.0f MiB), %.0f MiB during the run after it\n",
		float64(ch.rss)/(1<<20), float64(ch.anon)/(1<<20), float64(after.rss)/(1<<20))
	fmt.Printf("    %-64s %10s %10s %10s %14s\n", "wall time", "no faults", "faults", "no faults", "ratio")
	fmt.Printf("    %-64s %10s %10s %10s %14s\n", "", "(before)", "", "(after)", "(to the mean)")
	row := func(what string, x, y, z time.Duration, target bool) {
		t := ""
		if target {
			t = fmt.Sprintf(" (target <= %.1f)", chaosTarget)
		}
		mean := (x + z) / 2
		if x <= 0 || y <= 0 || z <= 0 {
			fmt.Printf("    %-64s %9.2fs %9.2fs %9.2fs %14s\n", what, x.Seconds(), y.Seconds(), z.Seconds(), "-")
			return
		}
		fmt.Printf("    %-64s %9.2fs %9.2fs %9.2fs %13.2fx%s\n", what, x.Seconds(), y.Seconds(), z.Seconds(), ratio(y, mean), t)
	}
	row("upgrade: release set to Rollout Succeeded", before.upgrade, ch.upgrade, after.upgrade, true)
	row("  canary wave (1 cluster)", before.canary, ch.canary, after.canary, false)
	row(fmt.Sprintf("  fleet wave (%d clusters)", members-1), before.wave, ch.wave, after.wave, false)
	row(fmt.Sprintf("mysql-picky set to failed gate (%s gate timeout in it)", gateTimeout), before.gate, ch.gate, after.gate, false)
	row(fmt.Sprintf("RollbackAll of %d clusters: failed gate to restored and healthy", members), before.rollback, ch.rollback, after.rollback, true)
	row("  the restores alone (first start to last finish)", before.restores, ch.restores, after.restores, false)
	fmt.Printf("    outcome without faults (before): %s\n", before.summary(members))
	fmt.Printf("    outcome with faults:             %s\n", ch.summary(members))
	fmt.Printf("    outcome without faults (after):  %s\n", after.summary(members))
	var diffs []string
	for _, base := range []cycle{before, after} {
		for m, e := range base.out.exact {
			if e != "" {
				diffs = append(diffs, fmt.Sprintf("%s is not exact after the rollback to %s without faults: %s", m, base.release, e))
			}
		}
		diffs = append(diffs, ch.differences(base)...)
	}
	slices.Sort(diffs)
	diffs = slices.Compact(diffs)
	if len(diffs) == 0 {
		fmt.Printf("    same result as without faults: yes (the upgrade, the gate that failed, every target's path and phase, every member's record, the Rollout's phase, failed release and rollback; every member exact)\n")
	} else {
		fmt.Printf("    same result as without faults: NO\n")
		for _, d := range diffs {
			fmt.Printf("      %s\n", d)
		}
		b.Errorf("the chaos run did not end as the runs without faults: %s", strings.Join(diffs, "; "))
	}
	if before.upgrade > 0 && after.upgrade > 0 {
		b.ReportMetric(ratio(ch.upgrade, (before.upgrade+after.upgrade)/2), "chaos-upgrade/base")
	}
	if ch.rollback > 0 && before.rollback > 0 && after.rollback > 0 {
		b.ReportMetric(ratio(ch.rollback, (before.rollback+after.rollback)/2), "chaos-rollback/base")
	}
	b.ReportMetric(float64(ch.injected.ConnsReset), "conns-reset")
	var retries float64
	for _, v := range ch.retries {
		retries += v
	}
	b.ReportMetric(retries, "fault-retries")
}
