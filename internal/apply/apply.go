// Package apply applies a release's manifests to a member cluster with server-side apply, in
// stages ordered by each kind's role, which is found through the member's discovery rather than
// a list of kind names: CRDs (then wait until Established), namespaces, RBAC and service
// accounts, configuration, webhooks and the Services that serve them, workloads, then
// everything else (custom resources, PodDisruptionBudgets, monitors, ...).
package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/member"
)

// FieldManager is the server-side-apply field manager rewind applies with.
const FieldManager = "rewind"

// Stage is one step of the staged apply.
type Stage int

// The stages, in order.
const (
	// StageCRDs: CustomResourceDefinitions; the apply waits until they are Established.
	StageCRDs Stage = iota
	// StageNamespaces: Namespaces.
	StageNamespaces
	// StageRBAC: roles, bindings and service accounts.
	StageRBAC
	// StageConfig: what workloads read or are placed by: ConfigMaps, Secrets and other
	// built-in configuration kinds (PriorityClasses, RuntimeClasses, StorageClasses, ...).
	StageConfig
	// StageWebhooks: admission webhooks and policies, API services, and Services.
	StageWebhooks
	// StageWorkloads: kinds in the "all" discovery category (Deployments, StatefulSets,
	// DaemonSets, Jobs, CronJobs, HorizontalPodAutoscalers, ...).
	StageWorkloads
	// StageOthers: everything else: custom resources (of the release's CRDs or of CRDs
	// already on the member), PodDisruptionBudgets, NetworkPolicies, Ingresses, ...
	StageOthers
)

// Stages lists every stage in order.
var Stages = []Stage{StageCRDs, StageNamespaces, StageRBAC, StageConfig, StageWebhooks, StageWorkloads, StageOthers}

// String names the stage.
func (s Stage) String() string {
	return [...]string{"crds", "namespaces", "rbac", "config", "webhooks", "workloads", "others"}[s]
}

// builtIn says whether a group is one of Kubernetes' own: the core group, groups without a
// dot (apps, batch, policy, autoscaling) and *.k8s.io (reserved for Kubernetes APIs).
func builtIn(group string) bool {
	return group == "" || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io")
}

// RoleOf says in which stage an object of a kind is applied, from what discovery says of its
// resource. customResource says the kind is defined by a CRD of the objects being applied.
func RoleOf(gvk schema.GroupVersionKind, res member.Resource, customResource bool) Stage {
	gr := res.GVR.GroupResource()
	switch {
	case customResource:
		return StageOthers
	case gr == schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}:
		return StageCRDs
	case gr == schema.GroupResource{Resource: "namespaces"}:
		return StageNamespaces
	case gr.Group == "rbac.authorization.k8s.io", gr == schema.GroupResource{Resource: "serviceaccounts"}:
		return StageRBAC
	case gr.Group == "admissionregistration.k8s.io", gr.Group == "apiregistration.k8s.io",
		gr == schema.GroupResource{Resource: "services"}:
		return StageWebhooks
	case slices.Contains(res.Categories, "all"):
		return StageWorkloads
	case builtIn(gr.Group) && (gr.Group == "" || !res.Namespaced):
		// Core namespaced kinds outside "all" (ConfigMaps, Secrets, PVCs, quotas, limit
		// ranges) and built-in cluster-scoped kinds (PriorityClasses, StorageClasses,
		// RuntimeClasses, IngressClasses): what workloads are configured or placed by.
		return StageConfig
	}
	return StageOthers
}

// Options tune an apply.
type Options struct {
	// Namespace is given to namespaced objects that have none; it is created when the
	// objects do not define it.
	Namespace string
	// EstablishTimeout bounds the wait for CRDs to be Established (default 60s).
	EstablishTimeout time.Duration
	// Stages limits the apply to these stages (all when empty).
	Stages []Stage
}

