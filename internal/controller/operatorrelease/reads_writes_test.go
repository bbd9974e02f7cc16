//go:build !unit

package operatorrelease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/controller/operatorrelease"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// counts are the calls a reconciler made to the hub.
type counts struct {
	// secretGets counts reads of Secrets (the artifact chunks); statusWrites, status patches
	// and updates.
	secretGets, statusWrites int
}

// countingReconciler is a Reconciler whose clients count their calls into n.
func countingReconciler(t *testing.T, n *counts) *operatorrelease.Reconciler {
	t.Helper()
	base, err := client.NewWithWatch(env.Hub.RESTConfig(), client.Options{Scheme: testenv.HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				n.secretGets++
			}
			return cl.Get(ctx, key, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			n.statusWrites++
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n.statusWrites++
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	return &operatorrelease.Reconciler{Client: c, Reader: c}
}

// An uploaded release is made Ready reading its chunks once and writing its status once; a
// release that fails the same way again writes no status; a retried fetch writes its status
// once.
func TestReconcileReadsChunksOnceAndWritesStatusOnce(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	objs, err := sample(t, "1.0.0").Render(installNS)
	if err != nil {
		t.Fatal(err)
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := artifact.Put(t.Context(), c, ns, release.ArtifactKind, canonical)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(name, digest string) *v1alpha1.OperatorRelease {
		rel := newRelease(ns, name, "1.0.0", v1alpha1.ReleaseSource{})
		rel.Spec.Source, rel.Spec.InstallNamespace = nil, ""
		rel.Spec.Format, rel.Spec.Digest = v1alpha1.FormatManifests, digest
		if err := c.Create(t.Context(), rel); err != nil {
			t.Fatal(err)
		}
		return rel
	}
	reconcile := func(rel *v1alpha1.OperatorRelease) counts {
		t.Helper()
		var n counts
		if _, err := countingReconciler(t, &n).Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)}); err != nil {
			t.Fatalf("reconciling %s: %v", rel.Name, err)
		}
		return n
	}

	rel := upload("uploaded", ref.Digest)
	if n := reconcile(rel); n.secretGets != ref.Chunks || n.statusWrites != 1 {
		t.Errorf("an uploaded release: %d Secret reads, %d status writes; want %d (each chunk once) and 1", n.secretGets, n.statusWrites, ref.Chunks)
	}
	if got := waitFor(t, c, rel, 10*time.Second, "it is Ready", isReady); got.Status.Digest != ref.Digest || got.Status.Objects == 0 {
		t.Errorf("status %+v: want Ready with the digest and counts", got.Status)
	}

	missing := upload("missing", "sha256:"+strings.Repeat("0", 64))
	if n := reconcile(missing); n.statusWrites != 1 {
		t.Errorf("an uploaded release without its artifact: %d status writes, want 1", n.statusWrites)
	}
	if n := reconcile(missing); n.statusWrites != 0 {
		t.Errorf("the same release again: %d status writes, want none (nothing changed)", n.statusWrites)
	}

	// A source release whose credentials Secret is missing fails, and is retried.
	src := newRelease(ns, "fetched", "1.0.0", v1alpha1.ReleaseSource{
		OCI:       &v1alpha1.OCISource{Repository: "registry.invalid/bundles/mysql-operator", Digest: "sha256:" + strings.Repeat("1", 64)},
		SecretRef: &v1alpha1.LocalObjectReference{Name: "not-there"},
	})
	if err := c.Create(t.Context(), src); err != nil {
		t.Fatal(err)
	}
	reconcile(src) // the first attempt says it is fetching, then fails
	got := waitFor(t, c, src, 10*time.Second, "it stalls", isStalled)
	if r := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); r == nil || r.Reason != v1alpha1.ReasonCredentialsInvalid {
		t.Fatalf("Ready %+v, want CredentialsInvalid", r)
	}
	if n := reconcile(src); n.statusWrites > 1 {
		t.Errorf("a retry: %d status writes, want at most 1", n.statusWrites)
	}
}
