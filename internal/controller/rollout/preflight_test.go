package rollout

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestPreflightOfAPullFleetStaysShort: the hub does not read a pull member's cluster (it holds
// no credential for it), so the preflight neither tries (no kubeconfig read per member) nor
// names each such member in the Preflight condition: at 1,000 pull members the message is
// one count, not a list that grows with the fleet. A push member that cannot be read is
// still named, with a bounded list.
func TestPreflightOfAPullFleetStaysShort(t *testing.T) {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	var objs []client.Object
	var plans []TargetPlan
	for i := range 1000 {
		name := fmt.Sprintf("m%04d", i)
		objs = append(objs, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}})
		plans = append(plans, TargetPlan{Cluster: name, Path: v1alpha1.PathUpgrade})
	}
	// A push member whose kubeconfig Secret is missing: unreadable, and named.
	objs = append(objs, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "push1"},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: "push1-kubeconfig"}}})
	plans = append(plans, TargetPlan{Cluster: "push1", Path: v1alpha1.PathUpgrade})
	secretReads := 0
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				secretReads++
			}
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names":    map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object"}}}}},
	}}
	r := &Reconciler{Client: c, Hub: c}
	sc := &scope{r: r, ro: &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "mysql"}}}
	if err := r.runPreflight(context.Background(), sc, "mysql-b", []*unstructured.Unstructured{crd}, plans); err != nil {
		t.Fatalf("preflight: %v", err)
	}
	cond := meta.FindStatusCondition(sc.ro.Status.Conditions, v1alpha1.ConditionPreflight)
	if cond == nil {
		t.Fatal("no Preflight condition")
	}
	t.Logf("Preflight: %s", cond.Message)
	if strings.Contains(cond.Message, "m0001") || !strings.Contains(cond.Message, "1000 pull members not checked") {
		t.Errorf("the condition must count the pull members, not name them: %s", cond.Message)
	}
	if !strings.Contains(cond.Message, "1 not checked (unreadable): push1") {
		t.Errorf("the unreadable push member must be named: %s", cond.Message)
	}
	if len(cond.Message) > 1000 {
		t.Errorf("the condition's message is %d bytes at 1,000 pull members", len(cond.Message))
	}
	if secretReads > 1 {
		t.Errorf("%d kubeconfig Secret reads, want at most 1 (the push member's)", secretReads)
	}
}
