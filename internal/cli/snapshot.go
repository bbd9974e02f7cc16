package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

func newSnapshotCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "Take, list, show, diff and verify snapshots of an operator's state on a member cluster",
		Example: `  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator
  rewind snapshot list --cluster prod-eu-1
  rewind snapshot verify prod-eu-1-mysql-operator-20260101-120000`,
		Long: `A snapshot is one capture of an operator's state on one member cluster: its CRDs, every
custom resource with its status, and the associated resources. The Snapshot object lives in
the hub namespace; its encrypted payload lives in a store (hub Secrets, a folder or a bucket).`,
	}
	cmd.AddCommand(newSnapshotTakeCommand(h), newSnapshotListCommand(h), newSnapshotShowCommand(h),
		newSnapshotDiffCommand(h), newSnapshotVerifyCommand(h), newSnapshotRestoreCommand(h), newSnapshotImportCommand(h))
	return cmd
}

// memberCluster returns the access layer of a registered member.
func memberCluster(ctx context.Context, c client.Client, h *hubFlags, cluster string) (*v1alpha1.MemberCluster, *member.Cluster, error) {
	mc := &v1alpha1.MemberCluster{}
	err := getHubObject(ctx, c, client.ObjectKey{Name: cluster}, mc, "member cluster",
		h.prog+" clusters list; register one with: "+h.prog+" clusters add "+cluster+" --kubeconfig FILE")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := member.ConfigFor(ctx, c, mc)
	if err != nil {
		return nil, nil, err
	}
	cl, err := member.New(mc.Name, cfg)
	return mc, cl, err
}

// captureOptionsFor works out what to capture for an operator on a member: the installed
// release (from the member's record, or relName) and its manifests.
func captureOptionsFor(ctx context.Context, c client.Client, cl *member.Cluster, ns, operator, relName string) (snapshot.Options, error) {
	return snapshot.OptionsFor(ctx, cl, hubReleases(c), ns, operator, relName)
}

// hubReleases reads releases as every command does (readRelease's messages).
func hubReleases(c client.Client) snapshot.ReleaseReader {
	return func(ctx context.Context, ns, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
		return readRelease(ctx, c, ns, name)
	}
}

// captureLive captures now, on the member snap was taken on and the same way (its operator,
// release and namespace), what snap holds: the other side of `snapshot diff --live` and of
// the dashboard's diff against the live cluster (snapshot.CaptureLive, which the
// controller-served dashboard runs too).
func captureLive(ctx context.Context, c client.Client, h *hubFlags, snap *v1alpha1.Snapshot, hdr snapshot.Header) ([]snapshot.Entry, error) {
	_, cl, err := memberCluster(ctx, c, h, snap.Spec.Cluster)
	if err != nil {
		return nil, err
	}
	return snapshot.CaptureLive(ctx, cl, hubReleases(c), snap, hdr)
}

