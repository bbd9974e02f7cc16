//go:build !unit

package restore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// env runs kube-controller-manager, so garbage collection is real.
var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1, Workloads: true}, &env)
}

var namespaces = []string{"orders", "users"}

const operatorDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: mysql-operator
  namespace: mysql-system
spec:
  replicas: 1
  selector: {matchLabels: {app: mysql-operator}}
  template:
    metadata: {labels: {app: mysql-operator}}
    spec:
      containers:
      - name: manager
        image: example.com/mysql-operator:v1
`

func manifests() []*unstructured.Unstructured {
	dep := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(operatorDeployment), &dep.Object); err != nil {
		panic(err)
	}
	return []*unstructured.Unstructured{testfixture.MySQLCRD(), dep}
}

func dyn(t *testing.T) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(env.Members[0].RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// setup installs the release (CRD + operator Deployment) and 30 MySQLClusters with children,
// and removes them all when the test ends: the package's tests share one member, and each
// starts from a member without the fixture (go test -count=2 runs the test again on it).
func setup(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	t.Cleanup(func() { removeFixture(t) })
	if _, err := apply.Objects(ctx, testenv.Member(t, env.Members[0]), manifests(), apply.Options{Namespace: "mysql-system"}); err != nil {
		t.Fatal(err)
	}
	if err := testfixture.Populate(ctx, env.Members[0].RESTConfig(), testfixture.Options{Namespaces: namespaces, Count: 30, Children: true}); err != nil {
		t.Fatal(err)
	}
	// db-00000 was last applied with kubectl: the restore brings its record of that back too.
	setLastApplied(t, "orders", "db-00000", lastApplied(0))
}

// removeFixture deletes what setup and the subtests created (the namespaces with everything
// in them, the CRD with its custom resources, the operator Deployment) and waits until it is
// gone: a namespace still terminating refuses new objects.
func removeFixture(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d := dyn(t)
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	var gone []func() error
	del := func(ri dynamic.ResourceInterface, name string) {
		if err := ri.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing the fixture: deleting %s: %v", name, err)
		}
		gone = append(gone, func() error {
			_, err := ri.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				return fmt.Errorf("%s is still there", name)
			}
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}
	for _, ns := range namespaces {
		del(d.Resource(nsGVR), ns)
	}
	del(d.Resource(crdGVR), "mysqlclusters.database.example.com")
	del(d.Resource(deployGVR).Namespace("mysql-system"), "mysql-operator")
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		for _, f := range gone {
			if last = f(); last != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("removing the fixture: %v (%v)", err, last)
	}
}

const annLastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func lastApplied(round int) string {
	return fmt.Sprintf(`{"apiVersion":"database.example.com/v1alpha1","kind":"MySQLCluster","metadata":{"name":"db-00000","namespace":"orders"},"spec":{"replicas":%d}}`, round+1)
}

func setLastApplied(t *testing.T, ns, name, v string) {
	t.Helper()
	d := dyn(t)
	u, err := d.Resource(testfixture.MySQLGVR).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[annLastApplied] = v
	u.SetAnnotations(ann)
	if _, err := d.Resource(testfixture.MySQLGVR).Namespace(ns).Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func take(t *testing.T) (snapshot.Header, []snapshot.Entry) {
	t.Helper()
	var buf bytes.Buffer
	_, err := snapshot.Capture(t.Context(), testenv.Member(t, env.Members[0]), snapshot.Options{
		Operator: "mysql-operator", Release: "mysql-v1", Version: "1.0.0", Namespace: "mysql-system", Manifests: manifests(),
	}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	h, entries, err := snapshot.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return h, entries
}

var (
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	v1beta1GVR   = schema.GroupVersionResource{Group: "database.example.com", Version: "v1beta1", Resource: "mysqlclusters"}
	configmapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	deployGVR    = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// mutate changes the cluster in every way the restore must undo.
func mutate(t *testing.T, round int) {
	t.Helper()
	ctx := t.Context()
	d := dyn(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	cr := func(ns, name string) *unstructured.Unstructured {
		u, err := d.Resource(testfixture.MySQLGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		must(err)
		return u
	}
	// Edit CR specs and statuses (db-00000 as kubectl apply would: its last-applied record too).
	u := cr("orders", "db-00000")
	_ = unstructured.SetNestedField(u.Object, int64(9), "spec", "replicas")
	u.SetLabels(map[string]string{"edited": "yes"})
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[annLastApplied] = lastApplied(round + 8)
	u.SetAnnotations(ann)
	_, err := d.Resource(testfixture.MySQLGVR).Namespace("orders").Update(ctx, u, metav1.UpdateOptions{})
	must(err)
	u = cr("users", "db-00001")
	_ = unstructured.SetNestedField(u.Object, "Failed", "status", "phase")
	_, err = d.Resource(testfixture.MySQLGVR).Namespace("users").UpdateStatus(ctx, u, metav1.UpdateOptions{})
	must(err)
	// Delete some CRs (the garbage collector deletes their children) and create others.
	for _, n := range []string{"db-00002", "db-00004"} {
		must(d.Resource(testfixture.MySQLGVR).Namespace("orders").Delete(ctx, n, metav1.DeleteOptions{}))
	}
	extra := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "database.example.com/v1alpha1", "kind": "MySQLCluster",
		"metadata": map[string]any{"name": fmt.Sprintf("new-since-%d", round), "namespace": "users"},
		"spec":     map[string]any{"replicas": int64(2), "version": "8.4"},
	}}
	_, err = d.Resource(testfixture.MySQLGVR).Namespace("users").Create(ctx, extra, metav1.CreateOptions{})
	must(err)
	// Delete an owned ConfigMap and edit a Secret.
	must(d.Resource(configmapGVR).Namespace("users").Delete(ctx, "db-00003-config", metav1.DeleteOptions{}))
	s, err := d.Resource(secretGVR).Namespace("orders").Get(ctx, "db-00006-credentials", metav1.GetOptions{})
	must(err)
	_ = unstructured.SetNestedField(s.Object, "Y2hhbmdlZA==", "data", "password")
	_ = unstructured.SetNestedField(s.Object, "YWRkZWQ=", "data", "added")
	_, err = d.Resource(secretGVR).Namespace("orders").Update(ctx, s, metav1.UpdateOptions{})
	must(err)
	// The newer operator: a new image and more replicas.
	dep, err := d.Resource(deployGVR).Namespace("mysql-system").Get(ctx, "mysql-operator", metav1.GetOptions{})
	must(err)
	_ = unstructured.SetNestedField(dep.Object, int64(2), "spec", "replicas")
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["image"] = "example.com/mysql-operator:v2"
	_ = unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers")
	_, err = d.Resource(deployGVR).Namespace("mysql-system").Update(ctx, dep, metav1.UpdateOptions{})
	must(err)

	// A newer CRD schema: v1beta1 with a defaulted new field becomes the storage version, and
	// objects are written (so stored) at it.
	crd, err := d.Resource(crdGVR).Get(ctx, "mysqlclusters.database.example.com", metav1.GetOptions{})
	must(err)
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	v1a := versions[0].(map[string]any)
	v1a["storage"] = false
	v1b := (&unstructured.Unstructured{Object: v1a}).DeepCopy().Object
	v1b["name"], v1b["storage"] = "v1beta1", true
	specProps := v1b["schema"].(map[string]any)["openAPIV3Schema"].(map[string]any)["properties"].(map[string]any)["spec"].(map[string]any)["properties"].(map[string]any)
	specProps["backup"] = map[string]any{"type": "object", "default": map[string]any{}, "properties": map[string]any{
		"schedule": map[string]any{"type": "string", "default": "0 3 * * *"},
	}}
	_ = unstructured.SetNestedSlice(crd.Object, []any{v1a, v1b}, "spec", "versions")
	_, err = d.Resource(crdGVR).Update(ctx, crd, metav1.UpdateOptions{})
	must(err)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := d.Resource(v1beta1GVR).Namespace("orders").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(l.Items) > 0, nil
	})
	must(err)
	for _, ns := range namespaces {
		l, err := d.Resource(v1beta1GVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		must(err)
		for i := range l.Items {
			it := &l.Items[i]
			_ = unstructured.SetNestedField(it.Object, "0 1 * * *", "spec", "backup", "schedule")
			if _, err := d.Resource(v1beta1GVR).Namespace(ns).Update(ctx, it, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("writing %s at v1beta1: %v", it.GetName(), err)
			}
		}
	}
	crd, err = d.Resource(crdGVR).Get(ctx, "mysqlclusters.database.example.com", metav1.GetOptions{})
	must(err)
	if sv, _, _ := unstructured.NestedStringSlice(crd.Object, "status", "storedVersions"); len(sv) != 2 {
		t.Fatalf("the mutation should leave objects stored at two versions, storedVersions=%v", sv)
	}
}

// assertRestored checks every object of the snapshot against the live cluster in normalized
// form (status included), ownerReferences pointing at live owners, and storedVersions.
func assertRestored(t *testing.T, entries []snapshot.Entry) {
	t.Helper()
	ctx := t.Context()
	d := dyn(t)
	live := map[string]*unstructured.Unstructured{}
	uidByKey := map[string]types.UID{}
	for _, e := range entries {
		gvk := e.Object.GroupVersionKind()
		gvr := resourceOf(gvk)
		var ri dynamic.ResourceInterface = d.Resource(gvr)
		if e.Object.GetNamespace() != "" {
			ri = d.Resource(gvr).Namespace(e.Object.GetNamespace())
		}
		l, err := ri.Get(ctx, e.Object.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s/%s: %v", gvk.Kind, e.Object.GetNamespace(), e.Object.GetName(), err)
			continue
		}
		key := gvk.Kind + "/" + e.Object.GetNamespace() + "/" + e.Object.GetName()
		live[key] = l
		uidByKey[key] = l.GetUID()
		if !restore.Equal(e.Object, l) {
			t.Errorf("%s differs from the snapshot:\n snapshot %v\n live     %v", key, restore.Normalize(e.Object).Object, restore.Normalize(l).Object)
		}
		if e.Section == snapshot.SectionCRD {
			want, _, _ := unstructured.NestedStringSlice(e.Object.Object, "status", "storedVersions")
			got, _, _ := unstructured.NestedStringSlice(l.Object, "status", "storedVersions")
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("CRD storedVersions %v, snapshot %v", got, want)
			}
		}
	}
	for key, l := range live {
		for _, ref := range l.GetOwnerReferences() {
			owner := ref.Kind + "/" + l.GetNamespace() + "/" + ref.Name
			if uid, ok := uidByKey[owner]; ok && uid != ref.UID {
				t.Errorf("%s: ownerReference to %s has UID %s, the live owner's is %s", key, owner, ref.UID, uid)
			}
		}
	}
}

func resourceOf(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	switch gvk.Kind {
	case "CustomResourceDefinition":
		return crdGVR
	case "MySQLCluster":
		return testfixture.MySQLGVR
	case "Deployment":
		return deployGVR
	case "StatefulSet":
		return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	case "Service":
		return schema.GroupVersionResource{Version: "v1", Resource: "services"}
	case "ConfigMap":
		return configmapGVR
	case "Secret":
		return secretGVR
	}
	panic("unknown kind " + gvk.Kind)
}

func run(t *testing.T, h snapshot.Header, entries []snapshot.Entry, j restore.Journal, stopAfter string) (*restore.Report, error) {
	t.Helper()
	return restore.Run(t.Context(), testenv.Member(t, env.Members[0]), restore.Options{
		Header: h, Entries: snapshot.RawEntriesOf(entries), Current: manifests(), Journal: j, StopAfter: stopAfter,
	})
}

func TestRestore(t *testing.T) {
	setup(t)
	h, entries := take(t)

	t.Run("full scenario", func(t *testing.T) {
		mutate(t, 0)
		rep, err := run(t, h, entries, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		assertRestored(t, entries)
		tot := rep.Totals()
		if rep.NoOp || tot.Created == 0 || tot.Restored == 0 {
			t.Fatalf("report %+v", tot)
		}
		live, err := dyn(t).Resource(testfixture.MySQLGVR).Namespace("orders").Get(t.Context(), "db-00000", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := live.GetAnnotations()[annLastApplied]; got != lastApplied(0) {
			t.Errorf("kubectl's last-applied-configuration of db-00000 after the restore: %q, want the snapshot's %q", got, lastApplied(0))
		}
		mc := rep.Kinds["MySQLCluster.database.example.com"]
		if mc == nil || mc.Created != 2 || mc.Kept != 1 {
			t.Errorf("MySQLCluster report %+v: want the 2 deleted ones created and the new one kept", mc)
		}
		if len(rep.Kept) != 1 || rep.Kept[0] != "MySQLCluster.database.example.com users/new-since-0" {
			t.Errorf("kept: %v", rep.Kept)
		}
		t.Logf("report: %+v, steps %+v, notes %v", tot, rep.Steps, rep.Notes)

		// Twice: the second run writes nothing and reports everything unchanged.
		rep2, err := run(t, h, entries, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		tot2 := rep2.Totals()
		if !rep2.NoOp || tot2.Unchanged != len(entries) || tot2.Restored+tot2.Created+tot2.Recreated != 0 {
			t.Fatalf("a second restore must be a no-op reporting all %d objects unchanged, got %+v (noop %v)", len(entries), tot2, rep2.NoOp)
		}
		assertRestored(t, entries)

		// The garbage collector deletes no restored child in the next 30 s.
		children := 0
		for _, e := range entries {
			if len(e.Object.GetOwnerReferences()) > 0 {
				children++
			}
		}
		err = wait.PollUntilContextTimeout(t.Context(), time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n := 0
			for _, gvr := range []schema.GroupVersionResource{configmapGVR, secretGVR, resourceOf(schema.GroupVersionKind{Kind: "Service"}), resourceOf(schema.GroupVersionKind{Kind: "StatefulSet"})} {
				for _, ns := range namespaces {
					l, err := dyn(t).Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
					if err != nil {
						return false, nil // the deadline that ends the 30 s watch can cut a List short
					}
					for _, it := range l.Items {
						if len(it.GetOwnerReferences()) > 0 {
							n++
						}
					}
				}
			}
			if n < children {
				return false, fmt.Errorf("only %d owned objects remain, the snapshot has %d: the garbage collector deleted restored children", n, children)
			}
			return false, nil
		})
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !wait.Interrupted(err) {
			t.Fatal(err)
		}
	})

	for _, step := range restore.Steps {
		t.Run("resume after "+step, func(t *testing.T) {
			mutate(t, 1+len(step))
			j := &restore.MemoryJournal{}
			if _, err := run(t, h, entries, j, step); !errors.Is(err, restore.ErrStopped) {
				t.Fatalf("want the restore stopped after %s, got %v", step, err)
			}
			resumed, err := run(t, h, entries, j, "")
			if err != nil {
				t.Fatal(err)
			}
			assertRestored(t, entries)
			// What was created since the snapshot is reported whichever run did the step.
			if kept := fmt.Sprintf("MySQLCluster.database.example.com users/new-since-%d", 1+len(step)); !slices.Contains(resumed.Kept, kept) {
				t.Errorf("the resumed restore reports kept %q, want %s among them", resumed.Kept, kept)
			}
			// The same final state as an uninterrupted run: a fresh restore changes nothing.
			rep, err := run(t, h, entries, nil, "")
			if err != nil {
				t.Fatal(err)
			}
			if !rep.NoOp {
				t.Fatalf("after a resumed restore a new restore must be a no-op, got %+v", rep.Totals())
			}
		})
	}

	// A fleet's members sit behind load balancers and restart their API servers: requests
	// are reset, answers are lost after the server did the work, LIST pages break off half
	// way, and reads meet a busy server. The restore rides it out in place.
	t.Run("rides out faults", func(t *testing.T) {
		mutate(t, 300)
		write := func(methods ...string) func(*http.Request) bool {
			return func(r *http.Request) bool { return slices.Contains(methods, r.Method) }
		}
		paged := func(r *http.Request) bool {
			return r.Method == http.MethodGet && r.URL.Query().Has("limit") && !metadataOnly(r)
		}
		otherRead := func(r *http.Request) bool { return r.Method == http.MethodGet && !paged(r) }
		cl, injected := faultyMember(t, env.Members[0],
			injectFault{match: write(http.MethodPost, http.MethodDelete, http.MethodPatch), hit: everyNth(3), reset: true},
			injectFault{match: write(http.MethodPut), hit: everyNth(6), lost: true},
			injectFault{match: paged, hit: everyNth(3), cut: 1500},
			injectFault{match: otherRead, hit: everyNth(9), status: http.StatusInternalServerError},
		)
		if _, err := restore.Run(t.Context(), cl, restore.Options{Header: h, Entries: snapshot.RawEntriesOf(entries), Current: manifests()}); err != nil {
			t.Fatalf("after %d injected faults: %v", injected.count(), err)
		}
		if injected.count() < 10 {
			t.Fatalf("only %d faults injected: the test no longer exercises what it should", injected.count())
		}
		t.Logf("%d faults injected", injected.count())
		assertRestored(t, entries)
		if rep, err := run(t, h, entries, nil, ""); err != nil || !rep.NoOp {
			t.Fatalf("after the restore a new one must be a no-op: %v, %+v", err, rep.Totals())
		}
	})

	// A step that fails half way (its writes refused from some point on, as when a member
	// goes away) is run again from its start by the next run, which ends exactly restored.
	for _, cut := range []struct {
		step string
		// match selects the writes that fail after the first n of them.
		match func(*http.Request) bool
		n     int
	}{
		{restore.StepCRDs, request(http.MethodPut, under("/apis/database.example.com/v1alpha1/namespaces/")), 8},
		{restore.StepCRs, func(r *http.Request) bool {
			return (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.HasPrefix(r.URL.Path, "/apis/database.example.com/")
		}, 1},
		{restore.StepAssociated, func(r *http.Request) bool {
			return (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/")
		}, 2},
	} {
		t.Run("a step cut half way resumes: "+cut.step, func(t *testing.T) {
			mutate(t, 400+len(cut.step))
			j := &restore.MemoryJournal{}
			if i := slices.Index(restore.Steps, cut.step); i > 0 {
				if _, err := run(t, h, entries, j, restore.Steps[i-1]); !errors.Is(err, restore.ErrStopped) {
					t.Fatalf("want the restore stopped before %s, got %v", cut.step, err)
				}
			}
			cl, injected := faultyMember(t, env.Members[0], injectFault{match: cut.match, hit: after(cut.n)})
			_, err := restore.Run(t.Context(), cl, restore.Options{Header: h, Entries: snapshot.RawEntriesOf(entries), Current: manifests(), Journal: j})
			if err == nil || injected.count() == 0 {
				t.Fatalf("the writes of %s were cut (%d faults), yet the restore returned %v", cut.step, injected.count(), err)
			}
			if slices.Contains(j.Steps, cut.step) {
				t.Fatalf("journal %v: %s failed and must not be on record", j.Steps, cut.step)
			}
			if _, err := run(t, h, entries, j, ""); err != nil {
				t.Fatal(err)
			}
			assertRestored(t, entries)
			if rep, err := run(t, h, entries, nil, ""); err != nil || !rep.NoOp {
				t.Fatalf("after the resumed restore a new one must be a no-op: %v, %+v", err, rep.Totals())
			}
		})
	}

	t.Run("prune, and a recreate only where a field is immutable", func(t *testing.T) {
		mutate(t, 100)
		// db-00001's StatefulSet comes back with another selector, its headless Service with a
		// cluster IP: both fields can only be set on create. The restore recreates these two
		// and updates everything else.
		sts := replaceChild(t, entries, "StatefulSet", "db-00001", func(u *unstructured.Unstructured) {
			sel := map[string]any{"app": "replaced"}
			_ = unstructured.SetNestedMap(u.Object, sel, "spec", "selector", "matchLabels")
			_ = unstructured.SetNestedMap(u.Object, sel, "spec", "template", "metadata", "labels")
		})
		svc := replaceChild(t, entries, "Service", "db-00001", func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "spec", "clusterIP")
			unstructured.RemoveNestedField(u.Object, "spec", "clusterIPs")
		})
		if ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP"); ip == "" || ip == "None" {
			t.Fatalf("the replaced Service should have an allocated cluster IP, has %q", ip)
		}
		rep, err := restore.Run(t.Context(), testenv.Member(t, env.Members[0]), restore.Options{
			Header: h, Entries: snapshot.RawEntriesOf(entries), Current: manifests(), Prune: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		assertRestored(t, entries)

		if tot := rep.Totals(); tot.Recreated != 2 || len(rep.Recreated) != 2 {
			t.Errorf("want exactly the StatefulSet and the Service recreated, got %d: %q", tot.Recreated, rep.Recreated)
		}
		for _, u := range []*unstructured.Unstructured{sts, svc} {
			prefix := u.GroupVersionKind().GroupKind().String() + " " + u.GetNamespace() + "/" + u.GetName() + " ("
			found := false
			for _, r := range rep.Recreated {
				found = found || strings.HasPrefix(r, prefix)
			}
			if !found {
				t.Errorf("recreated %q: want %s... with the refused field", rep.Recreated, prefix)
			}
		}

		// Every MySQLCluster created since the snapshot (by this and the earlier subtests) is
		// pruned and reported, and none is kept.
		if len(rep.Kept) != 0 {
			t.Errorf("with Prune nothing is kept, got %v", rep.Kept)
		}
		if !slices.Contains(rep.Pruned, "MySQLCluster.database.example.com users/new-since-100") {
			t.Errorf("pruned %v: want users/new-since-100 among them", rep.Pruned)
		}
		l, err := dyn(t).Resource(testfixture.MySQLGVR).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range l.Items {
			if strings.HasPrefix(it.GetName(), "new-since-") && it.GetDeletionTimestamp() == nil {
				t.Errorf("%s/%s was created after the snapshot and survived a pruning restore", it.GetNamespace(), it.GetName())
			}
		}
	})

	// Only the objects a snapshot holds are compared, so a kind is read in the namespaces its
	// snapshot objects live in, not in the whole cluster (a Secret elsewhere is never read).
	t.Run("reads a kind only in the namespaces the snapshot holds", func(t *testing.T) {
		mutate(t, 200)
		cl, reads := testenv.RecordingMember(t, env.Members[0])
		if _, err := restore.Run(t.Context(), cl, restore.Options{Header: h, Entries: snapshot.RawEntriesOf(entries), Current: manifests()}); err != nil {
			t.Fatal(err)
		}
		assertRestored(t, entries)
		full := reads.Paths() // full (not metadata-only) reads
		for _, p := range full {
			if p == "/api/v1/secrets" || p == "/api/v1/configmaps" {
				t.Errorf("the restore read %s in every namespace; want only the snapshot's namespaces %v", p, namespaces)
			}
		}
		for _, ns := range namespaces {
			if want := "/api/v1/namespaces/" + ns + "/secrets"; !slices.Contains(full, want) {
				t.Errorf("the restore never read %s: %v", want, full)
			}
		}
	})

	// The snapshot is read to its end (its checksum verified) before anything is read from or
	// written to the cluster: a snapshot that fails midway restores nothing.
	t.Run("a snapshot that cannot be read to its end touches nothing", func(t *testing.T) {
		broken := errors.New("payload checksum mismatch")
		half := func(yield func(snapshot.RawEntry, error) bool) {
			for e, err := range snapshot.RawEntriesOf(entries[:len(entries)/2]) {
				if !yield(e, err) {
					return
				}
			}
			yield(snapshot.RawEntry{}, broken)
		}
		cl, reads := testenv.RecordingMember(t, env.Members[0])
		_, err := restore.Run(t.Context(), cl, restore.Options{Header: h, Entries: half, Current: manifests()})
		if !errors.Is(err, restore.ErrSnapshotUnreadable) || !errors.Is(err, broken) {
			t.Fatalf("got %v, want ErrSnapshotUnreadable wrapping the read error", err)
		}
		if p := reads.Paths(); len(p) > 0 {
			t.Errorf("the restore read %v from the cluster before the snapshot was read whole", p)
		}
	})
}

// replaceChild deletes the live child of kind owned by the CR owner, waits until it is gone,
// and creates it again as changed by mut. It returns the new object.
func replaceChild(t *testing.T, entries []snapshot.Entry, kind, owner string, mut func(*unstructured.Unstructured)) *unstructured.Unstructured {
	t.Helper()
	var snap *unstructured.Unstructured
	for _, e := range entries {
		if refs := e.Object.GetOwnerReferences(); e.Object.GetKind() == kind && len(refs) == 1 && refs[0].Name == owner {
			snap = e.Object
		}
	}
	if snap == nil {
		t.Fatalf("the snapshot has no %s owned by %s", kind, owner)
	}
	ri := dyn(t).Resource(resourceOf(snap.GroupVersionKind())).Namespace(snap.GetNamespace())
	live, err := ri.Get(t.Context(), snap.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(t.Context(), snap.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, snap.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("%s %s was not deleted: %v", kind, snap.GetName(), err)
	}
	u := live.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	delete(u.Object, "status")
	mut(u)
	created, err := ri.Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s %s again: %v", kind, snap.GetName(), err)
	}
	return created
}
