package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/preflight"
)

// preflightMaxObjects bounds the custom resources read and checked per CRD and cluster before
// a revision; a CRD with more is checked on these only and its schema findings stay errors.
const preflightMaxObjects = 2000

// preflightConcurrency is how many members the preflight reads at once.
const preflightConcurrency = 8

// preflightMemberBudget bounds the preflight's reads of one member. A member that does not
// answer (cut off, its connections refused: each request retried, about 95 s in all) is not
// checked rather than holding every cluster's wave; its target then waits for it as any
// unreachable member's does.
const preflightMemberBudget = 30 * time.Second

// probedUnreachable says why a member is not read (nil: read it): its health probe finds it
// unreachable.
func (r *Reconciler) probedUnreachable(name string) error {
	if since, lastErr, ok := r.Probes.Unreachable(name); ok {
		return fmt.Errorf("unreachable since %s: %s", since.UTC().Format(time.RFC3339), lastErr)
	}
	return nil
}

// preflightMessageLimit bounds the findings listed in the Preflight condition's message.
const preflightMessageLimit = 10

// clusterPreflight is the outcome of the preflight of one cluster.
type clusterPreflight struct {
	cluster  string
	findings []preflight.Finding
	// err: the cluster could not be read; it is not checked (a fault never stops a release:
	// the unreachable policy decides what its target does).
	err error
}

// runPreflight checks the release's CRDs (from objs) against each cluster the revision
// upgrades, before any cluster changes, and records the outcome in the Preflight condition.
// Under mode Enforce a finding of error severity whose check is not ignored stops the revision
// (a stall that names it); under Warn the revision goes on.
func (r *Reconciler) runPreflight(ctx context.Context, s *scope, rel string, objs []*unstructured.Unstructured, plans []TargetPlan) error {
	ro := s.ro
	mode, ignore := v1alpha1.PreflightEnforce, []preflight.Check(nil)
	if p := ro.Spec.Preflight; p != nil {
		if p.Mode != "" {
			mode = p.Mode
		}
		for _, c := range p.Ignore {
			ignore = append(ignore, preflight.Check(c))
		}
	}
	crds, err := preflight.CRDs(objs)
	if err != nil {
		return stallf(v1alpha1.ReasonPreflightFailed, "release %s: %v", rel, err)
	}
	var members v1alpha1.MemberClusterList
	if err := r.Client.List(ctx, &members); err != nil {
		return fmt.Errorf("listing MemberClusters for the preflight: %w", err)
	}
	pull := map[string]bool{}
	for _, mc := range members.Items {
		pull[mc.Name] = mc.Spec.Mode == v1alpha1.ModePull
	}
	// The hub holds no credential for a pull member: it is not read from here (and not
	// counted one by one in the condition, which stays short at 1,000 members).
	var clusters []string
	pulled := 0
	for _, p := range plans {
		switch {
		case p.Path != v1alpha1.PathUpgrade:
		case pull[p.Cluster]:
			pulled++
		default:
			clusters = append(clusters, p.Cluster)
		}
	}
	if len(crds) == 0 || len(clusters) == 0 {
		if pulled > 0 && len(crds) > 0 {
			s.condition(v1alpha1.ConditionPreflight, metav1.ConditionTrue, v1alpha1.ReasonPreflightPassed,
				fmt.Sprintf("release %s: %s", rel, pullNotChecked(pulled)))
			return nil
		}
		s.condition(v1alpha1.ConditionPreflight, metav1.ConditionTrue, v1alpha1.ReasonPreflightPassed,
			fmt.Sprintf("release %s: no CRD of it to check on the %d clusters it upgrades", rel, len(clusters)))
		return nil
	}

	results := make([]clusterPreflight, len(clusters))
	sem := make(chan struct{}, preflightConcurrency)
	var wg sync.WaitGroup
	for i, name := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := r.probedUnreachable(name); err != nil {
				results[i] = clusterPreflight{cluster: name, err: err} // not read: it would only cost the budget
				return
			}
			fs, err := fault.Within(ctx, preflightMemberBudget, "read", func(ctx context.Context) ([]preflight.Finding, error) {
				return r.preflightCluster(ctx, name, crds)
			})
			results[i] = clusterPreflight{cluster: name, findings: fs, err: err}
		}()
	}
	wg.Wait()

	var blocking, recorded []string
	warnings := 0
	var unchecked []string
	for _, res := range results {
		if res.err != nil {
			unchecked = append(unchecked, fmt.Sprintf("%s (%v)", res.cluster, res.err))
			continue
		}
		stops := map[preflight.Finding]bool{}
		for _, f := range preflight.Errors(res.findings, ignore...) {
			stops[f] = true
			blocking = append(blocking, res.cluster+": "+f.String())
		}
		for _, f := range res.findings {
			switch {
			case stops[f]:
			case f.Severity == preflight.SeverityError:
				recorded = append(recorded, res.cluster+": "+f.String()+" [not enforced]")
			case f.Severity == preflight.SeverityWarning:
				warnings++
			}
		}
	}
	summary := fmt.Sprintf("%d clusters checked", len(clusters)-len(unchecked))
	if warnings > 0 {
		summary += fmt.Sprintf(", %d warnings", warnings)
	}
	if len(unchecked) > 0 {
		summary += fmt.Sprintf("; %d not checked (unreadable): %s", len(unchecked), list(unchecked))
	}
	if pulled > 0 {
		summary += "; " + pullNotChecked(pulled)
	}
	hint := fmt.Sprintf("see every finding with: rewind plan %s --release %s -n %s", ro.Name, rel, ro.Namespace)
	if len(blocking) > 0 && mode == v1alpha1.PreflightEnforce {
		msg := fmt.Sprintf("release %s stopped before any cluster changed: %d findings of error severity (%s): %s; fix what they name, add their checks to spec.preflight.ignore, or set spec.preflight.mode to Warn; %s",
			rel, len(blocking), summary, list(blocking), hint)
		s.condition(v1alpha1.ConditionPreflight, metav1.ConditionFalse, v1alpha1.ReasonPreflightFailed, msg)
		return stallf(v1alpha1.ReasonPreflightFailed, "%s", msg)
	}
	recorded = append(blocking, recorded...)
	msg := fmt.Sprintf("release %s: %s", rel, summary)
	if len(recorded) > 0 {
		msg += fmt.Sprintf("; %d findings of error severity not enforced (spec.preflight): %s", len(recorded), list(recorded))
		s.event("Warning", v1alpha1.ReasonPreflightPassed, "release %s goes on with %d findings of error severity not enforced (spec.preflight); %s", rel, len(recorded), hint)
	}
	s.condition(v1alpha1.ConditionPreflight, metav1.ConditionTrue, v1alpha1.ReasonPreflightPassed, msg+"; "+hint)
	return nil
}

