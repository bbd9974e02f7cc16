// Package testfixture builds the seed's MySQLCluster example on a cluster for tests and
// benchmarks: the CRD (database.example.com), custom resources with status, and the children
// an operator would own (StatefulSet, Service, ConfigMap, Secret per cluster).
package testfixture

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// MySQLCRDYAML is the MySQLCluster CRD of the seed (v1alpha1 served and stored).
const MySQLCRDYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mysqlclusters.database.example.com
spec:
  group: database.example.com
  names:
    kind: MySQLCluster
    listKind: MySQLClusterList
    plural: mysqlclusters
    singular: mysqlcluster
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas:
                type: integer
                minimum: 1
                maximum: 10
              version:
                type: string
              config:
                type: string
          status:
            type: object
            properties:
              readyReplicas:
                type: integer
              phase:
                type: string
              observedGeneration:
                type: integer
`

// MySQLCRDv1beta1YAML is the MySQLCluster CRD of a later release: v1alpha1 and v1beta1 served
// with the same schema (no conversion needed), stored at v1beta1. Objects written under it are
// stored at v1beta1, so going back to MySQLCRDYAML needs a storage migration.
var MySQLCRDv1beta1YAML = func() string {
	i := strings.Index(MySQLCRDYAML, "  - name: v1alpha1\n")
	version := MySQLCRDYAML[i:]
	stored := strings.Replace(version, "name: v1alpha1", "name: v1beta1", 1)
	old := strings.Replace(version, "storage: true", "storage: false", 1)
	return MySQLCRDYAML[:i] + old + stored
}()

// MySQLGVR is the resource of MySQLClusters at v1alpha1.
var MySQLGVR = schema.GroupVersionResource{Group: "database.example.com", Version: "v1alpha1", Resource: "mysqlclusters"}

// MySQLCRD returns the CRD object.
func MySQLCRD() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(MySQLCRDYAML), &u.Object); err != nil {
		panic(err)
	}
	return u
}

// Options of Populate.
type Options struct {
	// Namespaces receive the CRs round-robin.
	Namespaces []string
	// Count is the number of MySQLClusters.
	Count int
	// Children creates a StatefulSet, Service, ConfigMap and Secret owned by each CR.
	Children bool
	// ChildrenFor limits Children to the first N CRs (0: all).
	ChildrenFor int
	// Offset starts the CR numbering (to add more CRs in a second call).
	Offset int
	// PayloadBytes pads each CR's spec.config to make it about this large.
	PayloadBytes int
	// Parallelism of the creates (default 16).
	Parallelism int
}

var (
	gvrSTS = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	gvrSvc = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	gvrCM  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	gvrSec = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
)

// SecretValue is the plaintext password in every fixture Secret (tests look for it in
// stored bytes).
func SecretValue(name string) string { return "s3cr3t-pw-" + name + "-do-not-leak" }

// Populate creates the namespaces, then opts.Count MySQLClusters with status, and (with
// Children) their owned objects. The CRD must be installed.
func Populate(ctx context.Context, cfg *rest.Config, o Options) error {
	if o.Parallelism == 0 {
		o.Parallelism = 16
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, ns := range o.Namespaces {
		n := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Parallelism)
	for i := o.Offset; i < o.Offset+o.Count; i++ {
		ns := o.Namespaces[i%len(o.Namespaces)]
		name := fmt.Sprintf("db-%05d", i)
		g.Go(func() error { return createOne(ctx, dyn, ns, name, i, o) })
	}
	return g.Wait()
}

func createOne(ctx context.Context, dyn dynamic.Interface, ns, name string, i int, o Options) error {
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "database.example.com/v1alpha1",
		"kind":       "MySQLCluster",
		"metadata":   map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app": "mysql", "tier": []string{"gold", "silver"}[i%2]}},
		"spec":       map[string]any{"replicas": int64(1 + i%5), "version": "8.0." + fmt.Sprint(30+i%10)},
	}}
	if o.PayloadBytes > 0 {
		_ = unstructured.SetNestedField(cr.Object, strings.Repeat("x", o.PayloadBytes), "spec", "config")
	}
	created, err := dyn.Resource(MySQLGVR).Namespace(ns).Create(ctx, cr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating MySQLCluster %s/%s: %w", ns, name, err)
	}
	_ = unstructured.SetNestedMap(created.Object, map[string]any{
		"readyReplicas": int64(1 + i%5), "phase": "Ready", "observedGeneration": created.GetGeneration(),
	}, "status")
	if _, err := dyn.Resource(MySQLGVR).Namespace(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting the status of MySQLCluster %s/%s: %w", ns, name, err)
	}
	if !o.Children || (o.ChildrenFor > 0 && i-o.Offset >= o.ChildrenFor) {
		return nil
	}
	owner := []any{map[string]any{
		"apiVersion": "database.example.com/v1alpha1", "kind": "MySQLCluster", "name": name,
		"uid": string(created.GetUID()), "controller": true, "blockOwnerDeletion": true,
	}}
	labels := map[string]any{"app": "mysql", "mysql.example.com/cluster": name}
	meta := func(n string) map[string]any {
		return map[string]any{"name": n, "namespace": ns, "labels": labels, "ownerReferences": owner}
	}
	children := []struct {
		gvr schema.GroupVersionResource
		obj map[string]any
	}{
		{gvrSTS, map[string]any{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta(name),
			"spec": map[string]any{
				"replicas":    int64(0),
				"serviceName": name,
				"selector":    map[string]any{"matchLabels": map[string]any{"mysql.example.com/cluster": name}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": map[string]any{"mysql.example.com/cluster": name}},
					"spec":     map[string]any{"containers": []any{map[string]any{"name": "mysql", "image": "mysql:8.0"}}},
				},
			}}},
		{gvrSvc, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": meta(name),
			"spec": map[string]any{"clusterIP": "None", "selector": map[string]any{"mysql.example.com/cluster": name},
				"ports": []any{map[string]any{"name": "mysql", "port": int64(3306)}}}}},
		{gvrCM, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name + "-config"),
			"data": map[string]any{"my.cnf": "[mysqld]\nmax_connections=" + fmt.Sprint(100+i)}}},
		{gvrSec, map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": meta(name + "-credentials"),
			"stringData": map[string]any{"password": SecretValue(name)}}},
	}
	for _, ch := range children {
		if _, err := dyn.Resource(ch.gvr).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: ch.obj}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating a child of %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

// Touch writes every MySQLCluster in namespace ns again with a label (rewind.dev/touched), so
// that the API server stores each at the CRD's current storage version.
func Touch(ctx context.Context, cfg *rest.Config, ns string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	list, err := dyn.Resource(MySQLGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		u := &list.Items[i]
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["rewind.dev/touched"] = "true"
		u.SetLabels(labels)
		if _, err := dyn.Resource(MySQLGVR).Namespace(ns).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
