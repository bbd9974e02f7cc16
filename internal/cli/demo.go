package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/runner"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// demoOptions are the flags of `rewind demo`.
type demoOptions struct {
	members int
	crs     int
	binDir  string
	keep    bool
	verbose bool
	// afterRollback runs once the automatic rollback is done, before the verification. Tests
	// inject a corrupted restore through it, to see the verification fail.
	afterRollback func(ctx context.Context, tb *testbed.Testbed) error
}

const (
	demoInstallNS = "mysql-operator-system"
	demoHubNS     = "default"
	demoCRNS      = "shop"
	demoRollout   = "mysql"
	// demoBadConfig is the setting release 3.0.0 of the demo cannot parse; only the clusters of
	// wave 2 use it, so the canary passes and wave 2 fails.
	demoBadConfig = "query_cache_type"
)

func newDemoCommand() *cobra.Command {
	o := &demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole story on a local testbed: install, roll out in waves, fail a gate, roll back, verify",
		Long: `Runs rewind end to end on a local testbed (real kube-apiserver, etcd, controller-manager,
scheduler and kwok per cluster; no Docker):

  1. finds (or builds, from a checkout) the testbed binaries;
  2. starts a hub and 3 member clusters with workloads, registers the members, starts the rewind
     controller and the sample MySQLCluster operator runner;
  3. installs mysql-operator 1.0.0 (plain manifests) everywhere, with 50 MySQLClusters per member;
  4. rolls out 2.0.0 (Helm chart, new storage version v1beta1) in 2 waves: it succeeds;
  5. rolls out 3.0.0 (OLM bundle, storage version v1, conversion webhook), a build that cannot
     parse a setting only the wave-2 clusters use: the canary passes, wave 2 fails its health
     gate, and rewind rolls every changed cluster back to its snapshot automatically;
  6. shows the timeline and the per-cluster states, and verifies that every member's
     MySQLClusters and CRD equal their state before 3.0.0, one ✓ or ✗ line per cluster.

Then it tears everything down (or, with --keep, waits for Ctrl-C). It exits non-zero when a
verification fails.`,
		Example: `  make demo                 # builds what it needs, then runs this
  rewind demo
  rewind demo --crs 20 --keep   # keep the testbed up afterwards to look around`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.members < 2 {
				return fmt.Errorf("--members must be at least 2 (a canary wave and a second wave), got %d", o.members)
			}
			if o.crs < 10 {
				return fmt.Errorf("--crs must be at least 10, got %d", o.crs)
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().IntVar(&o.members, "members", 3, "number of member clusters")
	cmd.Flags().IntVar(&o.crs, "crs", 50, "MySQLClusters per member")
	cmd.Flags().StringVar(&o.binDir, "bin-dir", os.Getenv(testbed.BinDirEnv), "folder with the testbed binaries ($"+testbed.BinDirEnv+"; default: build them from this checkout)")
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the testbed running after the demo until Ctrl-C")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "show the logs of the controller and the operators")
	return cmd
}

// demo is one run of the story.
type demo struct {
	o      *demoOptions
	out    io.Writer
	start  time.Time
	tb     *testbed.Testbed
	hub    client.Client
	runner *runner.Runner
	// stopController stops the in-process rewind controller and waits for it.
	stopController func()
	// reference is each member's MySQLClusters and CRD before 3.0.0.
	reference map[string][]*unstructured.Unstructured
	timeline  []string
	// seen is the last line shown per rollout/cluster (only changes are shown).
	seen map[string]string
}

func (d *demo) step(n int, format string, args ...any) {
	fmt.Fprintf(d.out, "\n==> [%d/6] %s\n", n, fmt.Sprintf(format, args...))
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "    "+format+"\n", args...)
}

