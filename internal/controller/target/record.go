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
	rel, objs, err := x.to(ctx)
	if err != nil {
		return 0, err
	}
	// The image and digest this cluster runs: its own rendering's when the Rollout gave it
	// values of its own (a registry mirror runs the same image content under another name).
	rec := member.Record{
		Operator: t.Spec.Operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: t.Spec.InstallNamespace,
		Image: release.OperatorImageIn(objs, rel.Spec.Image), GitCommit: rel.Spec.GitCommit, Digest: x.manifestDigest(rel),
		Rollout: x.rolloutNamespace() + "/" + t.Spec.Rollout, Snapshot: t.Status.Snapshot,
	}
	if chart := release.ChartOf(rel); chart != nil {
		rec.ChartVersion = chart.Version
	}
	if bundle := release.BundleOf(rel); bundle != nil {
		rec.BundleVersion = bundle.OperatorVersion
	}
	return 0, member.WriteRecord(ctx, x.cl.Client, rec)
}
