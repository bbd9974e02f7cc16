package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/rolloutaction"
)

// getRollout reads the Rollout NAME of namespace ns.
func getRollout(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	if err := getHubObject(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, ro, "rollout", "kubectl get rollouts.rewind.dev -n "+ns); err != nil {
		return nil, err
	}
	return ro, nil
}

func newRolloutCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rollout",
		Aliases: []string{"rollouts"},
		Short:   "Watch, approve, pause and resume rollouts",
		Example: `  rewind rollout status mysql --watch
  rewind rollout approve mysql fleet
  rewind rollout pause mysql
  rewind rollout resume mysql`,
		Long: `A Rollout brings one operator to its desired OperatorRelease on the member clusters, wave
after wave, with a snapshot before every change and health gates after it. List them with
'kubectl get rollouts.rewind.dev -n NAMESPACE'.`,
	}
	cmd.AddCommand(newRolloutStatusCommand(h), newRolloutApproveCommand(h),
		newRolloutPauseCommand(h, true), newRolloutPauseCommand(h, false))
	return cmd
}

func newRolloutStatusCommand(h *hubFlags) *cobra.Command {
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status NAME [--watch]",
		Short: "Show a rollout's progress per wave and per cluster",
		Long: `Shows a rollout's phase and conditions, then one line per member cluster: its wave, its path
(upgrade or restore), its phase and step, the releases it goes from and to, and the snapshot
taken before it changed; then each cluster's metric analyses, and what its steps noted (objects
kept since the snapshot, a restore without a release's manifests, inconclusive metrics
approved). With --watch it prints again every 2 seconds until the rollout
succeeds, fails or is rolled back; with -o json or -o yaml each print is a whole Rollout
(YAML documents are separated by ---).`,
		Example: `  rewind rollout status mysql
  rewind rollout status mysql --watch
  rewind rollout status mysql -n team-a -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for first := true; ; first = false {
				ro, err := getRollout(cmd.Context(), c, h.ns(), args[0])
				if err != nil {
					return err
				}
				if !first && output == "yaml" {
					fmt.Fprintln(out, "---")
				}
				if ok, err := printStructured(out, output, ro); !ok {
					if !first {
						fmt.Fprintln(out)
					}
					targets, err := listTargets(cmd.Context(), c, ro)
					if err != nil {
						return err
					}
					printRolloutStatus(out, ro, targets)
				} else if err != nil {
					return err
				}
				// A phase is final only once the controller has seen the spec: right after
				// spec.release changed, the status still shows the previous revision's end.
				if !watch || (finalPhase(ro.Status.Phase) && ro.Status.ObservedGeneration == ro.Generation) {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(2 * time.Second):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep printing until the rollout ends")
	outputFlag(cmd, &output)
	return cmd
}

func newRolloutApproveCommand(h *hubFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "approve NAME [WAVE]",
		Short: "Approve a wave that requires manual approval, or clusters held by inconclusive metrics",
		Long: `Approves WAVE (default: the wave waiting now) of the rollout's current revision, so a wave
with requireApproval starts. The approval is the annotation approved.rewind.dev/<wave> set to
the revision: it does not carry over to the next release (a new revision needs its own), and
it leaves spec alone, so a GitOps tool that owns the spec does not undo it. Approving a wave
twice changes nothing.

When clusters of the current revision (of WAVE, if given) are held because a metric of their
health gate is inconclusive (waiting for AwaitingApproval), it approves those instead: each
RolloutTarget gets approved.rewind.dev/metrics set to the revision, and its gate passes.`,
		Example: `  rewind rollout approve mysql
  rewind rollout approve mysql production -n team-a`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: h.completeArgs(listRollouts, listWaves),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			wave := ""
			if len(args) == 2 {
				wave = args[1]
			}
			a, err := approveRollout(cmd.Context(), c, h.ns(), args[0], wave)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, a.Rollout); ok {
				return err
			}
			for _, m := range a.Messages() {
				fmt.Fprintln(cmd.OutOrStdout(), m)
			}
			return nil
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

// newRolloutPauseCommand returns `rollout pause` (paused) or `rollout resume`.
func newRolloutPauseCommand(h *hubFlags, paused bool) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a rollout: no new step starts until it is resumed",
		Long: `Sets the rollout's spec.paused. A step already running (an apply, a snapshot, a restore)
finishes; no new step starts until 'rollout resume'.`,
		Example: `  rewind rollout pause mysql
  rewind rollout pause mysql -n team-a -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
	}
	if !paused {
		cmd.Use, cmd.Short = "resume NAME", "Resume a paused rollout"
		cmd.Long = `Clears the rollout's spec.paused: it carries on from the step it stopped at.`
		cmd.Example = `  rewind rollout resume mysql
  rewind rollout resume mysql -n team-a -o json`
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := h.client()
		if err != nil {
			return err
		}
		ro, err := pauseRollout(cmd.Context(), c, h.ns(), args[0], paused)
		if err != nil {
			return err
		}
		if ok, err := printStructured(cmd.OutOrStdout(), output, ro); ok {
			return err
		}
		word := "paused"
		if !paused {
			word = "resumed"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s %s\n", args[0], word)
		return nil
	}
	outputFlag(cmd, &output)
	return cmd
}