func runDemo(ctx context.Context, out io.Writer, o *demoOptions) (err error) {
	d := &demo{o: o, out: out, start: time.Now(), reference: map[string][]*unstructured.Unstructured{}}
	if !o.verbose {
		// The controller's and the operators' logs, and the TLS noise of webhook servers while a
		// CA is being injected, would drown the story; --verbose shows them.
		ctrllog.SetLogger(logr.Discard())
		prev := log.Writer()
		log.SetOutput(io.Discard)
		defer log.SetOutput(prev)
	} else {
		ctrllog.SetLogger(zap.New(zap.WriteTo(indent(out))))
	}

	d.step(1, "Testbed binaries (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok)")
	var bins testbed.Binaries
	if o.binDir != "" {
		bins, err = testbed.BinariesIn(o.binDir)
	} else {
		d.say("building them from this checkout with hack/testbed/build.sh (about 15 minutes the first time, cached after)")
		bins, err = testbed.FindBinaries()
	}
	if err != nil {
		return err
	}
	d.say("using %s", filepath.Dir(bins.APIServer))

	d.step(2, "Starting a hub and %d member clusters with workloads", o.members)
	d.tb, err = testbed.Start(ctx, testbed.Options{Members: o.members, Workloads: true, BinDir: filepath.Dir(bins.APIServer), Log: indent(out)})
	if err != nil {
		return err
	}
	defer func() {
		if o.keep && err == nil {
			fmt.Fprintf(out, "\nThe testbed stays up (--keep). Hub kubeconfig: %s\nPress Ctrl-C to tear everything down.\n", d.tb.Hub.Kubeconfig)
			<-ctx.Done()
		}
		fmt.Fprintln(out, "\n==> Tearing down")
		if d.stopController != nil {
			d.stopController()
		}
		if d.runner != nil {
			d.runner.Stop()
		}
		if serr := d.tb.Stop(); serr != nil && err == nil {
			err = serr
		}
		fmt.Fprintf(out, "    done; the demo took %s\n", time.Since(d.start).Round(time.Second))
	}()
	if err := d.setUp(ctx); err != nil {
		return err
	}

	d.step(3, "Installing mysql-operator 1.0.0 (plain manifests) everywhere, with %d MySQLClusters per member", o.crs)
	if err := d.install(ctx); err != nil {
		return err
	}

	d.step(4, "Rolling out mysql-operator 2.0.0 (Helm chart; storage version v1beta1) in 2 waves")
	if err := d.setRelease(ctx, "mysql-v2"); err != nil {
		return err
	}
	if _, err := d.watch(ctx, "mysql-v2", "mysql-v2", v1alpha1.RolloutSucceeded, 5*time.Minute); err != nil {
		return err
	}
	for _, m := range d.tb.Members {
		if err := d.waitReconciled(ctx, m, "v1beta1", "2.0.0"); err != nil {
			return err
		}
	}
	d.say("every member runs 2.0.0; its MySQLClusters are Ready. Recording each member's MySQLClusters and CRD as they are now.")
	for _, m := range d.tb.Members {
		dyn, err := dynamic.NewForConfig(m.RESTConfig())
		if err != nil {
			return err
		}
		ref, err := memberState(ctx, m, dyn)
		if err != nil {
			return err
		}
		d.reference[m.Name] = ref
	}

	d.step(5, "Rolling out mysql-operator 3.0.0 (OLM bundle; storage version v1, conversion webhook)")
	d.say("this build cannot parse %s, which only the clusters of wave 2 use: the canary will pass, wave 2 will not", demoBadConfig)
	if err := d.setRelease(ctx, "mysql-v3"); err != nil {
		return err
	}
	if _, err := d.watch(ctx, "mysql-v3", "mysql-v2", v1alpha1.RolloutRolledBack, 8*time.Minute); err != nil {
		return err
	}
	if o.afterRollback != nil {
		if err := o.afterRollback(ctx, d.tb); err != nil {
			return err
		}
	}

	d.step(6, "What happened, and is every member exactly as before 3.0.0?")
	if err := d.showResult(ctx); err != nil {
		return err
	}
	return d.verify(ctx)
}

// indent prefixes the testbed's progress lines.
func indent(w io.Writer) io.Writer { return &prefixWriter{w: w, prefix: "    "} }

