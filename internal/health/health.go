// Package health decides whether a changed member cluster is healthy: kstatus Current for
// every applied object, the operator Deployment Available, every custom resource of the
// operator's kinds Ready with observedGeneration equal to generation (where the resource
// exposes these), and optional CEL expressions per kind.
package health

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
)

// Target says what to check on one cluster.
type Target struct {
	// Applied are the objects the release applied.
	Applied []*unstructured.Unstructured
	// Namespace is the install namespace: namespaced applied objects without one live there.
	Namespace string
	// OperatorImage identifies the operator Deployment(s): those running this image.
	OperatorImage string
	// CRDs are the release's CRDs; their custom resources are checked.
	CRDs []v1alpha1.CRDInfo
	// SkipCustomResources turns the CR check off.
	SkipCustomResources bool
	// CEL are extra checks per kind.
	CEL []v1alpha1.CELCheck
}

// Result lists what is not healthy yet; empty means healthy.
type Result struct {
	Problems []string
}

// Healthy says whether every gate passed.
func (r Result) Healthy() bool { return len(r.Problems) == 0 }

// Summary is a one-line description of the problems.
func (r Result) Summary() string {
	if r.Healthy() {
		return "healthy"
	}
	p := r.Problems
	more := ""
	if len(p) > 3 {
		more = fmt.Sprintf(" (and %d more)", len(p)-3)
		p = p[:3]
	}
	return strings.Join(p, "; ") + more
}

// Check evaluates every gate once against the member. Applied objects are looked up by their
// kind's scope on the member (see member.Cluster.Scoped), whatever kind they are, in
// parallel. Custom resources and CEL checks are evaluated only once every applied object is
// healthy, so an early check reports the applied objects' problems alone.
func Check(ctx context.Context, cl *member.Cluster, t Target) (Result, error) {
	var res Result
	progs, err := CompileCEL(t.CEL)
	if err != nil {
		return res, err
	}
	applied, err := cl.Scoped(t.Applied, t.Namespace)
	if err != nil {
		return res, err
	}
	// The applied objects are read in parallel: each GET costs a round trip to the member.
	type verdict struct {
		problems []string
		operator bool
		err      error
	}
	verdicts := make([]verdict, len(applied))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, a := range applied {
		ri, _, err := cl.ResourceClient(cl.Dynamic, a)
		if err != nil {
			return res, err
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			verdicts[i].problems, verdicts[i].operator, verdicts[i].err = checkApplied(ctx, ri, a, t.OperatorImage)
		})
	}
	wg.Wait()
	operatorFound := false
	for _, v := range verdicts {
		if v.err != nil {
			// A read that failed says nothing of health (a fault is retried by the caller):
			// it must never count as an unhealthy object.
			return res, v.err
		}
		res.Problems = append(res.Problems, v.problems...)
		operatorFound = operatorFound || v.operator
	}
	if t.OperatorImage != "" && !operatorFound {
		res.Problems = append(res.Problems, fmt.Sprintf("no applied Deployment runs the operator image %s", t.OperatorImage))
	}
	if len(res.Problems) > 0 {
		// Custom resources are listed once every applied object is healthy: until the operator
		// runs, its resources' state says nothing new, and their LIST is the costliest part of
		// a check for the member and for us.
		sort.Strings(res.Problems)
		return res, nil
	}
	for _, crd := range t.CRDs {
		if t.SkipCustomResources && len(progs[crd.Kind]) == 0 {
			continue
		}
		gvr := schema.GroupVersionResource{Group: crd.Group, Version: crd.StorageVersion, Resource: strings.SplitN(crd.Name, ".", 2)[0]}
		cont := ""
		for {
			l, err := cl.Dynamic.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
			if err != nil {
				return res, fmt.Errorf("listing %s: %w", crd.Name, err)
			}
			for i := range l.Items {
				cr := &l.Items[i]
				if !t.SkipCustomResources {
					if p := crProblem(cr); p != "" {
						res.Problems = append(res.Problems, fmt.Sprintf("%s %s: %s", crd.Kind, name(cr), p))
					}
				}
				for _, pr := range progs[crd.Kind] {
					ok, err := pr.eval(cr)
					if err != nil || !ok {
						msg := pr.message
						if err != nil {
							msg = err.Error()
						}
						res.Problems = append(res.Problems, fmt.Sprintf("%s %s: CEL check %q failed: %s", crd.Kind, name(cr), pr.expr, msg))
					}
				}
			}
			if cont = l.GetContinue(); cont == "" {
				break
			}
		}
	}
	sort.Strings(res.Problems)
	return res, nil
}