func newSnapshotTakeCommand(h *hubFlags) *cobra.Command {
	var cluster, operator, relName, storeURL, name, reason, output string
	var retention int
	cmd := &cobra.Command{
		Use:   "take --cluster C --operator O",
		Short: "Capture an operator's CRDs, custom resources (with status) and associated resources on a member",
		Long: `Captures, on the member --cluster, the CRDs of the operator's release, every custom resource
of those CRDs with its status, and the associated resources (the release's objects and the
custom resources' children by ownerReference). The release is the one the member's
installed-version record names, or --release. The payload is gzipped, encrypted and stored
in --store: the name of a SnapshotStore of the hub namespace (its bucket or folder, wrapped
with its key), or a store URL; the Snapshot object is created in the hub namespace. Older
snapshots of the same cluster and operator beyond --retention are deleted.`,
		Example: `  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator
  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator --name before-upgrade --reason "before the v2 upgrade"
  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator --store s3-backups
  rewind snapshot take --cluster prod-eu-1 --operator mysql-operator --store dir:///var/backups/rewind -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := h.client()
			if err != nil {
				return err
			}
			_, cl, err := memberCluster(ctx, c, h, cluster)
			if err != nil {
				return err
			}
			opts, err := captureOptionsFor(ctx, c, cl, h.ns(), operator, relName)
			if err != nil {
				return err
			}
			if reason == "" {
				reason = "manual (rewind snapshot take)"
			}
			req := snapshot.Request{
				Name: name, Namespace: h.ns(), Cluster: cluster, Reason: reason, Retention: retention, Capture: opts,
			}
			if strings.Contains(storeURL, "://") {
				req.StoreURL = storeURL
			} else if storeURL != "" {
				if req.Store, err = resolveStore(ctx, c, h, storeURL, true); err != nil {
					return err
				}
			}
			hub := &snapshot.Hub{Client: c}
			snap, err := hub.Take(ctx, cl, req)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, snap); ok {
				return err
			}
			s := snap.Status
			fmt.Fprintf(cmd.OutOrStdout(), "snapshot/%s taken: %d CRDs, %d CRs, %d associated objects, %d bytes (%d stored), %s\n",
				snap.Name, s.Counts.CRDs, s.Counts.CustomResources, s.Counts.Associated, s.Bytes, s.StoredBytes, s.Checksum)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cluster, "cluster", "", "member cluster (required)")
	f.StringVar(&operator, "operator", "", "operator (required)")
	f.StringVar(&relName, "release", "", "release whose CRDs and objects to capture (default: the member's installed release)")
	f.StringVar(&storeURL, "store", "", "where the payload goes: a SnapshotStore of the namespace (kubectl get snapshotstores), or a URL: secrets://NAMESPACE (default: the snapshot's namespace), dir:///PATH, or a gocloud.dev/blob URL (file://, mem://, s3://)")
	f.StringVar(&name, "name", "", "snapshot name (default CLUSTER-OPERATOR-TIME)")
	f.StringVar(&reason, "reason", "", "why the snapshot is taken")
	f.IntVar(&retention, "retention", snapshot.DefaultRetention, "snapshots kept per cluster and operator (never one a Rollout references); -1 keeps all")
	outputFlag(cmd, &output)
	requireFlags(cmd, "cluster", "operator")
	_ = cmd.RegisterFlagCompletionFunc("cluster", h.completeFlag(listMemberClusters))
	_ = cmd.RegisterFlagCompletionFunc("operator", h.completeFlag(listOperators))
	_ = cmd.RegisterFlagCompletionFunc("release", h.completeFlag(listReleases))
	return cmd
}

// getSnapshot reads the Snapshot NAME of the hub namespace.
func getSnapshot(ctx context.Context, c client.Client, h *hubFlags, name string) (*v1alpha1.Snapshot, error) {
	snap := &v1alpha1.Snapshot{}
	ns := h.ns()
	if err := getHubObject(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, snap, "snapshot", h.prog+" snapshot list -n "+ns); err != nil {
		return nil, err
	}
	return snap, nil
}

// openSnapshot connects to the hub and reads the Snapshot NAME of the hub namespace.
func openSnapshot(ctx context.Context, h *hubFlags, name string) (client.Client, *snapshot.Hub, *v1alpha1.Snapshot, error) {
	c, err := h.client()
	if err != nil {
		return nil, nil, nil, err
	}
	snap, err := getSnapshot(ctx, c, h, name)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, &snapshot.Hub{Client: c}, snap, nil
}

func newSnapshotListCommand(h *hubFlags) *cobra.Command {
	var output, cluster, operator string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List snapshots, newest first",
		Long: `Lists the snapshots of the hub namespace, newest first: the member and operator captured,
the release installed then, how many custom resources and associated objects it holds, its
size, whether it is stored (READY) and why it was taken.`,
		Example: `  rewind snapshot list
  rewind snapshot list --cluster prod-eu-1 --operator mysql-operator -n team-a
  rewind snapshot list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			sel := client.MatchingLabels{}
			if cluster != "" {
				sel[snapshot.LabelCluster] = cluster
			}
			if operator != "" {
				sel[snapshot.LabelOperator] = operator
			}
			var list v1alpha1.SnapshotList
			if err := c.List(cmd.Context(), &list, client.InNamespace(h.ns()), sel); err != nil {
				return hubError(err)
			}
			sort.Slice(list.Items, func(i, j int) bool {
				return list.Items[i].CreationTimestamp.After(list.Items[j].CreationTimestamp.Time)
			})
			if ok, err := printStructured(cmd.OutOrStdout(), output, &list); ok {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCLUSTER\tOPERATOR\tRELEASE\tCRS\tASSOCIATED\tBYTES\tREADY\tAGE\tREASON")
			for _, s := range list.Items {
				ready := "False"
				if meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
					ready = "True"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Spec.Cluster, s.Spec.Operator, dash(s.Spec.Release),
					s.Status.Counts.CustomResources, s.Status.Counts.Associated, s.Status.Bytes, ready,
					duration.HumanDuration(time.Since(s.CreationTimestamp.Time)), s.Spec.Reason)
			}
			return w.Flush()
		},
	}
	outputFlag(cmd, &output)
	cmd.Flags().StringVar(&cluster, "cluster", "", "only snapshots of this member")
	cmd.Flags().StringVar(&operator, "operator", "", "only snapshots of this operator")
	_ = cmd.RegisterFlagCompletionFunc("cluster", h.completeFlag(listMemberClusters))
	_ = cmd.RegisterFlagCompletionFunc("operator", h.completeFlag(listOperators))
	return cmd
}