type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	for _, l := range lines {
		if l == "" {
			continue
		}
		if _, err := io.WriteString(p.w, p.prefix+l); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// rewind runs a CLI command against the hub (global --kubeconfig and -n added), showing it
// first when show is set.
func (d *demo) rewind(ctx context.Context, show string, args ...string) (string, error) {
	return d.run(ctx, show, append(args, "--kubeconfig", d.tb.Hub.Kubeconfig, "-n", demoHubNS)...)
}

// run runs a CLI command as it is, showing it first when show is set.
func (d *demo) run(ctx context.Context, show string, args ...string) (string, error) {
	if show != "" {
		d.say("$ rewind %s", show)
	}
	out, err := Run(ctx, args...)
	if err != nil {
		return out, fmt.Errorf("rewind %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

func (d *demo) setUp(ctx context.Context) error {
	c, err := client.New(d.tb.Hub.RESTConfig(), client.Options{Scheme: hubScheme})
	if err != nil {
		return err
	}
	d.hub = c
	if err := install.Hub(ctx, c); err != nil {
		return err
	}
	d.say("installed rewind's CRDs into the hub")
	// SkipNameValidation: the process may host another manager (the package's tests do).
	mgr, err := controller.NewManager(d.tb.Hub.RESTConfig(), controller.Options{MetricsAddr: "0", ProbeAddr: "0", GatePoll: 500 * time.Millisecond,
		SkipNameValidation: true})
	if err != nil {
		return err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = mgr.Start(mctx); close(done) }()
	d.stopController = func() { cancel(); <-done }
	d.say("started the rewind controller (in this process; `rewind controller` runs it on its own)")

	for _, m := range d.tb.Members {
		// clusters add takes the member's kubeconfig as --kubeconfig, the hub's as --hub-kubeconfig.
		if _, err := d.run(ctx, fmt.Sprintf("clusters add %s --kubeconfig %s", m.Name, m.Kubeconfig),
			"clusters", "add", m.Name, "--kubeconfig", m.Kubeconfig, "--hub-kubeconfig", d.tb.Hub.Kubeconfig); err != nil {
			return err
		}
	}
	members := make([]runner.Member, 0, len(d.tb.Members))
	for _, m := range d.tb.Members {
		cl, err := member.New(m.Name, m.RESTConfig())
		if err != nil {
			return err
		}
		members = append(members, runner.Member{Cluster: cl})
	}
	ro := runner.Options{}
	if d.o.verbose {
		ro.Log, ro.Logger = indent(d.out), ctrllog.Log
	}
	d.runner, err = runner.Start(ctx, members, ro)
	if err != nil {
		return err
	}
	d.say("started the sample operator runner: pods on kwok run nothing, so it runs the installed")
	d.say("release of mysql-operator (the real controller code) against each member")
	return nil
}

// install creates the three releases and the Rollout (1.0.0), then the MySQLClusters.
func (d *demo) install(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "rewind-demo-releases-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, r := range []struct {
		name, version string
		args          []string
		what          string
	}{
		{"mysql-v1", "1.0.0", nil, "plain manifests"},
		{"mysql-v2", "2.0.0", nil, "Helm chart"},
		{"mysql-v3", "3.0.0", []string{"--fail-on-config=" + demoBadConfig}, "OLM bundle"},
	} {
		p, err := mysqloperator.Write(dir, r.version, r.args...)
		if err != nil {
			return err
		}
		if _, err := d.rewind(ctx, fmt.Sprintf("release create %s --version %s --%s %s ...   (%s)", r.name, r.version, p.Source, "examples/mysql-operator/deploy/"+p.Build.Major(), r.what),
			p.ReleaseArgs(r.name)...); err != nil {
			return err
		}
	}
	// Each wave bakes: health is re-checked for a while after its gate passed, because a new
	// operator needs time to reconcile what the old one reported Ready.
	waves := []v1alpha1.Wave{{Name: "canary", Clusters: []string{d.tb.Members[0].Name}, MaxConcurrency: 1,
		BakeTime: &metav1.Duration{Duration: 10 * time.Second}}}
	var rest []string
	for _, m := range d.tb.Members[1:] {
		rest = append(rest, m.Name)
	}
	waves = append(waves, v1alpha1.Wave{Name: "fleet", Clusters: rest, MaxConcurrency: int32(len(rest)),
		BakeTime: &metav1.Duration{Duration: 10 * time.Second}})
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: demoRollout, Namespace: demoHubNS}, Spec: v1alpha1.RolloutSpec{
		Operator: "mysql-operator", Release: "mysql-v1", InstallNamespace: demoInstallNS, Waves: waves,
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: 30 * time.Second}},
	}}
	if err := d.hub.Create(ctx, ro); err != nil {
		return err
	}
	d.say("created Rollout %s: release mysql-v1, waves canary=[%s] fleet=[%s], each baking 10s; health gate timeout 30s; failure policy RollbackAll",
		demoRollout, d.tb.Members[0].Name, strings.Join(rest, ","))
	if _, err := d.watch(ctx, "mysql-v1", "mysql-v1", v1alpha1.RolloutSucceeded, 5*time.Minute); err != nil {
		return err
	}
	for i, m := range d.tb.Members {
		if err := createMySQLClusters(ctx, m, d.o.crs, i > 0); err != nil {
			return err
		}
	}
	for _, m := range d.tb.Members {
		if err := d.waitReconciled(ctx, m, "v1alpha1", "1.0.0"); err != nil {
			return err
		}
	}
	d.say("%d MySQLClusters per member are Ready, each with its StatefulSet, Service, ConfigMap and Secret", d.o.crs)
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// createMySQLClusters creates n MySQLClusters (v1alpha1) on m; with badConfig, every tenth one
// uses the setting release 3.0.0 cannot parse.
func createMySQLClusters(ctx context.Context, m *testbed.Cluster, n int, badConfig bool) error {
	dyn, err := dynamic.NewForConfig(m.RESTConfig())
	if err != nil {
		return err
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": demoCRNS}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range n {
		config := "max_connections=200"
		if badConfig && i%10 == 7 {
			config += "\n" + demoBadConfig + "=0"
		}
		u := operator.NewCluster("v1alpha1", demoCRNS, fmt.Sprintf("orders-%03d", i), operator.Spec{Replicas: int32(1 + i%3), MySQLVersion: "8.0", Config: config})
		if _, err := dyn.Resource(operator.GVR("v1alpha1")).Namespace(demoCRNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: creating MySQLCluster %s: %w", m.Name, u.GetName(), err)
		}
	}
	return nil
}