// checkApplied reads one applied object and returns its problems, and whether it is a
// Deployment running the operator image. An object that is not there is a problem; a read
// that failed otherwise is an error.
func checkApplied(ctx context.Context, ri dynamic.ResourceInterface, a *unstructured.Unstructured, operatorImage string) ([]string, bool, error) {
	live, err := ri.Get(ctx, a.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []string{fmt.Sprintf("%s %s: %v", a.GetKind(), name(a), err)}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading %s %s: %w", a.GetKind(), name(a), err)
	}
	st, err := status.Compute(live)
	if err != nil {
		return []string{fmt.Sprintf("%s %s: status cannot be computed: %v", a.GetKind(), name(a), err)}, false, nil
	}
	var problems []string
	if st.Status != status.CurrentStatus {
		problems = append(problems, fmt.Sprintf("%s %s is %s: %s", a.GetKind(), name(a), st.Status, st.Message))
	}
	operator := false
	if a.GetKind() == "Deployment" && a.GroupVersionKind().Group == "apps" && runsImage(live, operatorImage) {
		operator = true
		if !deploymentAvailable(live) {
			problems = append(problems, fmt.Sprintf("operator Deployment %s is not Available", name(a)))
		}
	}
	return problems, operator, nil
}

func name(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

func runsImage(dep *unstructured.Unstructured, image string) bool {
	if image == "" {
		return false
	}
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["image"] == image {
			return true
		}
	}
	return false
}

func deploymentAvailable(dep *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(dep.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// crProblem says why a custom resource is not ready, where it exposes readiness: a Ready
// condition that is not True, or an observedGeneration (top-level or on Ready) behind
// metadata.generation.
func crProblem(cr *unstructured.Unstructured) string {
	gen := cr.GetGeneration()
	if og, ok, _ := unstructured.NestedInt64(cr.Object, "status", "observedGeneration"); ok && og != gen {
		return fmt.Sprintf("status.observedGeneration %d, generation %d (not reconciled yet)", og, gen)
	}
	conds, _, _ := unstructured.NestedSlice(cr.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] != "Ready" {
			continue
		}
		if m["status"] != "True" {
			return fmt.Sprintf("Ready is %v: %v", m["status"], m["message"])
		}
		if og, ok := m["observedGeneration"].(int64); ok && og != gen {
			return fmt.Sprintf("Ready condition observedGeneration %d, generation %d", og, gen)
		}
	}
	return ""
}

type celProgram struct {
	expr, message string
	prg           cel.Program
}

func (p celProgram) eval(u *unstructured.Unstructured) (bool, error) {
	out, _, err := p.prg.Eval(map[string]any{"self": u.Object})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("expression does not return a bool")
	}
	return bool(b), nil
}

// CompileCEL compiles the CEL checks by kind; a bad expression is an error naming it.
func CompileCEL(checks []v1alpha1.CELCheck) (map[string][]celProgram, error) {
	out := map[string][]celProgram{}
	if len(checks) == 0 {
		return out, nil
	}
	env, err := cel.NewEnv(cel.Variable("self", cel.DynType))
	if err != nil {
		return nil, err
	}
	for _, c := range checks {
		ast, iss := env.Compile(c.Expression)
		if iss.Err() != nil {
			return nil, fmt.Errorf("spec.healthGates.cel: expression %q for %s does not compile: %w", c.Expression, c.Kind, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			return nil, fmt.Errorf("spec.healthGates.cel: expression %q: %w", c.Expression, err)
		}
		msg := c.Message
		if msg == "" {
			msg = "expression is false"
		}
		out[c.Kind] = append(out[c.Kind], celProgram{expr: c.Expression, message: msg, prg: prg})
	}
	return out, nil
}