// ObjectRow is one object of a snapshot, as `snapshot show` lists it.
type ObjectRow struct {
	Section   string   `json:"section"`
	Kind      string   `json:"kind"`
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name"`
	UID       string   `json:"uid,omitempty"`
	Phase     string   `json:"phase,omitempty"`
	Keys      []string `json:"secretKeys,omitempty"`
}

func newSnapshotShowCommand(h *hubFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "List the objects in a snapshot (Secret values are never shown)",
		Long: `Reads and decrypts a snapshot's payload and lists its objects by section (CRDs, custom
resources, associated resources) with their phase. Secrets are listed with their keys only:
their values are never printed, in any output format.`,
		Example: `  rewind snapshot show prod-eu-1-mysql-operator-20260101-120000
  rewind snapshot show before-upgrade -n team-a -o yaml`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listSnapshots),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, hub, snap, err := openSnapshot(ctx, h, args[0])
			if err != nil {
				return err
			}
			_, entries, err := hub.Load(ctx, snap)
			if err != nil {
				return err
			}
			rows := make([]ObjectRow, 0, len(entries))
			for _, e := range entries {
				gvk := e.Object.GroupVersionKind()
				r := ObjectRow{Section: e.Section, Kind: gvk.GroupKind().String(), Namespace: e.Object.GetNamespace(), Name: e.Object.GetName(), UID: string(e.Object.GetUID())}
				r.Phase, _, _ = unstructuredString(e.Object.Object, "status", "phase")
				if snapshot.IsSecret(e.Object) {
					data, _ := e.Object.Object["data"].(map[string]any)
					for k := range data {
						r.Keys = append(r.Keys, k)
					}
					sort.Strings(r.Keys)
				}
				rows = append(rows, r)
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, map[string]any{"snapshot": snap.Name, "objects": rows}); ok {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Snapshot %s of %s on %s (release %s), captured %s, checksum %s\n\n", snap.Name, snap.Spec.Operator, snap.Spec.Cluster,
				dash(snap.Spec.Release), snap.Status.CapturedAt, snap.Status.Checksum)
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SECTION\tKIND\tNAMESPACE\tNAME\tPHASE\tDATA")
			for _, r := range rows {
				data := "-"
				if r.Kind == "Secret" {
					data = "keys " + strings.Join(r.Keys, ",") + " (values redacted)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Section, r.Kind, dash(r.Namespace), r.Name, dash(r.Phase), data)
			}
			return w.Flush()
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[f]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func newSnapshotDiffCommand(h *hubFlags) *cobra.Command {
	var output string
	var live bool
	cmd := &cobra.Command{
		Use:   "diff NAME [--live | NAME2]",
		Short: "Show which objects and fields changed between a snapshot and the live cluster or another snapshot",
		Long: `Compares snapshot NAME with the live member cluster it was taken on (--live, captured now
the same way) or with a second snapshot NAME2, and lists the objects added, removed or
changed with the fields that differ. Secret values are shown as <redacted>.`,
		ValidArgsFunction: h.completeArgs(listSnapshots, listSnapshots),
		Example: `  rewind snapshot diff member1-mysql-operator-20260101-120000 --live
  rewind snapshot diff before-upgrade after-upgrade -n team-a -o json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if live == (len(args) == 2) {
				return fmt.Errorf("compare with either --live or a second snapshot NAME2")
			}
			ctx := cmd.Context()
			c, hub, snap, err := openSnapshot(ctx, h, args[0])
			if err != nil {
				return err
			}
			hdr, from, err := hub.Load(ctx, snap)
			if err != nil {
				return err
			}
			var to []snapshot.Entry
			target := "the live cluster " + snap.Spec.Cluster
			if live {
				if to, err = captureLive(ctx, c, h, snap, hdr); err != nil {
					return err
				}
			} else {
				other, err := getSnapshot(ctx, c, h, args[1])
				if err != nil {
					return err
				}
				if _, to, err = hub.Load(ctx, other); err != nil {
					return err
				}
				target = "snapshot " + other.Name
			}
			changes := snapshot.Diff(from, to)
			if ok, err := printStructured(cmd.OutOrStdout(), output, changes); ok {
				return err
			}
			out := cmd.OutOrStdout()
			if len(changes) == 0 {
				fmt.Fprintf(out, "No changes between snapshot %s and %s\n", snap.Name, target)
				return nil
			}
			fmt.Fprintf(out, "%d objects differ between snapshot %s and %s:\n", len(changes), snap.Name, target)
			for _, ch := range changes {
				fmt.Fprintf(out, "%-8s %s\n", ch.Type, ch.Object)
				for _, f := range ch.Fields {
					fmt.Fprintf(out, "           %s: %s -> %s\n", f.Path, orAbsent(f.Old), orAbsent(f.New))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&live, "live", false, "compare with the live member cluster")
	outputFlag(cmd, &output)
	return cmd
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

func newSnapshotVerifyCommand(h *hubFlags) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "verify NAME",
		Short: "Decrypt a snapshot's payload and check it against its checksum",
		Long: `Reads a snapshot's payload from its store, decrypts it and checks it against the SHA-256
checksum recorded when it was taken. Fails (non-zero exit) when the payload is missing,
cannot be decrypted or does not match. The outcome is recorded on the Snapshot as its
Verified condition: True (ChecksumMatched), or False with ChecksumMismatch (corrupted or
truncated) or PayloadUnavailable (missing, or its store or key unreachable).`,
		Example: `  rewind snapshot verify prod-eu-1-mysql-operator-20260101-120000
  rewind snapshot verify before-upgrade -n team-a -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: h.completeArgs(listSnapshots),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, hub, snap, err := openSnapshot(ctx, h, args[0])
			if err != nil {
				return err
			}
			if err := hub.Verify(ctx, snap); err != nil {
				return fmt.Errorf("snapshot %s FAILED verification: %w", snap.Name, err)
			}
			result := map[string]any{"snapshot": snap.Name, "verified": true, "checksum": snap.Status.Checksum, "bytes": snap.Status.Bytes}
			if ok, err := printStructured(cmd.OutOrStdout(), output, result); ok {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "snapshot %s verified: %s, %d bytes\n", snap.Name, snap.Status.Checksum, snap.Status.Bytes)
			return nil
		},
	}
	outputFlag(cmd, &output)
	return cmd
}

