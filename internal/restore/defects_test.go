//go:build !unit

package restore_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// newKind installs a namespaced CRD for kind in group, served at v1 (the storage version)
// with an open schema and a status subresource, changed by mut; it waits until the kind is
// served and removes the CRD when the test ends. It returns the CRD as the API server holds
// it and the kind's resource.
func newKind(t *testing.T, group, kind string, mut func(crd map[string]any)) (*unstructured.Unstructured, schema.GroupVersionResource) {
	t.Helper()
	ctx := t.Context()
	plural := strings.ToLower(kind) + "s"
	version := map[string]any{
		"name": "v1", "served": true, "storage": true,
		"subresources": map[string]any{"status": map[string]any{}},
		"schema": map[string]any{"openAPIV3Schema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"spec":   map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
				"status": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
			},
		}},
	}
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names":    map[string]any{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
			"versions": []any{version},
		},
	}
	if mut != nil {
		mut(crd)
	}
	d := dyn(t)
	if _, err := d.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: crd}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the CRD for %s: %v", kind, err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := plural + "." + group
		if err := d.Resource(crdGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CRD %s: %v", name, err)
		}
		// The next run of the test creates it again: wait until it is gone.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := d.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("CRD %s was not deleted: %v", name, err)
		}
	})
	var live *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := d.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return false, nil
		}
		var err error
		live, err = d.Resource(crdGVR).Get(ctx, plural+"."+group, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("%s is not served: %v", gvr, err)
	}
	return live, gvr
}

// create creates u (its namespace too) and returns it as the API server holds it.
func create(t *testing.T, gvr schema.GroupVersionResource, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	ensureNamespace(t, u.GetNamespace())
	out, err := resourceIn(dyn(t), gvr, u.GetNamespace()).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out
}

func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	if ns == "" {
		return
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	_, err := dyn(t).Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func resourceIn(d dynamic.Interface, gvr schema.GroupVersionResource, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return d.Resource(gvr)
	}
	return d.Resource(gvr).Namespace(ns)
}

// object is a namespaced object of kind with spec.
func object(apiVersion, kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}}
}

// deleteAtEnd deletes objects when the test ends (their finalizers removed first), and
// waits until they are gone, so that the next run of the test starts clean.
func deleteAtEnd(t *testing.T, gvr schema.GroupVersionResource, ns, name string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		ri := resourceIn(dyn(t), gvr, ns)
		if u, err := ri.Get(ctx, name, metav1.GetOptions{}); err == nil && len(u.GetFinalizers()) > 0 {
			u.SetFinalizers(nil)
			if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				t.Errorf("removing the finalizers of %s %s/%s: %v", gvr.Resource, ns, name, err)
			}
		}
		if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s %s/%s: %v", gvr.Resource, ns, name, err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := ri.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("%s %s/%s was not deleted: %v", gvr.Resource, ns, name, err)
		}
	})
}