// Plan sorts objs into stages through the member's discovery, with namespaces set by each
// kind's scope (see member.Cluster.Scoped). Within a stage the order of objs is kept. A kind
// the member does not serve and objs do not define is an error that names it.
func Plan(cl *member.Cluster, objs []*unstructured.Unstructured, namespace string) (map[Stage][]*unstructured.Unstructured, error) {
	scoped, err := cl.Scoped(objs, namespace)
	if err != nil {
		return nil, err
	}
	defined := member.DefinedKinds(objs)
	out := map[Stage][]*unstructured.Unstructured{}
	for _, u := range scoped {
		gvk := u.GroupVersionKind()
		var st Stage
		if _, ok := defined[gvk.GroupKind()]; ok {
			st = StageOthers
		} else {
			res, err := cl.Resource(gvk)
			if err != nil {
				return nil, err
			}
			st = RoleOf(gvk, res, false)
		}
		out[st] = append(out[st], u)
	}
	return out, nil
}

// Objects applies objs to the member, stage by stage, forcing the fields rewind manages. It
// returns the applied objects (namespaces set), in apply order.
func Objects(ctx context.Context, cl *member.Cluster, objs []*unstructured.Unstructured, o Options) ([]*unstructured.Unstructured, error) {
	byStage, err := Plan(cl, objs, o.Namespace)
	if err != nil {
		return nil, err
	}
	selected := func(st Stage) bool { return len(o.Stages) == 0 || slices.Contains(o.Stages, st) }
	// The install namespace is created first if an object to apply lives in it and the
	// release does not define it (then the namespaces stage applies it, before the others).
	if o.Namespace != "" && needsNamespace(byStage, selected, o.Namespace) && !slices.ContainsFunc(byStage[StageNamespaces], func(u *unstructured.Unstructured) bool { return u.GetName() == o.Namespace }) {
		if err := member.EnsureNamespace(ctx, cl.Client, o.Namespace); err != nil {
			return nil, err
		}
	}
	var applied []*unstructured.Unstructured
	for _, st := range Stages {
		list := byStage[st]
		if !selected(st) || len(list) == 0 {
			continue
		}
		for _, u := range list {
			if err := Apply(ctx, cl.Client, u); err != nil {
				return applied, fmt.Errorf("stage %s: %w", st, err)
			}
			applied = append(applied, u)
		}
		if st == StageCRDs {
			if err := WaitEstablished(ctx, cl.Client, list, o.EstablishTimeout); err != nil {
				return applied, err
			}
			// The kinds the CRDs define are served now: discovery must see them.
			cl.ResetMapper()
		}
	}
	return applied, nil
}

// Apply server-side-applies one object with field manager rewind, forcing ownership.
func Apply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	obj := u.DeepCopy()
	obj.SetResourceVersion("")
	obj.SetManagedFields(nil)
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", u.GetKind(), key(u), err)
	}
	return nil
}

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// WaitEstablished waits until every CRD in crds is Established and its names are accepted.
func WaitEstablished(ctx context.Context, c client.Client, crds []*unstructured.Unstructured, timeout time.Duration) error {
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	for _, u := range crds {
		var last string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			crd := &unstructured.Unstructured{}
			crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
			if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, crd); err != nil {
				last = err.Error()
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			established, named := false, false
			for _, ci := range conds {
				cond, _ := ci.(map[string]any)
				typ, status := fmt.Sprint(cond["type"]), fmt.Sprint(cond["status"])
				switch {
				case typ == string(apiextensionsv1.Established) && status == "True":
					established = true
				case typ == string(apiextensionsv1.NamesAccepted) && status == "True":
					named = true
				case typ == string(apiextensionsv1.NamesAccepted) && status == "False":
					last = fmt.Sprint(cond["message"])
				}
			}
			return established && named, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s did not become Established within %s: %s", u.GetName(), timeout, last)
		}
	}
	return nil
}

// needsNamespace says whether a selected stage has an object in namespace ns.
func needsNamespace(byStage map[Stage][]*unstructured.Unstructured, selected func(Stage) bool, ns string) bool {
	for st, list := range byStage {
		if selected(st) && slices.ContainsFunc(list, func(u *unstructured.Unstructured) bool { return u.GetNamespace() == ns }) {
			return true
		}
	}
	return false
}