// resolveStore reads the SnapshotStore NAME of the hub namespace and opens it (with its key
// when withKey). A store whose last probe failed is refused with the reason; one never probed
// is used (the hub may run no controller).
func resolveStore(ctx context.Context, c client.Client, h *hubFlags, name string, withKey bool) (*snapstore.Store, error) {
	st, err := snapstore.GetReady(ctx, c, h.ns(), name, true)
	if err != nil {
		return nil, hubError(err)
	}
	if withKey {
		return snapstore.FromObject(ctx, c, st)
	}
	return snapstore.StoreOnly(ctx, c, st)
}

func newSnapshotImportCommand(h *hubFlags) *cobra.Command {
	var store, output string
	cmd := &cobra.Command{
		Use:   "import --store NAME",
		Short: "Rebuild the Snapshot objects of a hub from the payloads and metadata in a SnapshotStore",
		Long: `Disaster recovery: every snapshot written to a SnapshotStore other than hub Secrets has its
metadata (the Snapshot's labels, spec and status) stored next to its payload. import lists the
store and creates, in the hub namespace, the Snapshot objects found there, so a new hub can
restore members from snapshots taken through a hub that is gone. Create the SnapshotStore (and
its credentials Secret, and the key Secret if its keyRef names one) in the new hub first; a
snapshot whose key was the old hub's default key cannot be read by another hub. Snapshots
already in the hub are left as they are; running import again imports nothing twice.`,
		Example: `  rewind snapshot import --store s3-backups
  rewind snapshot import --store s3-backups -n team-a -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := h.client()
			if err != nil {
				return err
			}
			s, err := resolveStore(ctx, c, h, store, false)
			if err != nil {
				return err
			}
			res, err := (&snapshot.Hub{Client: c}).Import(ctx, s, h.ns())
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, res); ok {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "imported %d snapshots from %s (%s) into namespace %s; %d were already there\n", len(res.Imported), s.Name, s.URL, h.ns(), len(res.Existing))
			for _, n := range res.Imported {
				fmt.Fprintf(out, "  snapshot/%s imported\n", n)
			}
			names := make([]string, 0, len(res.Failed))
			for n := range res.Failed {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				fmt.Fprintf(out, "  %s NOT imported: %s\n", n, res.Failed[n])
			}
			if len(names) > 0 {
				return fmt.Errorf("%d snapshots could not be imported", len(names))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&store, "store", "", "the SnapshotStore to import from (required)")
	outputFlag(cmd, &output)
	requireFlags(cmd, "store")
	return cmd
}