// The conversion webhook's server must keep running while the CRD step migrates objects
// through it. A Service that cannot be read for a moment is a fault: the Quiesce step fails
// (and is tried again), it does not take the Service for missing and scale the server to 0.
func TestQuiesceKeepsTheConversionServerWhenItsServiceCannotBeRead(t *testing.T) {
	ctx := t.Context()
	const ns = "conversion"
	labels := map[string]any{"app": "widget-conversion"}
	deployment := func(image string) *unstructured.Unstructured {
		return object("apps/v1", "Deployment", ns, "widget-operator", map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "manager", "image": image}}},
			},
		})
	}
	live := create(t, deployGVR, deployment("example.com/widget-operator:v2"))
	deleteAtEnd(t, deployGVR, ns, live.GetName())
	svcGVR := schema.GroupVersionResource{Version: "v1", Resource: "services"}
	create(t, svcGVR, object("v1", "Service", ns, "widget-conversion", map[string]any{
		"selector": labels, "ports": []any{map[string]any{"port": int64(443), "targetPort": int64(9443)}},
	}))
	deleteAtEnd(t, svcGVR, ns, "widget-conversion")
	crd, _ := newKind(t, "conversion.example.com", "Widget", func(crd map[string]any) {
		spec := crd["spec"].(map[string]any)
		v1 := spec["versions"].([]any)[0].(map[string]any)
		v2 := (&unstructured.Unstructured{Object: v1}).DeepCopy().Object
		v2["name"], v2["storage"] = "v2", false
		spec["versions"] = []any{v1, v2}
		spec["conversion"] = map[string]any{"strategy": "Webhook", "webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig": map[string]any{"service": map[string]any{
				"namespace": ns, "name": "widget-conversion", "path": "/convert", "port": int64(443),
			}},
		}}
	})
	// The snapshot's operator is the older one: the restore has work to do.
	entries := []snapshot.Entry{
		{Section: snapshot.SectionCRD, Object: crd},
		{Section: snapshot.SectionAssociated, Object: deployment("example.com/widget-operator:v1")},
	}
	replicas := func() int64 {
		u, err := dyn(t).Resource(deployGVR).Namespace(ns).Get(ctx, "widget-operator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		return n
	}

	cl, injected := faultyMember(t, env.Members[0], injectFault{
		match: request(http.MethodGet, is("/api/v1/namespaces/"+ns+"/services/widget-conversion")),
	})
	j := &restore.MemoryJournal{}
	_, err := restore.Run(ctx, cl, restore.Options{
		Header: snapshot.Header{Namespace: ns}, Entries: snapshot.RawEntriesOf(entries), Journal: j, StopAfter: restore.StepQuiesce,
	})
	if err == nil || errors.Is(err, restore.ErrStopped) {
		t.Fatalf("the Service of the conversion webhook could not be read, yet the Quiesce step completed (err %v)", err)
	}
	if !fault.IsTransient(err) {
		t.Errorf("the step must return the fault as a fault (so that it is retried), got %v", err)
	}
	if injected.count() == 0 {
		t.Fatal("no fault was injected: the test no longer reads what it should")
	}
	if len(j.Steps) != 0 {
		t.Errorf("journal %v: no step may be on record", j.Steps)
	}
	if n := replicas(); n != 1 {
		t.Errorf("the conversion webhook's server was scaled to %d: the storage migration could never convert objects", n)
	}

	// Once the Service can be read, the step completes and still keeps the server running.
	rep, err := restore.Run(ctx, testenv.Member(t, env.Members[0]), restore.Options{
		Header: snapshot.Header{Namespace: ns}, Entries: snapshot.RawEntriesOf(entries), Journal: j, StopAfter: restore.StepQuiesce,
	})
	if !errors.Is(err, restore.ErrStopped) {
		t.Fatalf("want the restore stopped after Quiesce, got %v", err)
	}
	if n := replicas(); n != 1 {
		t.Errorf("the conversion webhook's server was scaled to %d by Quiesce", n)
	}
	if !slices.ContainsFunc(rep.Notes, func(s string) bool { return strings.Contains(s, "serves a conversion webhook") }) {
		t.Errorf("notes %q: want the conversion server kept running said", rep.Notes)
	}
}

