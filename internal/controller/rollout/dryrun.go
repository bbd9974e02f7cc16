package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/preflight"
)

// planClustersLimit bounds the clusters status.plan lists; planFindingsLimit the findings
// listed per cluster and planFindingLength the length of each.
const (
	planClustersLimit = 100
	planFindingsLimit = 5
	planFindingLength = 300
)

// dryRunMemberBudget bounds the dry run's plan of one member (its reads, the round trip and the
// dry run of the apply; a fault is retried in it). A member that does not answer (cut off:
// every request refused and retried, several minutes in all) is not planned rather than
// holding the whole plan; its entry says why. A member its health probe finds unreachable is
// not planned at all.
const dryRunMemberBudget = 2 * time.Minute

// dryRun plans spec.release instead of rolling it out (spec.dryRun): the paths of the next
// revision, then on each cluster it would upgrade what `rewind plan` computes (CRD safety,
// objects refused, the round trip, a dry run of the apply, the snapshot's estimate), written
// to status.plan with the Planned condition. No target is written; nothing on any member
// changes (reads and dryRun=All applies only). A plan of this generation is not computed again.
func (r *Reconciler) dryRun(ctx context.Context, s *scope) error {
	ro := s.ro
	rel := ro.Spec.Release
	if p := ro.Status.Plan; p != nil && p.Release == rel && p.ObservedGeneration == ro.Generation &&
		meta.IsStatusConditionTrue(ro.Status.Conditions, v1alpha1.ConditionPlanned) {
		return nil
	}
	relObjs, plans, _, err := r.prepareRevision(ctx, s, rel)
	if err != nil {
		var stall *stallError
		var wait *waitError
		if errors.As(err, &stall) || errors.As(err, &wait) {
			s.condition(v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanFailed, fmt.Sprintf("release %s cannot be planned: %v", rel, err))
		}
		return err
	}
	crds, err := preflight.CRDs(relObjs)
	if err != nil {
		msg := fmt.Sprintf("release %s: %v", rel, err)
		s.condition(v1alpha1.ConditionPlanned, metav1.ConditionFalse, v1alpha1.ReasonPlanFailed, msg)
		return stallf(v1alpha1.ReasonPlanFailed, "%s", msg)
	}
	summaries := make([]v1alpha1.ClusterPlanSummary, len(plans))
	sem := make(chan struct{}, preflightConcurrency)
	var wg sync.WaitGroup
	for i, p := range plans {
		wave := ""
		if int(p.Wave) < len(ro.Spec.Waves) {
			wave = ro.Spec.Waves[p.Wave].Name
		}
		if p.Path != v1alpha1.PathUpgrade {
			summaries[i] = v1alpha1.ClusterPlanSummary{Cluster: p.Cluster, Wave: wave, Path: p.Path}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := r.probedUnreachable(p.Cluster); err != nil {
				summaries[i] = Summarize(p.Cluster, wave, p.Path, preflight.MemberPlan{}, err)
				return
			}
			mp, err := fault.Within(ctx, dryRunMemberBudget, "planned", func(ctx context.Context) (preflight.MemberPlan, error) {
				return r.planMember(ctx, ro, p.Cluster, relObjs, crds)
			})
			summaries[i] = Summarize(p.Cluster, wave, p.Path, mp, err)
		}()
	}
	wg.Wait()

	now := metav1.NewTime(r.now())
	plan := &v1alpha1.RolloutPlan{Release: rel, ObservedGeneration: ro.Generation, PlannedAt: &now}
	var errs, warns, failed, upgrades int
	for _, c := range summaries {
		errs += int(c.Errors)
		warns += int(c.Warnings)
		if c.Error != "" {
			failed++
		}
		if c.Path == v1alpha1.PathUpgrade {
			upgrades++
		}
	}
	if len(summaries) > planClustersLimit {
		plan.Omitted = int32(len(summaries) - planClustersLimit)
		summaries = summaries[:planClustersLimit]
	}
	plan.Clusters = summaries
	ro.Status.Plan = plan
	msg := fmt.Sprintf("release %s planned on %d clusters (%d to upgrade): %d findings of error severity, %d warnings", rel, len(plans), upgrades, errs, warns)
	if failed > 0 {
		msg += fmt.Sprintf("; %d clusters could not be planned (status.plan says why)", failed)
	}
	msg += fmt.Sprintf("; nothing was changed (spec.dryRun); every finding: rewind plan %s -n %s", ro.Name, ro.Namespace)
	s.condition(v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, msg)
	s.event("Normal", v1alpha1.ReasonPlanned, "%s", msg)
	return nil
}

