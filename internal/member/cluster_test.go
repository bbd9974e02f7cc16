//go:build !unit

package member_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

func newCluster(t *testing.T) *member.Cluster {
	t.Helper()
	cl, err := member.New("hub", env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func crdYAML(group, kind, plural, scope string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	doc := fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %s.%s}
spec:
  group: %s
  scope: %s
  names: {kind: %s, plural: %s, singular: %s, listKind: %sList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, plural, group, group, scope, kind, plural, strings.ToLower(kind), kind)
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		panic(err)
	}
	return u
}

func obj(apiVersion, kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// Any kind resolves through discovery: built-in kinds with their scope and categories, and a
// kind whose CRD is created after the cluster's discovery was first read (no manual reset).
func TestResourceFindsAnyKindThroughDiscovery(t *testing.T) {
	cl := newCluster(t)
	for _, tc := range []struct {
		gvk        schema.GroupVersionKind
		resource   string
		namespaced bool
		all        bool // in the "all" category
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", true, true},
		{schema.GroupVersionKind{Group: "autoscaling", Version: "v2", Kind: "HorizontalPodAutoscaler"}, "horizontalpodautoscalers", true, true},
		{schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, "cronjobs", true, true},
		{schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}, "ingresses", true, false},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "clusterroles", false, false},
		{schema.GroupVersionKind{Group: "scheduling.k8s.io", Version: "v1", Kind: "PriorityClass"}, "priorityclasses", false, false},
		{schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}, "apiservices", false, false},
	} {
		res, err := cl.Resource(tc.gvk)
		if err != nil {
			t.Fatalf("%s: %v", tc.gvk, err)
		}
		if res.GVR.Resource != tc.resource || res.Namespaced != tc.namespaced || slices.Contains(res.Categories, "all") != tc.all {
			t.Errorf("%s: got %+v, want resource %s namespaced %v in all %v", tc.gvk, res, tc.resource, tc.namespaced, tc.all)
		}
	}

	group := "kinds-" + rand.String(6) + ".example.com"
	gvk := schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Widget"}
	_, err := cl.Resource(gvk)
	if !member.IsNotServed(err) || !strings.Contains(err.Error(), group+"/v1 Widget") {
		t.Fatalf("a kind no CRD defines yet: want a NotServedError naming it, got %v", err)
	}
	crd := crdYAML(group, "Widget", "widgets", "Cluster")
	if err := apply.Apply(t.Context(), cl.Client, crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Client.Delete(context.Background(), crd) })
	if err := apply.WaitEstablished(t.Context(), cl.Client, []*unstructured.Unstructured{crd}, 0); err != nil {
		t.Fatal(err)
	}
	res, err := cl.Resource(gvk)
	if err != nil {
		t.Fatalf("the kind is served now; discovery must find it without a manual reset: %v", err)
	}
	if res.GVR.Resource != "widgets" || res.Namespaced || !res.Status {
		t.Fatalf("got %+v, want cluster-scoped widgets with a status subresource", res)
	}
}

// Scoped follows each kind's scope on the cluster, or the scope of a CRD among the objects.
func TestScoped(t *testing.T) {
	cl := newCluster(t)
	group := "scoped-" + rand.String(6) + ".example.com"
	objs := []*unstructured.Unstructured{
		crdYAML(group, "Gadget", "gadgets", "Namespaced"),
		crdYAML(group, "ClusterGadget", "clustergadgets", "Cluster"),
		obj(group+"/v1", "Gadget", "", "g"),
		obj(group+"/v1", "ClusterGadget", "rendered-ns", "cg"),                      // a renderer without a cluster guessed namespaced
		obj("rbac.authorization.k8s.io/v1", "ClusterRole", "rendered-ns", "reader"), // likewise
		obj("v1", "ConfigMap", "", "settings"),
		obj("v1", "ConfigMap", "elsewhere", "kept"),
	}
	got, err := cl.Scoped(objs, "install-ns")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"g": "install-ns", "cg": "", "reader": "", "settings": "install-ns", "kept": "elsewhere",
		"gadgets." + group: "", "clustergadgets." + group: ""}
	if len(got) != len(objs) {
		t.Fatalf("got %d objects, want %d", len(got), len(objs))
	}
	for _, u := range got {
		if ns, ok := want[u.GetName()]; !ok || u.GetNamespace() != ns {
			t.Errorf("%s %s: namespace %q, want %q", u.GetKind(), u.GetName(), u.GetNamespace(), ns)
		}
	}
	if objs[3].GetNamespace() != "rendered-ns" {
		t.Fatal("Scoped must not change its input")
	}

	_, err = cl.Scoped([]*unstructured.Unstructured{
		obj("monitoring.coreos.com/v1", "ServiceMonitor", "", "a"),
		obj("monitoring.coreos.com/v1", "ServiceMonitor", "", "b"),
		obj("v1", "ConfigMap", "", "c"),
	}, "ns")
	var kinds *member.KindsNotServedError
	if !errors.As(err, &kinds) || !slices.Equal(kinds.Kinds, []string{"monitoring.coreos.com/v1 ServiceMonitor"}) {
		t.Fatalf("want every unserved kind named once, got %v", err)
	}
}