// waitReconciled waits until the operator of version runs on m and every MySQLCluster there is
// Ready, with its ConfigMap written by that operator.
func (d *demo) waitReconciled(ctx context.Context, m *testbed.Cluster, apiVersion, version string) error {
	dyn, err := dynamic.NewForConfig(m.RESTConfig())
	if err != nil {
		return err
	}
	// The ConfigMaps name the operator build that wrote them: that build runs.
	if err := operator.WaitSettled(ctx, dyn, demoCRNS, apiVersion, d.o.crs, metav1.ConditionTrue, "mysql-operator "+version, 3*time.Minute); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	return nil
}

func (d *demo) setRelease(ctx context.Context, rel string) error {
	if _, err := updateRollout(ctx, d.hub, demoHubNS, demoRollout, func(ro *v1alpha1.Rollout) error {
		ro.Spec.Release = rel
		return nil
	}); err != nil {
		return err
	}
	d.say("$ kubectl patch rollout %s --type merge -p '{\"spec\":{\"release\":\"%s\"}}'", demoRollout, rel)
	return nil
}

// watch follows the rollout until it reaches phase for release, printing (and recording for the
// timeline) every change of the rollout's phase and of each cluster's path, phase and step.
// set is the release last asked for: the rollout ending in another final state for it is an
// error at once.
func (d *demo) watch(ctx context.Context, set, release, phase string, timeout time.Duration) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := d.hub.Get(ctx, client.ObjectKey{Namespace: demoHubNS, Name: demoRollout}, ro); err != nil {
			return false, nil
		}
		line := fmt.Sprintf("rollout %-12s %s -> %s", dash(ro.Status.Phase), dash(ro.Status.PreviousRelease), ro.Status.CurrentRelease)
		if c := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionRolledBack); c != nil && c.Status == metav1.ConditionTrue &&
			(ro.Status.Phase == v1alpha1.RolloutRollingBack || ro.Status.Phase == v1alpha1.RolloutRolledBack) {
			line += ": " + c.Message
		}
		if len(line) > 200 {
			line = line[:197] + "..."
		}
		d.note("rollout", line)
		targets, err := listTargets(ctx, d.hub, ro)
		if err != nil {
			return false, nil
		}
		for _, t := range targets {
			phase, step, msg := v1alpha1.ClusterPending, "-", ""
			if t.Status.Revision == t.Spec.Revision && t.Status.Path == t.Spec.Path {
				phase, step = t.Status.Phase, t.Status.Step
			}
			if phase == v1alpha1.ClusterFailed || step == target.StepRestore || strings.Contains(t.Status.Message, "gate") {
				msg = t.Status.Message
			}
			state := fmt.Sprintf("%-8s %-8s %-11s %-14s %s", t.Spec.Cluster, dash(t.Spec.Path), dash(phase), dash(step), msg)
			if len(state) > 160 {
				state = state[:157] + "..."
			}
			d.note(t.Spec.Cluster, state)
		}
		if ro.Status.CurrentRelease == release && ro.Status.Phase == phase {
			return true, nil
		}
		if ro.Status.CurrentRelease == set && finalPhase(ro.Status.Phase) {
			return false, fmt.Errorf("the rollout ended %s for %s", ro.Status.Phase, set)
		}
		return false, nil
	})
	if err != nil {
		var buf bytes.Buffer
		targets, _ := listTargets(ctx, d.hub, ro)
		printRolloutStatus(&buf, ro, targets)
		return nil, fmt.Errorf("the rollout did not reach %s for %s within %s:\n%s", phase, release, timeout, buf.String())
	}
	return ro, nil
}