// clearPlan removes a dry run's plan once spec.dryRun is off: it no longer says what happens.
func clearPlan(ro *v1alpha1.Rollout) {
	ro.Status.Plan = nil
	meta.RemoveStatusCondition(&ro.Status.Conditions, v1alpha1.ConditionPlanned)
}

// planMember plans the release on one member, as rewind plan does.
func (r *Reconciler) planMember(ctx context.Context, ro *v1alpha1.Rollout, name string, objs []*unstructured.Unstructured, crds map[string]*apiextensionsv1.CustomResourceDefinition) (preflight.MemberPlan, error) {
	mc := &v1alpha1.MemberCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		return preflight.MemberPlan{}, fmt.Errorf("reading MemberCluster %s: %w", name, err)
	}
	cfg, err := member.ConfigFor(ctx, r.Hub, mc)
	if err != nil {
		return preflight.MemberPlan{}, err
	}
	cl, err := member.New(name, cfg)
	if err != nil {
		return preflight.MemberPlan{}, err
	}
	m, err := preflight.LastMeasurement(ctx, r.Client, ro.Namespace, name, ro.Spec.Operator)
	if err != nil {
		return preflight.MemberPlan{}, err
	}
	return preflight.PlanMember(ctx, cl, preflight.MemberOptions{Operator: ro.Spec.Operator, Objects: objs, CRDs: crds,
		Namespace: ro.Spec.InstallNamespace, MaxObjects: preflightMaxObjects, Measurement: m})
}

// roundTripChecks are the findings of the way back; refusedChecks those of objects refused.
var (
	roundTripChecks = map[preflight.Check]bool{preflight.CheckFieldLost: true, preflight.CheckFieldChanged: true,
		preflight.CheckRoundTripRefused: true, preflight.CheckConversionNotVerified: true}
	refusedChecks = map[preflight.Check]bool{preflight.CheckObjectRefused: true, preflight.CheckApplyRefused: true}
)

// Summarize is the compact status.plan entry of one cluster's plan (err: it could not be
// planned).
func Summarize(cluster, wave, path string, p preflight.MemberPlan, err error) v1alpha1.ClusterPlanSummary {
	s := v1alpha1.ClusterPlanSummary{Cluster: cluster, Wave: wave, Path: path}
	if err != nil {
		s.Error = truncate(err.Error(), 1024)
		return s
	}
	for _, c := range p.Changes {
		switch c.Action {
		case preflight.ActionCreate:
			s.Creates++
		case preflight.ActionUpdate:
			s.Updates++
		case preflight.ActionUnchanged:
			s.Unchanged++
		}
	}
	var errs, warns []string
	for _, f := range p.Findings() {
		switch {
		case refusedChecks[f.Check]:
			s.RefusedObjects++
		case roundTripChecks[f.Check]:
			if f.Severity != preflight.SeverityInfo {
				s.RoundTripFindings++
			}
		default:
			s.CRDFindings++
		}
		switch f.Severity {
		case preflight.SeverityError:
			s.Errors++
			errs = append(errs, truncate(f.String(), planFindingLength))
		case preflight.SeverityWarning:
			s.Warnings++
			warns = append(warns, truncate(f.String(), planFindingLength))
		}
	}
	s.Findings = append(errs, warns...)
	if len(s.Findings) > planFindingsLimit {
		s.Findings = s.Findings[:planFindingsLimit]
	}
	s.CustomResources = int32(p.Objects)
	s.Bytes = p.Bytes
	s.SnapshotEstimate = p.Snapshot.String()
	return s
}
