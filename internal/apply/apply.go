// Package apply applies a release's manifests to a cluster with server-side apply, in stages:
// CRDs (then wait until Established), namespaces/RBAC/ServiceAccounts, webhooks and their
// Services, then workloads and everything else.
package apply

import (
	"context"
	"fmt"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the server-side-apply field manager rewind applies with.
const FieldManager = "rewind"

// Stage is one step of the staged apply.
type Stage int

// The stages, in order.
const (
	StageCRDs Stage = iota
	StageRBAC
	StageWebhooks
	StageWorkloads
)

// String names the stage.
func (s Stage) String() string {
	return [...]string{"crds", "rbac", "webhooks", "workloads"}[s]
}

// StageOf says in which stage an object is applied.
func StageOf(gvk schema.GroupVersionKind) Stage {
	switch gvk.GroupKind() {
	case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
		return StageCRDs
	case schema.GroupKind{Kind: "Namespace"}, schema.GroupKind{Kind: "ServiceAccount"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:
		return StageRBAC
	case schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"},
		schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"},
		schema.GroupKind{Kind: "Service"}:
		return StageWebhooks
	}
	return StageWorkloads
}

// Options tune an apply.
type Options struct {
	// Namespace is given to namespaced objects that have none.
	Namespace string
	// EstablishTimeout bounds the wait for CRDs to be Established (default 60s).
	EstablishTimeout time.Duration
	// Stages limits the apply to these stages (all when empty).
	Stages []Stage
}

// Objects applies objs to the cluster of c, stage by stage, forcing the fields rewind
// manages. It returns the applied objects (with namespaces defaulted), in apply order.
func Objects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, o Options) ([]*unstructured.Unstructured, error) {
	byStage := map[Stage][]*unstructured.Unstructured{}
	for _, obj := range objs {
		u := obj.DeepCopy()
		st := StageOf(u.GroupVersionKind())
		byStage[st] = append(byStage[st], u)
	}
	want := map[Stage]bool{}
	for _, s := range o.Stages {
		want[s] = true
	}
	if o.Namespace != "" {
		// The install namespace is created if the manifests do not define it.
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(o.Namespace)
		defined := false
		for _, u := range byStage[StageRBAC] {
			if u.GetKind() == "Namespace" && u.GetName() == o.Namespace {
				defined = true
			}
		}
		if !defined {
			if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("creating namespace %s: %w", o.Namespace, err)
			}
		}
	}
	var applied []*unstructured.Unstructured
	for st := StageCRDs; st <= StageWorkloads; st++ {
		if len(o.Stages) > 0 && !want[st] {
			continue
		}
		list := byStage[st]
		sort.SliceStable(list, func(i, j int) bool {
			// Namespaces before what lives in them.
			return list[i].GetKind() == "Namespace" && list[j].GetKind() != "Namespace"
		})
		for _, u := range list {
			if err := defaultNamespace(c, u, o.Namespace); err != nil {
				return applied, err
			}
			if err := Apply(ctx, c, u); err != nil {
				return applied, fmt.Errorf("stage %s: %w", st, err)
			}
			applied = append(applied, u)
		}
		if st == StageCRDs && len(list) > 0 {
			if err := WaitEstablished(ctx, c, list, o.EstablishTimeout); err != nil {
				return applied, err
			}
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

func defaultNamespace(c client.Client, u *unstructured.Unstructured, ns string) error {
	if u.GetNamespace() != "" || ns == "" {
		return nil
	}
	namespaced, err := c.IsObjectNamespaced(u)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return fmt.Errorf("%s %s: the cluster does not serve %s (is its CRD part of the release?)", u.GetKind(), u.GetName(), u.GroupVersionKind())
		}
		return err
	}
	if namespaced {
		u.SetNamespace(ns)
	}
	return nil
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
