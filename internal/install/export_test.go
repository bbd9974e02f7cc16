//go:build !unit

package install_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// decodeYAML splits a YAML stream into objects.
func decodeYAML(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := utilyaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("rewind install --export printed a document that is no object: %v\n%s", err, doc)
		}
		out = append(out, u)
	}
	return out
}

// serverDryRunApply is `kubectl apply --server-side --dry-run=server -f -`.
func serverDryRunApply(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner("rewind-test"), client.ForceOwnership, client.DryRunAll)
}

// TestInstallExportAppliesWithServerDryRun prints the install manifests with
// `rewind install --export` and has the hub's API server validate, admit and authorize every
// one of them with a server-side dry run.
func TestInstallExportAppliesWithServerDryRun(t *testing.T) {
	ctx := t.Context()
	c := testenv.HubClient(t, env.Hub.RESTConfig()) // the CRDs and rewind-system exist, as a dry run cannot create them for what follows
	team := testenv.Namespace(t, env.Hub.RESTConfig())
	const image = "registry.example.com/rewind-controller:v0.1.0"
	out, err := cli.Run(ctx, "install", "--export", "--image", image, "--namespaces", team)
	if err != nil {
		t.Fatalf("rewind install --export: %v\n%s", err, out)
	}
	objs := decodeYAML(t, out)
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
		if err := serverDryRunApply(ctx, c, u); err != nil {
			t.Errorf("server dry run of %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	crds, err := install.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for kind, n := range map[string]int{"CustomResourceDefinition": len(crds), "Namespace": 1, "ServiceAccount": 1, "ClusterRole": 3, "Role": 1,
		"ClusterRoleBinding": 1, "RoleBinding": 2, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1} {
		if kinds[kind] != n {
			t.Errorf("rewind install --export printed %d %s, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	dep := find(objs, "Deployment", rbac.SystemNamespace, "rewind-controller")
	if dep == nil {
		t.Fatal("no Deployment in the export")
	}
	d := convert[appsv1.Deployment](t, dep)
	if got := d.Spec.Template.Spec.Containers[0].Image; got != image {
		t.Errorf("--image: the Deployment runs %s", got)
	}
	if rb := find(objs, "RoleBinding", team, rbac.NamespaceBindingName); rb == nil {
		t.Errorf("--namespaces %s: no RoleBinding there", team)
	}
	// A dry run stores nothing.
	if err := c.Get(ctx, client.ObjectKey{Namespace: rbac.SystemNamespace, Name: "rewind-controller"}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run stored the Deployment (get: %v)", err)
	}
	// And the API server really checks: a broken Deployment fails the dry run.
	bad := dep.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, int64(-1), "spec", "replicas")
	if err := serverDryRunApply(ctx, c, bad); !apierrors.IsInvalid(err) {
		t.Errorf("a Deployment with replicas -1 passed the server dry run: %v", err)
	}

	// --crds-only prints the CRDs and the namespace alone.
	out, err = cli.Run(ctx, "install", "--export", "--crds-only")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range decodeYAML(t, out) {
		if k := u.GetKind(); k != "CustomResourceDefinition" && k != "Namespace" {
			t.Errorf("--crds-only exported %s %s", k, u.GetName())
		}
	}
}

// A dry run on a new hub: the namespace the install creates does not exist yet, so what goes
// into it cannot be sent (the API server refuses an object in a missing namespace, even in a
// dry run). It is reported as not validated, and the dry run goes on; an object in a missing
// namespace the install does not create is still an error.
func TestDryRunIntoANamespaceTheInstallCreates(t *testing.T) {
	ctx := t.Context()
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := "rewind-new-" + rand.String(6)
	obj := func(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace(namespace)
		u.SetName(name)
		return u
	}
	sa := obj("v1", "ServiceAccount", ns, "rewind-controller")
	objs := []*unstructured.Unstructured{obj("v1", "Namespace", "", ns), sa, obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", ns+"-role")}
	validated, skipped := map[string]bool{}, map[string]bool{}
	err := install.Apply(ctx, c, objs, install.ApplyOptions{DryRun: true, Report: func(u *unstructured.Unstructured, ok bool) {
		if ok {
			validated[u.GetKind()] = true
		} else {
			skipped[u.GetKind()] = true
		}
	}})
	if err != nil {
		t.Fatalf("a dry run into a namespace it creates: %v", err)
	}
	if !validated["Namespace"] || !validated["ClusterRole"] || validated["ServiceAccount"] || !skipped["ServiceAccount"] {
		t.Errorf("validated %v, not validated %v; want the ServiceAccount alone not validated", validated, skipped)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("the dry run created namespace %s (get: %v)", ns, err)
	}

	// A namespace nothing creates is the user's to fix: the API server's NotFound.
	err = install.Apply(ctx, c, []*unstructured.Unstructured{sa}, install.ApplyOptions{DryRun: true})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a dry run into a missing namespace: %v, want NotFound", err)
	}
}

// TestInstallAndEnableNamespace runs `rewind install --dry-run`, then `rewind install` and
// `rewind namespace enable|disable` for real.
func TestInstallAndEnableNamespace(t *testing.T) {
	ctx := t.Context()
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	team := testenv.Namespace(t, env.Hub.RESTConfig())
	out, err := cli.Run(ctx, "install", "--kubeconfig", env.Hub.Kubeconfig, "--dry-run", "--image", "registry.example.com/rewind-controller:v0.1.0")
	if err != nil || !strings.Contains(out, "applied Deployment rewind-system/rewind-controller (server dry run: nothing stored)") {
		t.Fatalf("rewind install --dry-run: %v\n%s", err, out)
	}
	out, err = cli.Run(ctx, "install", "--kubeconfig", env.Hub.Kubeconfig, "--image", "registry.example.com/rewind-controller:v0.1.0")
	if err != nil || !strings.Contains(out, "rewind namespace enable NAMESPACE") {
		t.Fatalf("rewind install: %v\n%s", err, out)
	}
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: rbac.SystemNamespace, Name: "rewind-controller"}, d); err != nil {
		t.Fatalf("rewind install did not create the controller: %v", err)
	}
	if *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Image != "registry.example.com/rewind-controller:v0.1.0" {
		t.Errorf("Deployment: %d replicas of %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), d) }) // no controller runs in this hub

	if out, err := cli.Run(ctx, "namespace", "enable", team, "--kubeconfig", env.Hub.Kubeconfig); err != nil || !strings.Contains(out, "namespace "+team+" enabled") {
		t.Fatalf("rewind namespace enable: %v\n%s", err, out)
	}
	rb, err := install.NamespaceBinding(team)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rb), rb); err != nil {
		t.Fatalf("no RoleBinding after enable: %v", err)
	}
	if out, err := cli.Run(ctx, "namespace", "enable", "no-such-namespace", "--kubeconfig", env.Hub.Kubeconfig); err == nil ||
		!strings.Contains(err.Error(), `namespace "no-such-namespace" not found in the hub: create it first`) {
		t.Errorf("enabling a missing namespace: %v\n%s", err, out)
	}
	if out, err := cli.Run(ctx, "namespace", "disable", team, "--kubeconfig", env.Hub.Kubeconfig); err != nil || !strings.Contains(out, "namespace "+team+" disabled") {
		t.Fatalf("rewind namespace disable: %v\n%s", err, out)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(rb), rb); !apierrors.IsNotFound(err) {
		t.Errorf("the RoleBinding is still there after disable: %v", err)
	}
}
