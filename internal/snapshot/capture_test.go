//go:build !unit

package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1}, &env)
}

var fixtureNamespaces = []string{"shop", "billing", "analytics"}

var (
	fixtureOnce sync.Once
	fixtureErr  error
)

// mysqlFixture installs the MySQLCluster CRD in member1 with 200 CRs across 3 namespaces,
// with status, and their StatefulSets, Services, ConfigMaps and Secrets.
func mysqlFixture(t *testing.T) {
	t.Helper()
	fixtureOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := apply.Objects(ctx, testenv.Member(t, env.Members[0]), []*unstructured.Unstructured{testfixture.MySQLCRD()}, apply.Options{}); err != nil {
			fixtureErr = err
			return
		}
		fixtureErr = testfixture.Populate(ctx, env.Members[0].RESTConfig(), testfixture.Options{
			Namespaces: fixtureNamespaces, Count: 200, Children: true,
		})
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
}

func captureOpts() snapshot.Options {
	return snapshot.Options{
		Operator: "mysql-operator", Release: "mysql-v1", Version: "1.0.0", Namespace: "mysql-system",
		Manifests: []*unstructured.Unstructured{testfixture.MySQLCRD()}, PageSize: 37,
	}
}

func capture(t *testing.T) ([]byte, *snapshot.Result) {
	t.Helper()
	var buf bytes.Buffer
	res, err := snapshot.Capture(t.Context(), testenv.Member(t, env.Members[0]), captureOpts(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), res
}

func TestCaptureHoldsExactlyTheOperatorState(t *testing.T) {
	mysqlFixture(t)
	ctx := t.Context()
	payload, res := capture(t)
	if res.Counts.CRDs != 1 || res.Counts.CustomResources != 200 || res.Counts.Associated != 800 {
		t.Fatalf("counts: %+v, want 1 CRD, 200 CRs, 800 associated", res.Counts)
	}
	if res.Header.ClusterID == "" || res.ServerVersion == "" {
		t.Errorf("metadata: %+v %q", res.Header, res.ServerVersion)
	}
	_, entries, err := snapshot.ReadAll(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}

	// Identity: the captured UIDs are exactly the live ones, by section.
	dyn, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]string{}
	list := func(gvr schema.GroupVersionResource, section string, filter func(unstructured.Unstructured) bool) {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			if filter(it) {
				want[it.GetUID()] = section
			}
		}
	}
	inFixture := func(u unstructured.Unstructured) bool {
		for _, ns := range fixtureNamespaces {
			if u.GetNamespace() == ns && len(u.GetOwnerReferences()) > 0 {
				return true
			}
		}
		return false
	}
	all := func(unstructured.Unstructured) bool { return true }
	list(testfixture.MySQLGVR, snapshot.SectionCR, all)
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Version: "v1", Resource: "services"},
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"},
	} {
		list(gvr, snapshot.SectionAssociated, inFixture)
	}
	got := map[types.UID]string{}
	statuses := 0
	for _, e := range entries {
		if e.Section == snapshot.SectionCRD {
			stored, _, _ := unstructured.NestedStringSlice(e.Object.Object, "status", "storedVersions")
			if len(stored) != 1 || stored[0] != "v1alpha1" {
				t.Errorf("the CRD must be captured with status.storedVersions, got %v", stored)
			}
			continue
		}
		got[e.Object.GetUID()] = e.Section
		if e.Section == snapshot.SectionCR {
			if phase, _, _ := unstructured.NestedString(e.Object.Object, "status", "phase"); phase == "Ready" {
				statuses++
			}
			if e.Object.GetResourceVersion() != "" || e.Object.GetManagedFields() != nil || e.Object.GetCreationTimestamp() != (metav1.Time{}) {
				t.Fatalf("server-populated fields must be stripped: %v", e.Object.GetName())
			}
		}
	}
	if statuses != 200 {
		t.Errorf("every CR must be captured with its status, %d were", statuses)
	}
	if len(got) != len(want) {
		t.Errorf("captured %d objects, want %d", len(got), len(want))
	}
	for uid, section := range want {
		if got[uid] != section {
			t.Errorf("object %s: captured in section %q, want %q", uid, got[uid], section)
		}
	}
}