// Objects created since the snapshot are found by listing: a list or read that fails is
// returned, never taken for "nothing created since" (pruning would be silently incomplete,
// and a restore could call a cluster restored that it never looked at).
func TestCreatedSinceReturnsReadErrors(t *testing.T) {
	ctx := t.Context()
	const ns = "created-since"
	crd, gvr := newKind(t, "created.example.com", "Gadget", nil)
	g1 := create(t, gvr, object("created.example.com/v1", "Gadget", ns, "g1", map[string]any{"size": int64(1)}))
	deleteAtEnd(t, gvr, ns, "g1")
	entries := []snapshot.Entry{{Section: snapshot.SectionCRD, Object: crd}, {Section: snapshot.SectionCR, Object: g1}}
	// Created since the snapshot: a Gadget, and a ConfigMap the release installed now defines.
	create(t, gvr, object("created.example.com/v1", "Gadget", ns, "g2", map[string]any{"size": int64(2)}))
	deleteAtEnd(t, gvr, ns, "g2")
	settings := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "gadget-settings", "namespace": ns},
		"data": map[string]any{"level": "2"},
	}}
	create(t, configmapGVR, settings.DeepCopy())
	deleteAtEnd(t, configmapGVR, ns, "gadget-settings")
	current := []*unstructured.Unstructured{settings}

	listGadgets := injectFault{match: func(r *http.Request) bool {
		return r.Method == http.MethodGet && r.URL.Path == "/apis/created.example.com/v1/gadgets" && metadataOnly(r)
	}}
	readSettings := injectFault{match: request(http.MethodGet, is("/api/v1/namespaces/"+ns+"/configmaps/gadget-settings"))}
	before := func(step string) []string { return slices.Clone(restore.Steps[:slices.Index(restore.Steps, step)]) }
	for _, tc := range []struct {
		name string
		// fault fails the reads; done are the steps on record before the run; current are
		// the manifests of the release installed now.
		fault   injectFault
		done    []string
		current []*unstructured.Unstructured
		prune   bool
		// failed is the step that must fail.
		failed string
	}{
		{"a failed list of the kind fails CreatedSince", listGadgets, before(restore.StepCreatedSince), current, false, restore.StepCreatedSince},
		{"a failed read of the current release's object fails CreatedSince", readSettings, before(restore.StepCreatedSince), current, false, restore.StepCreatedSince},
		{"a failed list of the custom resources fails Associated", listGadgets, before(restore.StepAssociated), current, false, restore.StepAssociated},
		// Only g2 was created since: a restore that cannot list Gadgets must not call the
		// cluster restored (with Prune, g2 is to be deleted).
		{"a fresh pruning restore that cannot list what was created since is no no-op", listGadgets, nil, nil, true, restore.StepQuiesce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, injected := faultyMember(t, env.Members[0], tc.fault)
			j := &restore.MemoryJournal{Steps: slices.Clone(tc.done)}
			rep, err := restore.Run(ctx, cl, restore.Options{
				Header: snapshot.Header{Namespace: ns}, Entries: snapshot.RawEntriesOf(entries), Current: tc.current, Journal: j, Prune: tc.prune,
			})
			if injected.count() == 0 {
				t.Fatal("no fault was injected: the test no longer reads what it should")
			}
			if err == nil {
				t.Fatalf("a read failed, yet the restore succeeded (no-op %t, kept %q)", rep.NoOp, rep.Kept)
			}
			if !fault.IsTransient(err) {
				t.Errorf("the fault must be returned as a fault, got %v", err)
			}
			if slices.Contains(j.Steps, tc.failed) {
				t.Errorf("journal %v: %s must not be on record", j.Steps, tc.failed)
			}
		})
	}

	// What it reports once it can read: both, kept.
	j := &restore.MemoryJournal{Steps: before(restore.StepCreatedSince)}
	rep, err := restore.Run(ctx, testenv.Member(t, env.Members[0]), restore.Options{
		Header: snapshot.Header{Namespace: ns}, Entries: snapshot.RawEntriesOf(entries), Current: current, Journal: j,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ConfigMap " + ns + "/gadget-settings", "Gadget.created.example.com " + ns + "/g2"}
	if !slices.Equal(rep.Kept, want) {
		t.Errorf("kept %q, want %q", rep.Kept, want)
	}
}

// A custom resource whose update is refused as Invalid is a failure, returned with the field
// named: it is never deleted to be created again, even when its validation message says
// "immutable" (a CEL rule's own words). Deleting it would orphan its children and, with its
// operator quiesced, leave it terminating on its finalizer.
func TestCustomResourceRefusedAsInvalidIsNeverRecreated(t *testing.T) {
	ctx := t.Context()
	const ns = "cel-immutable"
	crd, gvr := newKind(t, "cel.example.com", "Lock", func(crd map[string]any) {
		v := crd["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)
		v["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"] = map[string]any{
			"type":                     "object",
			"properties":               map[string]any{"key": map[string]any{"type": "string"}},
			"x-kubernetes-validations": []any{map[string]any{"rule": "self.key == oldSelf.key", "message": "key is immutable"}},
		}
	})
	lock := object("cel.example.com/v1", "Lock", ns, "lock-a", map[string]any{"key": "live"})
	lock.SetFinalizers([]string{"cel.example.com/release-lock"})
	live := create(t, gvr, lock)
	deleteAtEnd(t, gvr, ns, "lock-a")
	snap := live.DeepCopy()
	_ = unstructured.SetNestedField(snap.Object, "from-the-snapshot", "spec", "key")
	entries := []snapshot.Entry{{Section: snapshot.SectionCRD, Object: crd}, {Section: snapshot.SectionCR, Object: snap}}

	rep, err := restore.Run(ctx, testenv.Member(t, env.Members[0]), restore.Options{
		Header: snapshot.Header{Namespace: ns}, Entries: snapshot.RawEntriesOf(entries),
	})
	if err == nil {
		t.Fatal("the update of lock-a is refused: the restore must fail")
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec") || !strings.Contains(err.Error(), "lock-a") {
		t.Errorf("want the refused update returned as Invalid, naming the object and the field, got %v", err)
	}
	if rep != nil && len(rep.Recreated) > 0 {
		t.Errorf("recreated %q: a custom resource is never recreated", rep.Recreated)
	}
	now, err := dyn(t).Resource(gvr).Namespace(ns).Get(ctx, "lock-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.GetDeletionTimestamp() != nil || now.GetUID() != live.GetUID() {
		t.Errorf("lock-a was deleted (deletionTimestamp %v, UID %s, was %s)", now.GetDeletionTimestamp(), now.GetUID(), live.GetUID())
	}
}
