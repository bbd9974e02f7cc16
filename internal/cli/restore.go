package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/restore"
)

func newSnapshotRestoreCommand(h *hubFlags) *cobra.Command {
	var cluster, output string
	var prune bool
	cmd := &cobra.Command{
		Use:   "restore NAME --cluster C [--prune]",
		Short: "Bring a member cluster back to a snapshot: CRDs (storage versions too), CRs with status, associated resources",
		Long: `Restores by full replacement, never by merge: the operator is quiesced (scaled to 0, its
webhooks neutralized), CRDs return to the snapshot's storage version (every CR is migrated and
status.storedVersions trimmed; a CRD is never deleted), custom resources and associated
resources are replaced from the snapshot (UIDs kept, ownerReferences remapped to live owners),
objects created since the snapshot are kept and listed (deleted with --prune), and the
operator's Deployments and webhooks come back as the snapshot has them. The member's
installed-version record then names the snapshot's release again (clusters check reads it).
The restore is journaled in the member (rewind-system/restore.NAME): run the same command
again after an interruption and it resumes. Restoring twice changes nothing the second time.`,
		Example: `  rewind snapshot restore member1-mysql-operator-20260101-120000 --cluster member1
  rewind snapshot restore member1-mysql-operator-20260101-120000 --cluster member1 --prune -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listSnapshots),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, hub, snap, err := openSnapshot(ctx, h, args[0])
			if err != nil {
				return err
			}
			mc, cl, err := memberCluster(ctx, c, h, cluster)
			if err != nil {
				return err
			}
			if snap.Spec.Cluster != cluster && snap.Status.ClusterID != mc.Status.ClusterID {
				return fmt.Errorf("snapshot %s was taken on cluster %s (ID %s), not %s: restoring it elsewhere is not supported", snap.Name, snap.Spec.Cluster, snap.Status.ClusterID, cluster)
			}
			mcl := cl.Client
			// The release installed now: its Deployments are quiesced, its extra objects reported.
			var current []*unstructured.Unstructured
			if rec, err := member.ReadRecord(ctx, mcl, snap.Spec.Operator); err == nil && rec != nil {
				if _, objs, err := release.Load(ctx, c, h.ns(), rec.Release); err == nil {
					current = objs
				}
			}
			journal := restore.NewConfigMapJournal(mcl, snap.Name)
			hdr, entries, closer, err := hub.StreamRaw(ctx, snap)
			if err != nil {
				return fmt.Errorf("snapshot %s cannot be restored: %w", snap.Name, err)
			}
			defer closer.Close()
			rep, err := restore.Run(ctx, cl, restore.Options{
				Header: hdr, Entries: entries, Current: current, Prune: prune, Journal: journal,
				Log: func(f string, a ...any) {
					if output == "table" {
						fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...)
					}
				},
			})
			if errors.Is(err, restore.ErrSnapshotUnreadable) {
				return fmt.Errorf("snapshot %s cannot be restored: %w", snap.Name, err)
			}
			if err != nil {
				return fmt.Errorf("%w (run the same command again to resume)", err)
			}
			if err := journal.Clear(ctx); err != nil {
				return err
			}
			// The member runs the snapshot's release again: its installed-version record says
			// so (drift checks, clusters list and the next rollout read it).
			if err := recordRestored(ctx, c, h.ns(), mcl, snap, hdr.Namespace); err != nil {
				return fmt.Errorf("%s was restored to snapshot %s, but its installed-version record was not written: %w (run the same command again)", cluster, snap.Name, err)
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, rep); ok {
				return err
			}
			printRestoreReport(cmd, snap.Name, cluster, rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "member cluster to restore (required)")
	cmd.Flags().BoolVar(&prune, "prune", false, "delete objects created after the snapshot (default: keep and report them)")
	outputFlag(cmd, &output)
	requireFlags(cmd, "cluster")
	_ = cmd.RegisterFlagCompletionFunc("cluster", h.completeFlag(listMemberClusters))
	return cmd
}

// recordRestored writes the member's installed-version record for the release snap was taken
// under (none when it was taken with no release installed). The release's own rendering gives
// the image and digest; a release deleted since leaves its name and version only.
func recordRestored(ctx context.Context, hub client.Reader, ns string, mcl client.Client, snap *v1alpha1.Snapshot, installNamespace string) error {
	if snap.Spec.Release == "" {
		return nil
	}
	rec := member.Record{Operator: snap.Spec.Operator, Release: snap.Spec.Release, Version: snap.Spec.Version,
		Namespace: installNamespace, Snapshot: snap.Name}
	rel, objs, err := release.Load(ctx, hub, ns, snap.Spec.Release)
	switch {
	case apierrors.IsNotFound(err):
		// Deleted since: its name and version say what runs.
	case err != nil:
		return err
	default:
		rec.Version, rec.GitCommit, rec.Digest = rel.Spec.Version, rel.Spec.GitCommit, release.ManifestDigest(rel)
		rec.Image = release.OperatorImageIn(objs, rel.Spec.Image)
		if chart := release.ChartOf(rel); chart != nil {
			rec.ChartVersion = chart.Version
		}
		if bundle := release.BundleOf(rel); bundle != nil {
			rec.BundleVersion = bundle.OperatorVersion
		}
	}
	return member.WriteRecord(ctx, mcl, rec)
}

func printRestoreReport(cmd *cobra.Command, snap, cluster string, rep *restore.Report) {
	out := cmd.OutOrStdout()
	if rep.NoOp {
		fmt.Fprintf(out, "%s already equals snapshot %s: nothing to do\n", cluster, snap)
	} else {
		fmt.Fprintf(out, "%s restored to snapshot %s in %s\n", cluster, snap, rep.Duration.Round(time.Millisecond))
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tRESTORED\tCREATED\tUNCHANGED\tRECREATED\tKEPT\tPRUNED")
	kinds := make([]string, 0, len(rep.Kinds))
	for k := range rep.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		r := rep.Kinds[k]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\n", k, r.Restored, r.Created, r.Unchanged, r.Recreated, r.Kept, r.Pruned)
	}
	w.Flush()
	for _, s := range rep.Steps {
		if s.Skipped {
			fmt.Fprintf(out, "  step %-16s done earlier (journal)\n", s.Name)
		} else {
			fmt.Fprintf(out, "  step %-16s %s\n", s.Name, s.Duration.Round(time.Millisecond))
		}
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(out, "  kept (created after the snapshot): %s\n", k)
	}
	for _, k := range rep.Pruned {
		fmt.Fprintf(out, "  pruned (created after the snapshot): %s\n", k)
	}
	for _, k := range rep.Recreated {
		fmt.Fprintf(out, "  recreated (immutable field): %s\n", k)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(out, "  note: %s\n", n)
	}
}
