package target

import (
	"context"
	"errors"
	"time"

	"github.com/rewind-dev/rewind/internal/drift"
	"github.com/rewind-dev/rewind/internal/member"
)

// precheck, before anything changes: every kind of the release is served by the member (or
// defined by the release's own CRDs); the member's installed-version record names the release
// the cluster is expected to run (none on a first install) or already the target release; and
// what runs does not drift from what that record says.
type precheck struct{}

func (precheck) run(ctx context.Context, x *execution) (time.Duration, error) {
	t := x.t
	rel, objs, err := x.to(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := x.cl.Scoped(objs, t.Spec.InstallNamespace); err != nil {
		var kinds *member.KindsNotServedError
		if errors.As(err, &kinds) {
			return 0, terminalf("precheck: release %s: %v", rel.Name, err)
		}
		return 0, err
	}
	rec, err := member.ReadRecord(ctx, x.cl.Client, t.Spec.Operator)
	if err != nil {
		return 0, err
	}
	if rec != nil && rec.Release == t.Spec.ToRelease && (rec.Digest == "" || rec.Digest == x.manifestDigest(rel)) {
		// Already there (an upgrade that finished but was not recorded as done): nothing to
		// change, if nothing drifted. A failed read is returned (a fault is retried), never
		// taken for drift.
		d, err := x.drift(ctx, rec)
		if err != nil {
			return 0, err
		}
		if len(d) == 0 {
			x.skipTo = StepDone
			return 0, nil
		}
		return 0, terminalf("precheck: the cluster runs %s but drifts from it: %v", rec.Release, d)
	}
	want := t.Spec.FromRelease
	switch {
	case rec == nil && want != "":
		return 0, terminalf("precheck: no installed-version record, but the cluster is expected to run %s", want)
	case rec != nil && rec.Release != want && want == "":
		return 0, terminalf("precheck: the cluster runs %s (record %s/%s), but this rollout has not installed anything yet; roll out from %s or remove the record",
			rec.Release, member.RecordNamespace, member.RecordName(t.Spec.Operator), rec.Release)
	case rec != nil && rec.Release != want:
		return 0, terminalf("precheck: the cluster runs %s, expected %s", rec.Release, want)
	}
	if rec != nil {
		d, err := x.drift(ctx, rec)
		if err != nil {
			return 0, err
		}
		if len(d) > 0 {
			return 0, terminalf("precheck: drift from %s: %v", rec.Release, d)
		}
	}
	return 0, nil
}

// drift compares the member with its record and the release the record names, as rendered
// for this cluster (the record's digest).
func (x *execution) drift(ctx context.Context, rec *member.Record) ([]string, error) {
	rel, objs, err := x.releaseFor(ctx, rec.Release, rec.Digest)
	if err != nil {
		return nil, err
	}
	return drift.Check(ctx, x.cl.Client, rec, rel, objs)
}
