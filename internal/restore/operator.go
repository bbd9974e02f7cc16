package restore

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	serviceGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	namespaceGVR  = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

func isWebhookConfig(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "admissionregistration.k8s.io" && (gvk.Kind == "ValidatingWebhookConfiguration" || gvk.Kind == "MutatingWebhookConfiguration")
}

func isDeployment(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "apps" && gvk.Kind == "Deployment"
}

// operatorObjects returns the operator's Deployments and webhook configurations known from the
// snapshot (release objects, i.e. those without an owner) and from the current release.
func (r *restorer) operatorObjects() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	seen := map[string]bool{}
	add := func(u *unstructured.Unstructured) {
		gvk := u.GroupVersionKind()
		if !isDeployment(gvk) && !isWebhookConfig(gvk) {
			return
		}
		c := u.DeepCopy()
		if isDeployment(gvk) && c.GetNamespace() == "" {
			c.SetNamespace(r.o.Header.Namespace)
		}
		if k := keyOf(c); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	for _, e := range r.entries {
		if e.section == snapshot.SectionAssociated && len(e.owners) == 0 {
			// Only what names it is used: no need to decode the whole object.
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(e.gvk)
			u.SetNamespace(e.namespace)
			u.SetName(e.name)
			add(u)
		}
	}
	for _, u := range r.o.Current {
		add(u)
	}
	return out
}

func (r *restorer) markHeld() {
	for _, u := range r.operatorObjects() {
		r.held[keyOf(u)] = true
	}
}

// conversionServers returns the Deployments (namespace/name) that back the conversion
// webhooks of the live CRDs the snapshot holds.
func (r *restorer) conversionServers(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	for _, e := range r.entries {
		if e.section != snapshot.SectionCRD {
			continue
		}
		live, err := r.get(ctx, r.dyn.Resource(crdGVR), e.name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", e.name, err)
		}
		strategy, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "strategy")
		if strategy != "Webhook" {
			continue
		}
		svcNS, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace")
		svcName, _, _ := unstructured.NestedString(live.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name")
		if svcName == "" {
			continue
		}
		// Only a Service that is not there is taken for "no server": a read that fails is
		// returned, or the server would be scaled down and the migration could never
		// convert an object.
		svc, err := r.get(ctx, r.dyn.Resource(serviceGVR).Namespace(svcNS), svcName)
		if apierrors.IsNotFound(err) {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("CRD %s converts through Service %s/%s, which does not exist", e.name, svcNS, svcName))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Service %s/%s, the conversion webhook of CRD %s: %w", svcNS, svcName, e.name, err)
		}
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		if len(sel) == 0 {
			continue
		}
		err = r.eachLive(ctx, listing{gvr: deploymentGVR, gvk: deploymentGVR.GroupVersion().WithKind("Deployment"), namespace: svcNS}, func(it liveItem) error {
			d, err := it.object()
			if err != nil {
				return err
			}
			labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			if matches(sel, labels) {
				out[nsName(d)] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}
