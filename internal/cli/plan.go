package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/preflight"
)

// ClusterPreflight is the plan of a release on one member cluster.
type ClusterPreflight struct {
	// Cluster is the MemberCluster's name, Wave the rollout wave it is in.
	Cluster string `json:"cluster"`
	Wave    string `json:"wave"`
	// Error says why the cluster could not be planned (unreachable, unreadable).
	Error string `json:"error,omitempty"`
	preflight.MemberPlan
}

// planDefaultMaxObjects bounds the custom resources read per CRD and cluster.
const planDefaultMaxObjects = 10000

// planDefaultMemberTimeout bounds the plan of one cluster (--member-timeout): a cut-off
// member's requests are each refused and retried, for minutes in all.
const planDefaultMemberTimeout = 2 * time.Minute

// planConcurrency is how many members are read at once.
const planConcurrency = 4

func newPlanCommand(h *hubFlags) *cobra.Command {
	var rel, output string
	var maxObjects int
	var memberTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "plan ROLLOUT [--release R]",
		Short: "Show, per cluster, what a release would do to the CRDs and custom resources before it rolls",
		Long: `For each member cluster of ROLLOUT's waves, compares the CRDs of release R (default: the
rollout's spec.release) with the cluster's live CRDs and checks the cluster's custom resources
against them, without changing anything:

  - CRD changes with their upgrade-safety findings (a stored or served version removed, a scope
    change, a new required field, a removed field, a changed type, a default added, changed or
    removed, an enum narrowed, a bound tightened, a CEL rule added; anything else as
    UnknownChange);
  - the custom resources the release's schema refuses, by name and field (structural schema,
    list types and x-kubernetes-validations, checked with the API server's own libraries);
  - the round trip: each custom resource converted to the new storage version and back, with
    every field that does not survive (a conversion webhook the release's CRD names by URL is
    called, trusting its caBundle; one named by a Service, or one that cannot be reached, is
    reported as not verified, never as safe);
  - the custom resources and bytes the snapshot before the change will hold, and its time at
    the capture rate rewind measured on the cluster (its last snapshot's status.bytes and
    status.captureDuration; "no measurement yet" before the first);
  - the release's objects a server-side dry run of its apply (dryRun=All, as rewind applies:
    field manager rewind, forced) would create or update, with a diff of the changed fields
    (Secret values are never shown), and what validation, admission or webhooks refuse. The
    dry run uses the release's own manifests (not spec.valuesFrom renderings).

At most --max-objects custom resources are read per CRD and cluster. A cluster not planned
within --member-timeout (one that does not answer: a fault is retried until then) is reported
as not planned, and the others are planned all the same. Exits non-zero when a finding has
error severity or a cluster cannot be read.`,
		Example: `  rewind plan mysql
  rewind plan mysql --release mysql-v2 -n team-a
  rewind plan mysql --release mysql-v2 --max-objects 500 -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
		RunE: func(cmd *cobra.Command, args []string) error {
			if maxObjects < 1 {
				return fmt.Errorf("--max-objects must be at least 1, got %d", maxObjects)
			}
			if memberTimeout < 0 {
				return fmt.Errorf("--member-timeout must not be negative, got %s (0: no limit)", memberTimeout)
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			plans, relName, err := planRollout(cmd.Context(), c, h.ns(), args[0], rel, maxObjects, memberTimeout)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, plans); ok {
				if err != nil {
					return err
				}
			} else {
				printPlan(cmd.OutOrStdout(), plans)
			}
			errs, failed := 0, 0
			for _, p := range plans {
				errs += len(preflight.Errors(p.Findings()))
				if p.Error != "" {
					failed++
				}
			}
			switch {
			case failed > 0:
				return fmt.Errorf("%d of %d clusters could not be planned", failed, len(plans))
			case errs > 0:
				return fmt.Errorf("release %s: %d findings of error severity", relName, errs)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&rel, "release", "", "the OperatorRelease to plan (default: the rollout's spec.release)")
	cmd.Flags().IntVar(&maxObjects, "max-objects", planDefaultMaxObjects, "custom resources read and checked per CRD and cluster, at most")
	cmd.Flags().DurationVar(&memberTimeout, "member-timeout", planDefaultMemberTimeout, "how long one cluster is planned for at most before it is reported as not planned (0: no limit)")
	outputFlag(cmd, &output)
	_ = cmd.RegisterFlagCompletionFunc("release", h.completeFlag(listReleases))
	return cmd
}

// planRollout plans release relName (the rollout's spec.release when "") on every cluster of
// the rollout's waves, each cluster for at most memberTimeout (0: no limit).
func planRollout(ctx context.Context, c client.Client, ns, rolloutName, relName string, maxObjects int, memberTimeout time.Duration) ([]ClusterPreflight, string, error) {
	ro, err := getRollout(ctx, c, ns, rolloutName)
	if err != nil {
		return nil, "", err
	}
	if relName == "" {
		relName = ro.Spec.Release
	}
	rel, objs, err := readRelease(ctx, c, ns, relName)
	if err != nil {
		return nil, "", fmt.Errorf("--release: %w", err)
	}
	if rel.Spec.Operator != ro.Spec.Operator {
		return nil, "", fmt.Errorf("release %s is a release of operator %q, but rollout %s rolls out %q", relName, rel.Spec.Operator, ro.Name, ro.Spec.Operator)
	}
	crds, err := preflight.CRDs(objs)
	if err != nil {
		return nil, "", fmt.Errorf("release %s: %w", relName, err)
	}
	var list v1alpha1.MemberClusterList
	if err := c.List(ctx, &list); err != nil {
		return nil, "", hubError(err)
	}
	clusters, err := rolloutClusters(ro, list.Items)
	if err != nil {
		return nil, "", err
	}
	plans := make([]ClusterPreflight, len(clusters))
	sem := make(chan struct{}, planConcurrency)
	var wg sync.WaitGroup
	for i, cw := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := ClusterPreflight{Cluster: cw.mc.Name, Wave: cw.wave}
			mp, err := fault.Within(ctx, memberTimeout, "planned", func(ctx context.Context) (preflight.MemberPlan, error) {
				return planCluster(ctx, c, cw.mc, ro, objs, crds, maxObjects)
			})
			if err != nil {
				p.Error = err.Error()
			}
			p.MemberPlan = mp
			plans[i] = p
		}()
	}
	wg.Wait()
	return plans, relName, nil
}

type clusterInWave struct {
	mc   *v1alpha1.MemberCluster
	wave string
}

// rolloutClusters returns the clusters of the rollout's waves in order; a cluster belongs to the
// first wave that selects it (as the rollout controller resolves them).
func rolloutClusters(ro *v1alpha1.Rollout, members []v1alpha1.MemberCluster) ([]clusterInWave, error) {
	seen := map[string]bool{}
	var out []clusterInWave
	for i, w := range ro.Spec.Waves {
		var picked []*v1alpha1.MemberCluster
		if len(w.Clusters) > 0 {
			for _, n := range w.Clusters {
				j := slices.IndexFunc(members, func(mc v1alpha1.MemberCluster) bool { return mc.Name == n })
				if j < 0 {
					return nil, fmt.Errorf("rollout %s: spec.waves[%d].clusters names %q, which is not a MemberCluster (register it with rewind clusters add)", ro.Name, i, n)
				}
				picked = append(picked, &members[j])
			}
		} else {
			sel, err := metav1.LabelSelectorAsSelector(w.Selector)
			if err != nil {
				return nil, fmt.Errorf("rollout %s: spec.waves[%d].selector: %w", ro.Name, i, err)
			}
			for j := range members {
				if sel.Matches(labels.Set(members[j].Labels)) {
					picked = append(picked, &members[j])
				}
			}
		}
		slices.SortFunc(picked, func(a, b *v1alpha1.MemberCluster) int { return strings.Compare(a.Name, b.Name) })
		for _, mc := range picked {
			if !seen[mc.Name] {
				seen[mc.Name] = true
				out = append(out, clusterInWave{mc: mc, wave: w.Name})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("rollout %s: no MemberCluster matches any wave (spec.waves)", ro.Name)
	}
	return out, nil
}

// planCluster plans the release on one member: its CRDs and custom resources, the dry run of
// the apply, and the snapshot's time at the capture rate rewind last measured there.
func planCluster(ctx context.Context, hub client.Client, mc *v1alpha1.MemberCluster, ro *v1alpha1.Rollout, objs []*unstructured.Unstructured, crds map[string]*apiextensionsv1.CustomResourceDefinition, maxObjects int) (preflight.MemberPlan, error) {
	cfg, err := member.ConfigFor(ctx, hub, mc)
	if err != nil {
		return preflight.MemberPlan{}, err
	}
	cl, err := member.New(mc.Name, cfg)
	if err != nil {
		return preflight.MemberPlan{}, err
	}
	m, err := preflight.LastMeasurement(ctx, hub, ro.Namespace, mc.Name, ro.Spec.Operator)
	if err != nil {
		return preflight.MemberPlan{}, hubError(err)
	}
	return preflight.PlanMember(ctx, cl, preflight.MemberOptions{Operator: ro.Spec.Operator, Objects: objs, CRDs: crds,
		Namespace: ro.Spec.InstallNamespace, MaxObjects: maxObjects, Measurement: m})
}

func printPlan(w io.Writer, plans []ClusterPreflight) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tWAVE\tINSTALLED\tCUSTOM RESOURCES\tBYTES\tSNAPSHOT\tERRORS\tWARNINGS")
	for _, p := range plans {
		if p.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\n", p.Cluster, p.Wave, dash(p.Installed))
			continue
		}
		errs, warns := 0, 0
		for _, f := range p.Findings() {
			switch f.Severity {
			case preflight.SeverityError:
				errs++
			case preflight.SeverityWarning:
				warns++
			}
		}
		took := p.Snapshot.Short()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\n", p.Cluster, p.Wave, dash(p.Installed), p.Objects, kib(p.Bytes), took, errs, warns)
	}
	_ = tw.Flush()
	for _, p := range plans {
		fmt.Fprintf(w, "\n%s:\n", p.Cluster)
		if p.Error != "" {
			fmt.Fprintf(w, "  cannot be planned: %s\n", p.Error)
			continue
		}
		for _, c := range p.CRDs {
			line := fmt.Sprintf("  CRD %s: %s", c.Name, c.Action)
			switch c.Action {
			case preflight.ActionCreate:
				line += fmt.Sprintf(" (storage %s)", c.To)
			case preflight.ActionUpdate:
				line += fmt.Sprintf(" (storage %s -> %s)", c.From, c.To)
			}
			if c.Action != preflight.ActionCreate {
				line += fmt.Sprintf(", %s, %s", plural(c.Objects, "custom resource"), kib(c.Bytes))
				if c.Truncated {
					line += " (only these were read: --max-objects)"
				}
			}
			fmt.Fprintln(w, line)
			ftw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			for _, f := range c.Findings {
				where := strings.Join(slices.DeleteFunc([]string{f.Version, f.Object, f.Path}, func(s string) bool { return s == "" }), " ")
				fmt.Fprintf(ftw, "    %s\t%s\t%s\t%s\n", f.Severity, f.Check, dash(where), f.Message)
			}
			_ = ftw.Flush()
		}
		printChanges(w, p.Changes)
		fmt.Fprintf(w, "  snapshot: %s, %s; capture time %s\n", plural(p.Objects, "custom resource"), kib(p.Bytes), p.Snapshot)
	}
}

// printChanges prints what the dry run of the apply would do.
func printChanges(w io.Writer, changes []preflight.ObjectChange) {
	count := map[string]int{}
	for _, c := range changes {
		count[c.Action]++
	}
	fmt.Fprintf(w, "  apply (dry run): %d to create, %d to update, %d unchanged\n",
		count[preflight.ActionCreate], count[preflight.ActionUpdate], count[preflight.ActionUnchanged])
	for _, c := range changes {
		if c.Action == preflight.ActionUnchanged && c.Refused == "" {
			continue
		}
		line := fmt.Sprintf("    %s %s %s", c.Action, c.Kind, strings.TrimPrefix(c.Namespace+"/"+c.Name, "/"))
		if c.Note != "" {
			line += " (" + c.Note + ")"
		}
		fmt.Fprintln(w, line)
		if c.Refused != "" {
			fmt.Fprintf(w, "      refused: %s\n", c.Refused)
		}
		for _, d := range c.Diff {
			fmt.Fprintf(w, "      %s\n", d)
		}
	}
}

// plural prints n things.
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// kib prints a byte count in KiB with one decimal.
func kib(b int64) string {
	return fmt.Sprintf("%.1f KiB", float64(b)/1024)
}