func (d *demo) note(key, line string) {
	if d.seen == nil {
		d.seen = map[string]string{}
	}
	seen := d.seen
	if seen[key] == line {
		return
	}
	seen[key] = line
	l := fmt.Sprintf("%7.1fs  %s", time.Since(d.start).Seconds(), strings.TrimRight(line, " "))
	d.timeline = append(d.timeline, l)
	fmt.Fprintln(d.out, "    "+l)
}

func (d *demo) showResult(ctx context.Context) error {
	fmt.Fprintln(d.out, "\n    Timeline (rollout phases and how each cluster ended):")
	for _, l := range d.timeline {
		if strings.Contains(l, "  rollout ") || strings.Contains(l, " Done") || strings.Contains(l, " Failed") {
			fmt.Fprintln(d.out, "    "+l)
		}
	}
	for _, args := range [][]string{{"rollout", "status", demoRollout}, {"history", demoRollout}} {
		out, err := d.rewind(ctx, "", args...)
		if err != nil {
			return err
		}
		fmt.Fprintf(d.out, "\n    $ rewind %s\n", strings.Join(args, " "))
		_, _ = indent(d.out).Write([]byte(out))
	}
	return nil
}

// memberState reads m's MySQLCluster CRD and every MySQLCluster, at the CRD's storage version,
// normalized (server-managed fields dropped).
func memberState(ctx context.Context, m *testbed.Cluster, dyn dynamic.Interface) ([]*unstructured.Unstructured, error) {
	crd, err := dyn.Resource(crdGVR).Get(ctx, "mysqlclusters.database.example.com", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	l, err := dyn.Resource(operator.GVR(snapshot.StorageVersion(crd))).Namespace("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name, err)
	}
	out := []*unstructured.Unstructured{crd}
	for i := range l.Items {
		out = append(out, &l.Items[i])
	}
	return out, nil
}

// verify compares every member with its reference and prints one ✓ or ✗ line per member.
func (d *demo) verify(ctx context.Context) error {
	fmt.Fprintln(d.out, "\n    Verification: each member's MySQLClusters (spec and status) and CRD (definition and")
	fmt.Fprintln(d.out, "    status.storedVersions) against what they were before 3.0.0:")
	var failed []string
	for _, m := range d.tb.Members {
		ref := d.reference[m.Name]
		var diffs []string
		dyn, err := dynamic.NewForConfig(m.RESTConfig())
		if err != nil {
			return err
		}
		var lastErr error
		// The restored operator may still be settling: give it a little time to converge.
		_ = wait.PollUntilContextTimeout(ctx, time.Second, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			live, err := memberState(ctx, m, dyn)
			if err != nil {
				lastErr = err
				return false, nil
			}
			diffs = compareStates(ref, live)
			return len(diffs) == 0, nil
		})
		if diffs == nil && lastErr != nil {
			diffs = []string{lastErr.Error()}
		}
		crd := ref[0]
		sv, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions")
		op := "no operator running"
		if cur, ok := d.runner.Current(m.Name); ok {
			op = "mysql-operator " + cur.Build.Version + " running"
		}
		if len(diffs) == 0 {
			fmt.Fprintf(d.out, "    ✓ %s: %d/%d MySQLClusters and the CRD equal their state before 3.0.0 (storage %s, storedVersions %s); %s\n",
				m.Name, len(ref)-1, len(ref)-1, snapshot.StorageVersion(crd), strings.Join(sv, ","), op)
			continue
		}
		failed = append(failed, m.Name)
		fmt.Fprintf(d.out, "    ✗ %s: %d differences from the state before 3.0.0; %s\n", m.Name, len(diffs), op)
		for i, df := range diffs {
			if i == 5 {
				fmt.Fprintf(d.out, "        ... and %d more\n", len(diffs)-5)
				break
			}
			fmt.Fprintf(d.out, "        %s\n", df)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("verification failed on %s", strings.Join(failed, ", "))
	}
	fmt.Fprintln(d.out, "\n    Every changed cluster is back, exactly, including the CRD's storage version.")
	return nil
}

// compareStates lists how live differs from ref, object by object and field by field, as the
// API server sees them (restore.Comparer: the live CRD's defaults applied, observedGeneration
// relative to the generation), and the CRD's stored versions.
func compareStates(ref, live []*unstructured.Unstructured) []string {
	cmp := restore.NewComparer(live[:1])
	key := func(u *unstructured.Unstructured) string {
		return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	}
	byKey := map[string]*unstructured.Unstructured{}
	for _, l := range live {
		byKey[key(l)] = l
	}
	var diffs []string
	seen := map[string]bool{}
	for _, r := range ref {
		k := key(r)
		seen[k] = true
		l := byKey[k]
		if l == nil {
			diffs = append(diffs, k+" is missing")
			continue
		}
		if r.GetKind() != "CustomResourceDefinition" && cmp.Equal(r, l) {
			continue
		}
		a, b := cmp.Prepare(r, l)
		if r.GetKind() == "CustomResourceDefinition" {
			// The definition and its stored versions; conditions and accepted names are the
			// API server's.
			for _, p := range []struct{ from, to *unstructured.Unstructured }{{r, a}, {l, b}} {
				sv, _, _ := unstructured.NestedStringSlice(p.from.Object, "status", "storedVersions")
				p.to.Object["status"] = map[string]any{"storedVersions": toAny(sv)}
			}
		}
		for _, c := range snapshot.Diff([]snapshot.Entry{{Section: snapshot.SectionCR, Object: a}}, []snapshot.Entry{{Section: snapshot.SectionCR, Object: b}}) {
			var fields []string
			for _, f := range c.Fields {
				fields = append(fields, fmt.Sprintf("%s: %s -> %s", f.Path, dash(f.Old), dash(f.New)))
			}
			diffs = append(diffs, fmt.Sprintf("%s changed: %s", k, strings.Join(fields, "; ")))
		}
	}
	for _, l := range live {
		if !seen[key(l)] {
			diffs = append(diffs, key(l)+" was not there before")
		}
	}
	return diffs
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
