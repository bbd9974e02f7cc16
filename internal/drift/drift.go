// Package drift compares what runs in a member cluster with what its installed-version record
// and the installed release say should run there.
package drift

import (
	"context"
	"fmt"
	"slices"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
)

var (
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	crdGVK        = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
)

// Check returns the ways the live member differs from rec and the release rec names (rel, with
// its rendered manifests): the operator Deployment's image differs from the record, or the
// live CRDs differ from the release's CRD inventory. No reasons means no drift.
func Check(ctx context.Context, c client.Reader, rec *member.Record, rel *v1alpha1.OperatorRelease, manifests []*unstructured.Unstructured) ([]string, error) {
	var reasons []string
	found := false
	for _, m := range manifests {
		if m.GroupVersionKind().GroupKind() != deploymentGVK.GroupKind() {
			continue
		}
		ns := m.GetNamespace()
		if ns == "" {
			ns = rec.Namespace
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(deploymentGVK)
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: m.GetName()}, live)
		if apierrors.IsNotFound(err) {
			reasons = append(reasons, fmt.Sprintf("Deployment %s/%s of the release is missing", ns, m.GetName()))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Deployment %s/%s: %w", ns, m.GetName(), err)
		}
		images := Images(live)
		if !slices.Contains(Images(m), rec.Image) {
			continue // not the operator's Deployment (the release image is not in its manifest)
		}
		found = true
		if !slices.Contains(images, rec.Image) {
			reasons = append(reasons, fmt.Sprintf("Deployment %s/%s runs %v, but the installed-version record says %s", ns, m.GetName(), images, rec.Image))
		}
	}
	if !found && rec.Image != "" && len(reasons) == 0 && hasDeployment(manifests) {
		reasons = append(reasons, fmt.Sprintf("no Deployment of release %s uses the recorded image %s", rec.Release, rec.Image))
	}
	if rel != nil {
		for _, want := range rel.Status.CRDs {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(crdGVK)
			err := c.Get(ctx, client.ObjectKey{Name: want.Name}, live)
			if apierrors.IsNotFound(err) {
				reasons = append(reasons, fmt.Sprintf("CRD %s is missing", want.Name))
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("reading CRD %s: %w", want.Name, err)
			}
			served, storage := CRDVersions(live)
			if storage != want.StorageVersion {
				reasons = append(reasons, fmt.Sprintf("CRD %s stores %s, release %s says %s", want.Name, storage, rel.Name, want.StorageVersion))
			}
			if !slices.Equal(served, sorted(want.ServedVersions)) {
				reasons = append(reasons, fmt.Sprintf("CRD %s serves %v, release %s says %v", want.Name, served, rel.Name, sorted(want.ServedVersions)))
			}
		}
	}
	sort.Strings(reasons)
	return reasons, nil
}

func hasDeployment(objs []*unstructured.Unstructured) bool {
	for _, o := range objs {
		if o.GroupVersionKind().GroupKind() == deploymentGVK.GroupKind() {
			return true
		}
	}
	return false
}

func sorted(in []string) []string {
	out := slices.Clone(in)
	sort.Strings(out)
	return out
}

// Images lists the container and init-container images of a workload's pod template.
func Images(u *unstructured.Unstructured) []string {
	var out []string
	for _, field := range []string{"containers", "initContainers"} {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", field)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				if img, ok := m["image"].(string); ok {
					out = append(out, img)
				}
			}
		}
	}
	return out
}

// CRDVersions returns a CRD's served versions (sorted) and its storage version.
func CRDVersions(u *unstructured.Unstructured) (served []string, storage string) {
	vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range vs {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if s, _ := m["served"].(bool); s {
			served = append(served, name)
		}
		if s, _ := m["storage"].(bool); s {
			storage = name
		}
	}
	sort.Strings(served)
	return served, storage
}
