package operator

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
)

// GVR is the MySQLCluster resource at an API version.
func GVR(apiVersion string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: Group, Version: apiVersion, Resource: "mysqlclusters"}
}

// Settled reports whether the n MySQLClusters in ns, read at apiVersion, all have the Ready
// condition with status want for their generation and, if by is not empty, whether the
// operator build named by ("mysql-operator 2.0.0") wrote all their ConfigMaps. When not, it
// says what is missing. It is what tests and the demo poll for after a change.
func Settled(ctx context.Context, dyn dynamic.Interface, ns, apiVersion string, n int, want metav1.ConditionStatus, by string) (bool, string) {
	l, err := dyn.Resource(GVR(apiVersion)).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	if len(l.Items) != n {
		return false, fmt.Sprintf("%d of %d MySQLClusters", len(l.Items), n)
	}
	for _, it := range l.Items {
		if !ReadyIs(&it, want) {
			return false, fmt.Sprintf("MySQLCluster %s is not Ready=%s for its generation: status %v", it.GetName(), want, it.Object["status"])
		}
	}
	if by == "" {
		return true, ""
	}
	cms, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns).List(ctx,
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=mysql-operator"})
	if err != nil {
		return false, err.Error()
	}
	done := 0
	for _, cm := range cms.Items {
		if v, _, _ := unstructured.NestedString(cm.Object, "data", "reconciled-by"); v == by {
			done++
		}
	}
	if done != n {
		return false, fmt.Sprintf("%d of %d MySQLClusters reconciled by %s", done, n, by)
	}
	return true, ""
}

// WaitSettled polls Settled until it holds or timeout passes; the error says what was
// still missing.
func WaitSettled(ctx context.Context, dyn dynamic.Interface, ns, apiVersion string, n int, want metav1.ConditionStatus, by string, timeout time.Duration) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why := Settled(ctx, dyn, ns, apiVersion, n, want, by)
		last = why
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("MySQLClusters in %s (read at %s) not settled (Ready=%s, reconciled by %q) after %s: %s", ns, apiVersion, want, by, timeout, last)
	}
	return nil
}