// list joins findings, the first preflightMessageLimit of them.
// pullNotChecked words the pull members a preflight did not read.
func pullNotChecked(n int) string {
	return fmt.Sprintf("%d pull members not checked (the hub does not read a pull member's cluster; their agents do not run the preflight)", n)
}

func list(items []string) string {
	sort.Strings(items)
	if len(items) <= preflightMessageLimit {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:preflightMessageLimit], "; ") + fmt.Sprintf("; and %d more", len(items)-preflightMessageLimit)
}

// preflightCluster reads one member's CRDs and custom resources and plans the release there.
func (r *Reconciler) preflightCluster(ctx context.Context, name string, crds map[string]*apiextensionsv1.CustomResourceDefinition) ([]preflight.Finding, error) {
	mc := &v1alpha1.MemberCluster{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		return nil, fmt.Errorf("reading MemberCluster %s: %w", name, err)
	}
	cfg, err := member.ConfigFor(ctx, r.Hub, mc)
	if err != nil {
		return nil, err
	}
	cl, err := member.New(name, cfg)
	if err != nil {
		return nil, err
	}
	in, err := preflight.Read(ctx, cl, crds, preflightMaxObjects)
	if err != nil {
		return nil, err
	}
	in.Conversion = preflight.Conversion{Webhook: &preflight.ClientConfigWebhook{}}
	plan, err := preflight.PlanCluster(ctx, in)
	if err != nil {
		return nil, err
	}
	return plan.Findings(), nil
}