func finalPhase(p string) bool {
	return p == v1alpha1.RolloutSucceeded || p == v1alpha1.RolloutRolledBack || p == v1alpha1.RolloutFailed
}

// listTargets returns a rollout's targets, by wave and cluster.
func listTargets(ctx context.Context, c client.Client, ro *v1alpha1.Rollout) ([]v1alpha1.RolloutTarget, error) {
	return rolloutaction.Targets(ctx, c, ro)
}

func printRolloutStatus(out io.Writer, ro *v1alpha1.Rollout, targets []v1alpha1.RolloutTarget) {
	fmt.Fprintf(out, "Rollout %s/%s: %s %s -> %s, phase %s, wave %d of %d, %s clusters done\n", ro.Namespace, ro.Name, ro.Spec.Operator,
		dash(ro.Status.PreviousRelease), ro.Status.CurrentRelease, dash(ro.Status.Phase), min(int(ro.Status.CurrentWave)+1, len(ro.Spec.Waves)), len(ro.Spec.Waves), dash(ro.Status.ClustersDone))
	if ro.Status.FailedRelease != "" {
		fmt.Fprintf(out, "  failed release %s (held: not attempted again until spec.release changes or rewind retry %s): %s\n", ro.Status.FailedRelease, ro.Name, ro.Status.FailureReason)
	}
	for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionProgressing, v1alpha1.ConditionStalled, v1alpha1.ConditionRolledBack} {
		if c := meta.FindStatusCondition(ro.Status.Conditions, t); c != nil {
			fmt.Fprintf(out, "  %-12s %-5s %s: %s\n", t, c.Status, c.Reason, c.Message)
		}
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WAVE\tCLUSTER\tPATH\tPHASE\tSTEP\tFROM\tTO\tSNAPSHOT\tMESSAGE")
	for _, t := range targets {
		wave := fmt.Sprint(t.Spec.Wave)
		if int(t.Spec.Wave) < len(ro.Spec.Waves) {
			wave = ro.Spec.Waves[t.Spec.Wave].Name
		}
		phase, step, snap, msg := v1alpha1.ClusterPending, "-", t.Spec.Snapshot, t.Spec.Reason
		if t.Status.Revision == t.Spec.Revision && t.Status.Path == t.Spec.Path {
			phase, step, msg = t.Status.Phase, t.Status.Step, t.Status.Message
			if t.Status.Snapshot != "" {
				snap = t.Status.Snapshot
			}
		}
		if t.Spec.Path == v1alpha1.PathUpgrade && (phase == v1alpha1.ClusterPending || step == target.StepPrecheck) {
			snap = "" // named, not taken yet
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wave, t.Spec.Cluster, dash(t.Spec.Path), dash(phase), dash(step),
			dash(t.Spec.FromRelease), t.Spec.ToRelease, dash(snap), msg)
	}
	w.Flush()
	printMetrics(out, targets)
	printNotes(out, targets)
}

// printNotes prints what the targets' steps reported in this revision besides their phases
// (status.notes, also Events on the Rollout while those last): objects kept since the
// snapshot, a restore without a release's manifests, inconclusive metrics approved.
func printNotes(out io.Writer, targets []v1alpha1.RolloutTarget) {
	first := true
	for _, t := range targets {
		if t.Status.Revision != t.Spec.Revision || t.Status.Path != t.Spec.Path {
			continue
		}
		for _, n := range t.Status.Notes {
			if first {
				fmt.Fprintln(out, "Notes:")
				first = false
			}
			fmt.Fprintf(out, "  %s %s %s: %s\n", t.Spec.Cluster, n.Type, n.Reason, n.Message)
		}
	}
}