func TestCaptureIsDeterministicAndDiffNamesTheChange(t *testing.T) {
	mysqlFixture(t)
	ctx := t.Context()
	first, _ := capture(t)
	second, _ := capture(t)
	if !bytes.Equal(first, second) {
		t.Fatalf("two captures of an unchanged cluster must be byte-identical")
	}
	if snapshot.ChecksumOf(first) != snapshot.ChecksumOf(second) {
		t.Fatal("checksums differ")
	}

	dyn, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cr, err := dyn.Resource(testfixture.MySQLGVR).Namespace("billing").Get(ctx, "db-00001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, _, _ := unstructured.NestedInt64(cr.Object, "spec", "replicas")
	_ = unstructured.SetNestedField(cr.Object, old+1, "spec", "replicas")
	if _, err := dyn.Resource(testfixture.MySQLGVR).Namespace("billing").Update(ctx, cr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cr, err := dyn.Resource(testfixture.MySQLGVR).Namespace("billing").Get(context.Background(), "db-00001", metav1.GetOptions{})
		if err == nil {
			_ = unstructured.SetNestedField(cr.Object, old, "spec", "replicas")
			_, _ = dyn.Resource(testfixture.MySQLGVR).Namespace("billing").Update(context.Background(), cr, metav1.UpdateOptions{})
		}
	})
	third, _ := capture(t)
	if snapshot.ChecksumOf(third) == snapshot.ChecksumOf(first) {
		t.Fatal("changing a CR must change the checksum")
	}
	_, a, err := snapshot.ReadAll(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := snapshot.ReadAll(bytes.NewReader(third))
	if err != nil {
		t.Fatal(err)
	}
	changes := snapshot.Diff(a, b)
	if len(changes) != 1 {
		t.Fatalf("diff must name exactly one object, got %+v", changes)
	}
	ch := changes[0]
	if ch.Object != "MySQLCluster.database.example.com billing/db-00001" || ch.Type != snapshot.Changed {
		t.Fatalf("diff names %s (%s)", ch.Object, ch.Type)
	}
	if len(ch.Fields) != 1 || ch.Fields[0].Path != "spec.replicas" {
		t.Fatalf("diff must name exactly spec.replicas, got %+v", ch.Fields)
	}
}

// kindCRD returns a namespaced CRD of group with versions v1 and v2. A
// broken one stores v1 and does not serve it, so a LIST of its storage version fails (404).
func kindCRD(group, kind string, broken bool) *unstructured.Unstructured {
	plural := strings.ToLower(kind) + "s"
	schema := map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
			"versions": []any{
				map[string]any{"name": "v1", "served": !broken, "storage": true, "schema": schema},
				map[string]any{"name": "v2", "served": true, "storage": false, "schema": schema},
			},
		},
	}}
}

// raceGroups numbers the API groups of TestCaptureStopsEveryListerWhenTheFirstKindFails's
// CRDs, one per run, so that -count creates new CRDs instead of waiting for the last run's
// to be finalized.
var raceGroups atomic.Int32

// A LIST that fails on the first kind ends the capture while the listers of the other kinds
// are still being launched: the capture must return only once every lister it launched has
// stopped (run with -race: launching one while the capture already waits for them is a
// WaitGroup misuse the race detector reports).
func TestCaptureStopsEveryListerWhenTheFirstKindFails(t *testing.T) {
	ctx := t.Context()
	cl := testenv.Member(t, env.Members[0])
	group := fmt.Sprintf("race%d.example.com", raceGroups.Add(1))
	crds := []*unstructured.Unstructured{kindCRD(group, "Abroken", true)}
	for i := range 7 {
		crds = append(crds, kindCRD(group, fmt.Sprintf("Kind%d", i), false))
	}
	if _, err := apply.Objects(ctx, cl, crds, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Deleted, not waited for: the API server finalizes them in the background, and a busy
		// one took over three minutes to finalize a CRD created moments before (CI failed in this
		// wait twice). Nothing else uses their group.
		for _, crd := range crds {
			if err := cl.Client.Delete(context.Background(), crd); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting the test CRD %s: %v", crd.GetName(), err)
			}
		}
	})
	opts := snapshot.Options{Operator: "race", Manifests: crds, Parallelism: 1}
	for range 30 {
		_, err := snapshot.Capture(ctx, cl, opts, io.Discard)
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "listing abrokens."+group) {
			t.Fatalf("the capture must fail with the first kind's LIST error, got %v", err)
		}
		if n := runningListers(); n > 0 {
			t.Fatalf("%d listers still run after the capture returned", n)
		}
	}
}

// runningListers counts the goroutines that run a lister of a capture.
func runningListers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return bytes.Count(buf, []byte("snapshot.(*capturer).orderedLists"))
}

// The children of namespaced CRs live in their namespaces: a capture reads the owned kinds
// only in the namespaces that hold CRs, and not at all when there is no CR, so it does not
// read every Secret of the cluster.
func TestCaptureReadsOwnedKindsOnlyWhereCRsAre(t *testing.T) {
	mysqlFixture(t)
	cl, reads := testenv.RecordingMember(t, env.Members[0])
	res, err := snapshot.Capture(t.Context(), cl, captureOpts(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.CustomResources != 200 || res.Counts.Associated != 800 {
		t.Fatalf("counts: %+v, want 200 CRs and 800 associated", res.Counts)
	}
	full := reads.Paths() // full (not metadata-only) reads
	for _, p := range full {
		if p == "/api/v1/secrets" || p == "/api/v1/configmaps" || p == "/apis/apps/v1/deployments" {
			t.Errorf("the capture read %s in every namespace; want only the CRs' namespaces %v", p, fixtureNamespaces)
		}
	}
	for _, ns := range fixtureNamespaces {
		if want := "/api/v1/namespaces/" + ns + "/secrets"; !slices.Contains(full, want) {
			t.Errorf("the capture never read %s: %v", want, full)
		}
	}
	reads.Reset()

	// Without a CR, no child: the owned kinds are not read at all.
	opts := captureOpts()
	opts.Manifests = []*unstructured.Unstructured{kindCRD("unused.example.com", "Unused", false)}
	if _, err := apply.Objects(t.Context(), cl, opts.Manifests, apply.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Client.Delete(context.Background(), opts.Manifests[0]) })
	res, err = snapshot.Capture(t.Context(), cl, opts, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range reads.Paths() {
		if strings.HasSuffix(p, "/secrets") || strings.HasSuffix(p, "/configmaps") || strings.HasSuffix(p, "/statefulsets") {
			t.Errorf("a capture without CRs read %s", p)
		}
	}
	if res.Counts.CRDs != 1 || res.Counts.CustomResources != 0 || res.Counts.Associated != 0 {
		t.Errorf("counts: %+v, want the CRD alone", res.Counts)
	}
}
