package preflight

import (
	"context"
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
)

// MemberOptions say what to plan on a member.
type MemberOptions struct {
	// Operator is the operator released (its installed-version record is read).
	Operator string
	// Objects are the release's rendered manifests, CRDs its CRDs (CRDs(Objects)).
	Objects []*unstructured.Unstructured
	CRDs    map[string]*apiextensionsv1.CustomResourceDefinition
	// Namespace is the install namespace of objects without one.
	Namespace string
	// MaxObjects bounds the custom resources read per CRD.
	MaxObjects int
	// Conversion converts between a CRD's versions (nil: the release's webhooks are called
	// where their clientConfig names a URL, ClientConfigWebhook).
	Conversion Converter
	// Measurement is the capture rate last measured on the member (nil: none yet).
	Measurement *Measurement
}

// MemberPlan is the plan of a release on one member: what `rewind plan` prints per cluster.
type MemberPlan struct {
	// Installed is the release the member's record names ("" when the operator is not installed).
	Installed string `json:"installed,omitempty"`
	ClusterPlan
	// Changes is what a server-side dry run of the release's apply would create and update.
	Changes []ObjectChange `json:"changes,omitempty"`
	// Snapshot estimates the capture of the custom resources (Objects, Bytes) at the rate
	// rewind measured on the member.
	Snapshot Estimate `json:"snapshot"`
}

// RefusedApplies are the release's objects the dry run was refused for, as findings.
func (p MemberPlan) RefusedApplies() []Finding {
	var out []Finding
	for _, c := range p.Changes {
		if c.Refused != "" {
			out = append(out, Finding{Check: CheckApplyRefused, Severity: SeverityError,
				Object: c.Kind + " " + strings.TrimPrefix(c.Namespace+"/"+c.Name, "/"), Message: c.Refused})
		}
	}
	return out
}

// Findings returns the plan's findings and the refused applies.
func (p MemberPlan) Findings() []Finding {
	return append(p.ClusterPlan.Findings(), p.RefusedApplies()...)
}

// memberPlanTries is how many times PlanMember plans a member in all when a fault (a reset
// connection, a timeout, a 429 or 5xx) outlasts the retries of its requests (retryRequest).
const memberPlanTries = 4

// requestTries is how many times the plan sends one read or dry run in all when a fault
// outlasts the member client's own retries of it (member.RequestTries, which a connection
// refused for a moment or a reset while the answer was read can outlast): the plan goes on from
// that request instead of from the start, so a plan of many requests gets through a member
// that fails some of them. Every request the plan sends is a read or a dry run: sending it
// again changes nothing.
const requestTries = 5

// retryRequest runs fn, one request of the plan, again with backoff while it fails with a
// transient fault (fault.IsTransient), up to requestTries times or until ctx ends.
func retryRequest(ctx context.Context, fn func() error) error {
	return fault.Retry(ctx, requestTries, fn)
}

// PlanMember reads the member's installed-version record, CRDs and custom resources, plans the
// release there and dry-runs its apply (dryRun=All): nothing on the member changes. A fault
// (fault.IsTransient) that outlasts the retries of one request (retryRequest) plans the member
// again from the start, with backoff, up to memberPlanTries times or until ctx ends: a transient
// fault is not the member's verdict. It is what `rewind plan` and a Rollout's spec.dryRun run.
func PlanMember(ctx context.Context, cl *member.Cluster, o MemberOptions) (MemberPlan, error) {
	var p MemberPlan
	err := fault.Retry(ctx, memberPlanTries, func() error {
		var err error
		p, err = planMemberOnce(ctx, cl, o)
		return err
	})
	return p, err
}

// planMemberOnce is one try of PlanMember.
func planMemberOnce(ctx context.Context, cl *member.Cluster, o MemberOptions) (MemberPlan, error) {
	var p MemberPlan
	rec, err := member.ReadRecord(ctx, cl.Client, o.Operator)
	if err != nil {
		return p, fmt.Errorf("reading the installed-version record of %s: %w", o.Operator, err)
	}
	if rec != nil {
		p.Installed = fmt.Sprintf("%s (%s)", rec.Release, rec.Version)
	}
	in, err := Read(ctx, cl, o.CRDs, o.MaxObjects)
	if err != nil {
		return p, err
	}
	in.Conversion = o.Conversion
	if in.Conversion == nil {
		in.Conversion = Conversion{Webhook: &ClientConfigWebhook{}}
	}
	if p.ClusterPlan, err = PlanCluster(ctx, in); err != nil {
		return p, err
	}
	if p.Changes, err = DryRun(ctx, cl, o.Objects, o.Namespace); err != nil {
		return p, fmt.Errorf("dry run of the release's apply: %w", err)
	}
	p.Snapshot = EstimateCapture(p.Bytes, o.Measurement)
	return p, nil
}
