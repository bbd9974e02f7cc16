package install

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rewind-dev/rewind/config"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/version"
)

// DefaultImageRepository is where the rewind-controller image is published.
const DefaultImageRepository = "ghcr.io/rewind-dev/rewind-controller"

// ControllerContainer is the name of the manager's container in the Deployment.
const ControllerContainer = "manager"

// DefaultImage is the image of this build's version.
func DefaultImage() string { return DefaultImageRepository + ":" + version.Version }

// Options say what Manifests returns.
type Options struct {
	// Image is the controller's image (default DefaultImage()).
	Image string
	// CRDsOnly returns the CRDs and the rewind-system namespace alone.
	CRDsOnly bool
	// Namespaces get a RoleBinding that lets the controller work with their releases,
	// rollouts and snapshots (rbac.NamespaceBinding).
	Namespaces []string
}

// Render returns config/default as kustomize renders it (the embedded copy of config/).
func Render() ([]*unstructured.Unstructured, error) {
	return RenderFS(config.Manifests, "default")
}

// RenderFS renders the kustomization at dir of fsys with kustomize (krusty).
func RenderFS(fsys fs.FS, dir string) ([]*unstructured.Unstructured, error) {
	mem := filesys.MakeFsInMemory()
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/config", p), b)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded manifests: %w", err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, path.Join("/config", dir))
	if err != nil {
		return nil, fmt.Errorf("rendering config/%s with kustomize: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("config/%s: %w", dir, err)
		}
		out = append(out, u)
	}
	return out, nil
}

// Manifests returns what `rewind install` applies to a hub, in apply order: CRDs and the
// rewind-system namespace, then (unless CRDsOnly) the controller's ServiceAccount, RBAC,
// Service, PodDisruptionBudget and Deployment with the image set, and a RoleBinding for each
// namespace of o.Namespaces.
func Manifests(o Options) ([]*unstructured.Unstructured, error) {
	objs, err := Render()
	if err != nil {
		return nil, err
	}
	if o.CRDsOnly {
		objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool {
			return u.GetKind() != "CustomResourceDefinition" && u.GetKind() != "Namespace"
		})
		sortForApply(objs)
		return objs, nil
	}
	image := o.Image
	if image == "" {
		image = DefaultImage()
	}
	found := false
	for _, u := range objs {
		if u.GetKind() != "Deployment" || u.GetName() != rbac.ControllerRole {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok && m["name"] == ControllerContainer {
				m["image"] = image
				found = true
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("config/default has no Deployment %s with a container %s", rbac.ControllerRole, ControllerContainer)
	}
	for _, ns := range o.Namespaces {
		u, err := NamespaceBinding(ns)
		if err != nil {
			return nil, err
		}
		objs = append(objs, u)
	}
	sortForApply(objs)
	return objs, nil
}

// applyOrder ranks kinds so that what an object needs exists before it: namespaces and CRDs,
// then identities and roles, then bindings, then workloads.
var applyOrder = map[string]int{
	"Namespace": 0, "CustomResourceDefinition": 1, "ServiceAccount": 2, "ClusterRole": 3, "Role": 3,
	"ClusterRoleBinding": 4, "RoleBinding": 4, "Service": 5, "PodDisruptionBudget": 5, "Deployment": 6,
}

func sortForApply(objs []*unstructured.Unstructured) {
	rank := func(u *unstructured.Unstructured) int {
		if r, ok := applyOrder[u.GetKind()]; ok {
			return r
		}
		return 5
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
}

// NamespaceBinding is the RoleBinding that enables the controller in ns, ready to apply.
func NamespaceBinding(ns string) (*unstructured.Unstructured, error) {
	return toUnstructured(rbac.NamespaceBinding(ns))
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// DryRun sends every request with dryRun=All: the API server validates, admits and
	// authorizes it (as kubectl apply --server-side --dry-run=server) and stores nothing.
	// An object in a namespace that does not exist yet but that objs create (rewind-system on
	// a new hub) cannot be sent: a dry run creates no namespace. It is reported unvalidated.
	DryRun bool
	// Report, when set, is told of each object once it is applied (or validated by a dry
	// run), or, in a dry run, skipped because its namespace is yet to be created.
	Report func(u *unstructured.Unstructured, validated bool)
}

// Apply applies objs to the hub with server-side apply, in order, and waits until the CRDs
// among them are Established (not in a dry run). It is idempotent.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, o ApplyOptions) error {
	w := c
	if o.DryRun {
		w = client.NewDryRunClient(c)
	}
	report := o.Report
	if report == nil {
		report = func(*unstructured.Unstructured, bool) {}
	}
	newNamespaces := map[string]bool{} // created by objs, in a dry run: not there yet
	var crds []*unstructured.Unstructured
	for _, u := range objs {
		if o.DryRun && u.GetNamespace() != "" && newNamespaces[u.GetNamespace()] {
			report(u, false)
			continue
		}
		if err := apply.Apply(ctx, w, u); err != nil {
			return err
		}
		report(u, true)
		if u.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, u)
		}
		if o.DryRun && u.GetAPIVersion() == "v1" && u.GetKind() == "Namespace" {
			err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, &corev1.Namespace{})
			switch {
			case apierrors.IsNotFound(err):
				newNamespaces[u.GetName()] = true
			case err != nil:
				return fmt.Errorf("reading namespace %s: %w", u.GetName(), err)
			}
		}
	}
	if o.DryRun || len(crds) == 0 {
		return nil
	}
	return apply.WaitEstablished(ctx, c, crds, 0)
}
