package restore

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/snapshot"
)

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	serviceGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
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
		live, err := r.dyn.Resource(crdGVR).Get(ctx, e.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
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
		svc, err := r.dyn.Resource(serviceGVR).Namespace(svcNS).Get(ctx, svcName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
		deps, err := r.dyn.Resource(deploymentGVR).Namespace(svcNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, d := range deps.Items {
			labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
			if len(sel) > 0 && matches(sel, labels) {
				out[nsName(&d)] = true
			}
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
