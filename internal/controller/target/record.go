package target

import (
	"context"
	"time"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// record writes the member's installed-version record: the cluster runs the target release.
type record struct{}

func (record) run(ctx context.Context, x *execution) (time.Duration, error) {
	t := x.t
	rel, _, err := x.release(ctx, t.Spec.ToRelease)
	if err != nil {
		return 0, err
	}
	rec := member.Record{
		Operator: t.Spec.Operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: t.Spec.InstallNamespace,
		Image: rel.Spec.Image, GitCommit: rel.Spec.GitCommit, Digest: release.ManifestDigest(rel),
		Rollout: t.Namespace + "/" + t.Spec.Rollout, Snapshot: t.Status.Snapshot,
	}
	if chart := release.ChartOf(rel); chart != nil {
		rec.ChartVersion = chart.Version
	}
	if bundle := release.BundleOf(rel); bundle != nil {
		rec.BundleVersion = bundle.OperatorVersion
	}
	return 0, member.WriteRecord(ctx, x.cl.Client, rec)
}