// printMetrics prints the metric analyses of the targets, with their last measurements; a
// result of an earlier revision (the one a rollback undid) names it.
func printMetrics(out io.Writer, targets []v1alpha1.RolloutTarget) {
	first := true
	for _, t := range targets {
		for _, m := range t.Status.Metrics {
			name := m.Name
			if m.Revision != t.Spec.Revision {
				name = fmt.Sprintf("%s (revision %d)", m.Name, m.Revision)
			}
			if first {
				fmt.Fprintln(out, "Metrics:")
				first = false
			}
			var last []string
			for _, ms := range m.Measurements[max(0, len(m.Measurements)-3):] {
				v := ms.Phase
				if ms.Value != "" {
					v += " " + ms.Value
				}
				last = append(last, v)
			}
			fmt.Fprintf(out, "  %s %s: %s, %d measured (%d successful, %d failed, %d inconclusive, %d errors); last: %s\n",
				t.Spec.Cluster, name, m.Phase, m.Count, m.Successful, m.Failed, m.Inconclusive, m.Error, dash(strings.Join(last, ", ")))
		}
	}
}

func newRollbackCommand(h *hubFlags) *cobra.Command {
	var to, reason, output string
	cmd := &cobra.Command{
		Use:   "rollback NAME [--to RELEASE]",
		Short: "Roll a rollout back: set its desired release to the previous one (or --to RELEASE)",
		Long: `A rollback is a desired state, not a script: this sets spec.release of the Rollout back to
the release before the current one (or to --to RELEASE). The controller then restores every
cluster it changed to the snapshot taken under that release, re-applies it and gates on health.`,
		Example: `  rewind rollback mysql
  rewind rollback mysql --to mysql-v1 -n team-a`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			ro, from, target, err := rollbackRollout(cmd.Context(), c, h.ns(), args[0], to, reason)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, ro); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s: rolling back from %s to %s (watch it: %s rollout status %s --watch)\n", args[0], from, target, h.prog, args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "release to roll back to (default: the previous release in the rollout's history)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the rollout's history and RolledBack condition")
	outputFlag(cmd, &output)
	_ = cmd.RegisterFlagCompletionFunc("to", h.completeFlag(listReleases))
	return cmd
}

func newHistoryCommand(h *hubFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "Show the releases a rollout rolled out: start, end, outcome, reason and snapshots",
		Long: `Shows the rollout's history, oldest first: each revision's release, whether it was an upgrade
or a rollback and who rolled back (a person, or the failure policy), when it started and
finished, its outcome and why, and the snapshot taken on each cluster before it changed. A
rollback's outcome is RolledBack, never Succeeded: it is not the release's success. 'rollback' without --to goes back to the newest earlier release
that succeeded.`,
		Example: `  rewind history mysql
  rewind history mysql -n team-a -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			ro, err := getRollout(cmd.Context(), c, h.ns(), args[0])
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, ro.Status.History); ok {
				return err
			}
			snaps, err := snapshotsByRevision(cmd.Context(), c, ro)
			if err != nil {
				return err
			}
			printHistory(cmd.OutOrStdout(), ro, snaps)
			return nil
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

// snapshotsByRevision returns "cluster=snapshot" entries of a rollout's snapshots, by revision.
func snapshotsByRevision(ctx context.Context, c client.Client, ro *v1alpha1.Rollout) (map[string][]string, error) {
	var list v1alpha1.SnapshotList
	if err := c.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingLabels{v1alpha1.LabelRollout: ro.Name}); err != nil {
		return nil, fmt.Errorf("listing the snapshots of rollout %s: %w", ro.Name, err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		rev := s.Labels[v1alpha1.LabelRevision]
		out[rev] = append(out[rev], s.Spec.Cluster+"="+s.Name)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out, nil
}

func ts(t interface{ IsZero() bool }) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return fmt.Sprint(t)
}

func newRetryCommand(h *hubFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "retry NAME",
		Short: "Attempt again a release that failed and was rolled back, or a rollout that failed",
		Long: `When a release fails its health gates and the failure policy rolls every changed cluster
back, the Rollout holds the failure in its status (status.failedRelease) and leaves
spec.release as it is, so a GitOps tool that owns the spec does not start it again. The release
is attempted again only when spec.release changes or when a person asks with this command, which
sets the annotation rewind.dev/retry to a new value (handled once).

A rollback (a person's or an automatic one) that ended Failed because a cluster's restore
failed is run again by this command once the cause is fixed (a member's kubeconfig Secret, an
unreachable API server): the clusters whose restore failed are restored and the others are left
as they are. A rollout that failed while upgrading (failure policy Pause or RollbackFailed) is
not retried: roll it back (rewind rollback) or set a new spec.release.`,
		Example: `  rewind retry mysql
  rewind retry mysql -n team-a -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listRollouts),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			ro, what, err := retryRollout(cmd.Context(), c, h.ns(), args[0], h.prog)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, ro); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rollout/%s: retrying %s (watch it: %s rollout status %s --watch)\n", args[0], what, h.prog, args[0])
			return nil
		},
	}
	outputFlag(cmd, &output)
	return cmd
}
