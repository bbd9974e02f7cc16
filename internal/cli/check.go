package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/drift"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// Check statuses of one cluster.
const (
	CheckOK           = "OK"
	CheckMismatch     = "MISMATCH"
	CheckDrift        = "DRIFT"
	CheckNotInstalled = "NOT-INSTALLED"
	CheckUnreachable  = "UNREACHABLE"
)

// ClusterCheck is the result of the consistency check of one member.
type ClusterCheck struct {
	Cluster          string   `json:"cluster"`
	Status           string   `json:"status"`
	InstalledRelease string   `json:"installedRelease,omitempty"`
	InstalledVersion string   `json:"installedVersion,omitempty"`
	InstalledImage   string   `json:"installedImage,omitempty"`
	ExpectedRelease  string   `json:"expectedRelease"`
	ExpectedVersion  string   `json:"expectedVersion"`
	ExpectedImage    string   `json:"expectedImage"`
	Reasons          []string `json:"reasons,omitempty"`
}

func newClustersCheckCommand(h *hubFlags) *cobra.Command {
	var operator, expect, selector, output string
	cmd := &cobra.Command{
		Use:   "check --operator O --expect RELEASE",
		Short: "Check every member runs the expected release, and that nothing drifted behind rewind's back",
		Long: `For each member cluster, compares its installed-version record with the expected
OperatorRelease (release, version, image), and the live cluster with the record: the operator
Deployment's image, and the CRDs against the release's CRD inventory (served and storage
versions). Exits non-zero when any cluster differs, drifts or cannot be reached.`,
		Example: `  rewind clusters check --operator mysql-operator --expect mysql-v2
  rewind clusters check --operator mysql-operator --expect mysql-v2 -l env=prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := h.client()
			if err != nil {
				return err
			}
			results, err := checkClusters(cmd.Context(), c, h.ns(), operator, expect, selector)
			if err != nil {
				return err
			}
			if ok, err := printStructured(cmd.OutOrStdout(), output, results); ok {
				if err != nil {
					return err
				}
			} else {
				printCheckTable(cmd, results)
			}
			bad := 0
			for _, r := range results {
				if r.Status != CheckOK {
					bad++
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d clusters do not match release %s", bad, len(results), expect)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&operator, "operator", "", "operator name (required)")
	cmd.Flags().StringVar(&expect, "expect", "", "the OperatorRelease every cluster should run (required)")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "only members matching this label selector")
	outputFlag(cmd, &output)
	requireFlags(cmd, "operator", "expect")
	_ = cmd.RegisterFlagCompletionFunc("operator", h.completeFlag(listOperators))
	_ = cmd.RegisterFlagCompletionFunc("expect", h.completeFlag(listReleases))
	return cmd
}

func printCheckTable(cmd *cobra.Command, results []ClusterCheck) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tSTATUS\tINSTALLED\tVERSION\tIMAGE\tEXPECTED\tREASON")
	for _, r := range results {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, r.Status, dash(r.InstalledRelease), dash(r.InstalledVersion),
			dash(r.InstalledImage), r.ExpectedRelease+" ("+r.ExpectedVersion+")", dash(strings.Join(r.Reasons, "; ")))
	}
	w.Flush()
}

// checkClusters runs the consistency check on every selected member, concurrently.
func checkClusters(ctx context.Context, c client.Client, ns, operator, expect, selector string) ([]ClusterCheck, error) {
	want, wantObjs, err := readRelease(ctx, c, ns, expect)
	if err != nil {
		return nil, fmt.Errorf("--expect: %w", err)
	}
	if want.Spec.Operator != operator {
		return nil, fmt.Errorf("release %s is a release of operator %q, not %q", expect, want.Spec.Operator, operator)
	}
	var list v1alpha1.MemberClusterList
	var opts []client.ListOption
	if selector != "" {
		sel, err := metav1.ParseToLabelSelector(selector)
		if err != nil {
			return nil, fmt.Errorf("--selector %q: %w", selector, err)
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, fmt.Errorf("--selector %q: %w", selector, err)
		}
		opts = append(opts, client.MatchingLabelsSelector{Selector: s})
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, hubError(err)
	}
	if len(list.Items) == 0 {
		return nil, errors.New("no member clusters match: register them with `rewind clusters add`")
	}
	results := make([]ClusterCheck, len(list.Items))
	var wg sync.WaitGroup
	for i := range list.Items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = checkOne(ctx, c, &list.Items[i], operator, want, wantObjs)
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool { return results[i].Cluster < results[j].Cluster })
	return results, nil
}

func checkOne(ctx context.Context, hub client.Client, mc *v1alpha1.MemberCluster, operator string, want *v1alpha1.OperatorRelease, wantObjs []*unstructured.Unstructured) ClusterCheck {
	r := ClusterCheck{Cluster: mc.Name, ExpectedRelease: want.Name, ExpectedVersion: want.Spec.Version, ExpectedImage: want.Spec.Image}
	cfg, err := member.ConfigFor(ctx, hub, mc)
	if err != nil {
		r.Status, r.Reasons = CheckUnreachable, []string{err.Error()}
		return r
	}
	cl, err := member.New(mc.Name, cfg)
	if err != nil {
		r.Status, r.Reasons = CheckUnreachable, []string{err.Error()}
		return r
	}
	mcl := cl.Client
	rec, err := member.ReadRecord(ctx, mcl, operator)
	if err != nil {
		r.Status, r.Reasons = CheckUnreachable, []string{fmt.Sprintf("cannot reach %s: %v", cfg.Host, err)}
		return r
	}
	if rec == nil {
		r.Status, r.Reasons = CheckNotInstalled, []string{fmt.Sprintf("no installed-version record %s/%s", member.RecordNamespace, member.RecordName(operator))}
		return r
	}
	r.InstalledRelease, r.InstalledVersion, r.InstalledImage = rec.Release, rec.Version, rec.Image
	var mismatch []string
	if rec.Release != want.Name {
		mismatch = append(mismatch, fmt.Sprintf("runs release %s, expected %s", rec.Release, want.Name))
	}
	if rec.Version != want.Spec.Version {
		mismatch = append(mismatch, fmt.Sprintf("runs version %s, expected %s", rec.Version, want.Spec.Version))
	}
	if rec.Image != want.Spec.Image && !sameDigest(rec.Image, want.Spec.Image) { // a mirror runs the same image
		mismatch = append(mismatch, fmt.Sprintf("runs image %s, expected %s", rec.Image, want.Spec.Image))
	}
	// Drift is judged against the release the record names.
	rel, objs := want, wantObjs
	if rec.Release != want.Name {
		other, otherObjs, err := readRelease(ctx, hub, want.Namespace, rec.Release)
		if err != nil {
			mismatch = append(mismatch, fmt.Sprintf("the installed release %s is unknown to the hub, so drift cannot be checked: %v", rec.Release, err))
			rel, objs = nil, nil
		} else {
			rel, objs = other, otherObjs
		}
	}
	// A cluster a Rollout gave values of its own (spec.valuesFrom) runs its own rendering of
	// the release: the record's digest names it.
	if rel != nil && rec.Digest != "" && rec.Digest != release.ManifestDigest(rel) {
		if objs, err = release.LoadManifests(ctx, hub, rel.Namespace, rec.Digest); err != nil {
			mismatch = append(mismatch, fmt.Sprintf("the manifests %s the record names cannot be read, so drift cannot be checked: %v", rec.Digest, err))
			rel = nil
		}
	}
	var reasons []string
	if rel != nil {
		reasons, err = drift.Check(ctx, mcl, rec, rel, objs)
		if err != nil {
			r.Status, r.Reasons = CheckUnreachable, []string{err.Error()}
			return r
		}
	}
	switch {
	case len(reasons) > 0:
		r.Status, r.Reasons = CheckDrift, append(reasons, mismatch...)
	case len(mismatch) > 0:
		r.Status, r.Reasons = CheckMismatch, mismatch
	default:
		r.Status = CheckOK
	}
	return r
}

// sameDigest says whether two image references pin the same digest (a registry mirror).
func sameDigest(a, b string) bool {
	_, da, oka := strings.Cut(a, "@")
	_, db, okb := strings.Cut(b, "@")
	return oka && okb && da == db
}