// Errors from a real API server and from real connections are classified by type: a webhook
// the API server could not call (a 500 that names a refused connection) is a fault to retry,
// as are a refused connection and an API server that never answers; a missing object is not.
// None of them alone says a member is unreachable: the health probe does (TestProber).
func TestFaultsFromRealConnections(t *testing.T) {
	ctx := t.Context()
	cl := newCluster(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	closed := closedPort(t)
	label := "rewind-test-" + rand.String(6)
	nsObj := &corev1.Namespace{}
	if err := cl.Client.Get(ctx, client.ObjectKey{Name: ns}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{label: "true"}
	if err := cl.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	webhook := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %s}
webhooks:
- name: refuse.rewind.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 2
  namespaceSelector: {matchLabels: {%s: "true"}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  clientConfig: {url: "https://127.0.0.1:%d/validate"}
`, label, label, closed), &webhook.Object); err != nil {
		t.Fatal(err)
	}
	if err := apply.Apply(ctx, cl.Client, webhook); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Client.Delete(context.Background(), webhook) })
	var webhookErr error
	deadline := time.Now().Add(30 * time.Second)
	for webhookErr == nil && time.Now().Before(deadline) {
		// The API server picks the new webhook up within a moment: retry until it refuses.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "refused-"}}
		webhookErr = cl.Client.Create(ctx, cm)
	}
	if webhookErr == nil || !apierrors.IsInternalError(webhookErr) || !strings.Contains(webhookErr.Error(), "connect: connection refused") {
		t.Fatalf("want the API server to report the failed webhook call, got %v", webhookErr)
	}
	if !fault.IsTransient(webhookErr) {
		t.Fatalf("a webhook the API server could not call is a fault to retry: %v", webhookErr)
	}
	notFound := cl.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "no-such-configmap"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(notFound) || fault.IsTransient(notFound) {
		t.Fatalf("a missing object is an answer, not a fault: %v", notFound)
	}

	refused, err := member.New("gone", &rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", closed), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = refused.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
	if !fault.IsTransient(err) {
		t.Fatalf("a refused connection is a fault: %v", err)
	}

	silent := silentServer(t)
	hung, err := member.New("hung", &rest.Config{Host: "https://" + silent, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = hung.Client.Get(ctx, client.ObjectKey{Name: "kube-system"}, &corev1.Namespace{})
	if !fault.IsTransient(err) {
		t.Fatalf("an API server that never answers is a fault: %v", err)
	}
}

func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// The cache keeps one Cluster per member while its credentials stay the same, and builds a
// new one when they change.
func TestCacheKeysByCredentials(t *testing.T) {
	ctx := t.Context()
	hub := testenv.HubClient(t, env.Hub.RESTConfig())
	kc, err := env.Hub.KubeconfigBytes()
	if err != nil {
		t.Fatal(err)
	}
	name := "cache-" + rand.String(6)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "rewind-system", Name: name}, Data: map[string][]byte{"kubeconfig": kc}}
	if err := hub.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}
	mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: name, Key: "kubeconfig"}}}
	if err := hub.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hub.Delete(context.Background(), mc)
		_ = hub.Delete(context.Background(), sec)
	})
	cache := &member.Cache{Hub: hub}
	a, err := cache.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ClusterID(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := cache.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("the same credentials must give the same Cluster (its connections and discovery)")
	}
	// New credentials (a rotated token) for the same server: new clients.
	sec.Data["kubeconfig"] = []byte(strings.Replace(string(kc), "token: ", "token: rotated-", 1))
	if string(sec.Data["kubeconfig"]) == string(kc) {
		t.Fatal("the testbed kubeconfig has no token to rotate")
	}
	if err := hub.Update(ctx, sec); err != nil {
		t.Fatal(err)
	}
	c, err := cache.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Fatal("changed credentials must give a new Cluster")
	}
}
