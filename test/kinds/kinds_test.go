//go:build !unit

// Package kinds runs a release holding every kind real operator charts carry through apply,
// the health gate, capture and restore on a real member: built-in kinds of every role,
// cluster-scoped and namespaced; custom resources of CRDs the member already runs
// (prometheus-operator, cert-manager, Gateway API) and of the release's own CRD (a default CR
// shipped with it); and an APIService whose aggregated API is not served.
package kinds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/health"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/restore"
	"github.com/rewind-dev/rewind/internal/snapshot"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

var env *testbed.Testbed

func TestMain(m *testing.M) {
	testenv.Main(m, testbed.Options{Members: 1, Workloads: true}, &env)
}

const ns = "gizmo-system"

// releaseYAML is a release with every kind; %s is the image tag (v1 or v2).
const releaseYAML = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.kinds.example.com}
spec:
  group: kinds.example.com
  scope: Namespaced
  names: {kind: Gizmo, plural: gizmos, singular: gizmo, listKind: GizmoList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmoclasses.kinds.example.com}
spec:
  group: kinds.example.com
  scope: Cluster
  names: {kind: GizmoClass, plural: gizmoclasses, singular: gizmoclass, listKind: GizmoClassList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: kinds.example.com/v1
kind: Gizmo
metadata: {name: default}
spec: {size: 3}
---
apiVersion: kinds.example.com/v1
kind: GizmoClass
metadata: {name: standard}
spec: {tier: gold}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: gizmo}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: gizmo-operator}
rules: [{apiGroups: [kinds.example.com], resources: ["*"], verbs: [get, list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: gizmo-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gizmo-operator}
subjects: [{kind: ServiceAccount, name: gizmo, namespace: gizmo-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: gizmo-leader}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get, update, create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gizmo-leader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gizmo-leader}
subjects: [{kind: ServiceAccount, name: gizmo}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: gizmo-config}
data: {level: info}
---
apiVersion: v1
kind: Secret
metadata: {name: gizmo-token}
stringData: {token: not-a-real-token}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gizmo-critical}
value: 100000
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gizmo-runc}
handler: runc
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: gizmo}
spec: {controller: example.com/gizmo-ingress}
---
apiVersion: v1
kind: Service
metadata: {name: gizmo}
spec:
  selector: {app: gizmo}
  ports: [{name: metrics, port: 8080}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: gizmo-size}
spec:
  failurePolicy: Fail
  matchConstraints: {resourceRules: [{apiGroups: [kinds.example.com], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [gizmos]}]}
  validations: [{expression: "!has(object.spec.size) || object.spec.size < 100"}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.metrics.kinds.example.com}
spec:
  group: metrics.kinds.example.com
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {name: gizmo, namespace: gizmo-system, port: 8080}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: gizmo-operator}
spec:
  replicas: 1
  selector: {matchLabels: {app: gizmo}}
  template:
    metadata: {labels: {app: gizmo}}
    spec:
      serviceAccountName: gizmo
      priorityClassName: gizmo-critical
      nodeSelector: {kubernetes.io/os: linux}
      containers: [{name: manager, image: "example.com/gizmo@sha256:%[1]s"}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: gizmo-agent}
spec:
  selector: {matchLabels: {app: gizmo-agent}}
  template:
    metadata: {labels: {app: gizmo-agent}}
    spec: {containers: [{name: agent, image: "example.com/gizmo-agent@sha256:%[1]s"}]}
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: gizmo-cleanup}
spec:
  schedule: "17 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: cleanup, image: "example.com/gizmo-cleanup@sha256:%[1]s"}]
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: gizmo-operator}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: gizmo-operator}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: gizmo-operator}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: gizmo}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: gizmo}
spec:
  ingressClassName: gizmo
  rules: [{host: gizmo.example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: gizmo, port: {number: 8080}}}}]}}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: gizmo}
spec:
  podSelector: {matchLabels: {app: gizmo}}
  ingress: [{ports: [{port: 8080}]}]
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: gizmo}
spec:
  selector: {matchLabels: {app: gizmo}}
  endpoints: [{port: metrics, interval: 30s}]
---
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata: {name: gizmo-agent}
spec:
  selector: {matchLabels: {app: gizmo-agent}}
  podMetricsEndpoints: [{port: metrics}]
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: gizmo}
spec:
  groups: [{name: gizmo, rules: [{alert: GizmoDown, expr: "up{job=\"gizmo\"} == 0", for: 5m}]}]
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata: {name: gizmo-selfsigned}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: gizmo-serving}
spec:
  secretName: gizmo-serving-tls
  dnsNames: [gizmo.gizmo-system.svc]
  issuerRef: {name: gizmo-selfsigned, kind: ClusterIssuer}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: gizmo}
spec: {controllerName: example.com/gizmo-gateway}
---
apiVersion: gateway.networking.k8s.io/v1beta1
kind: ReferenceGrant
metadata: {name: gizmo}
spec:
  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: default}]
  to: [{group: "", kind: Service, name: gizmo}]
`

func objects(t *testing.T, tag string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(fmt.Sprintf(releaseYAML, strings.Repeat(tag, 64/len(tag))), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		out = append(out, u)
	}
	return out
}

func installMemberCRDs(t *testing.T, cl *member.Cluster) {
	t.Helper()
	for _, dir := range []string{"prometheus-operator-v0.93.0", "cert-manager-v1.21.1", "gateway-api-v1.6.1"} {
		objs, err := release.RenderManifests(filepath.Join("..", "fixtures", "crds", dir))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := apply.Objects(t.Context(), cl, objs, apply.Options{}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEveryKind(t *testing.T) {
	ctx := t.Context()
	m := env.Members[0]
	cl := testenv.Member(t, m)

	// A kind the member does not serve (its CRD is not installed yet) is refused before
	// anything is applied, naming the kind and the API.
	v1 := objects(t, "a1")
	_, err := apply.Plan(cl, v1, ns)
	var notServed *member.KindsNotServedError
	if !errors.As(err, &notServed) || !slices.Contains(notServed.Kinds, "monitoring.coreos.com/v1 ServiceMonitor") ||
		!slices.Contains(notServed.Kinds, "cert-manager.io/v1 ClusterIssuer") {
		t.Fatalf("a release with kinds the member does not serve must be refused, naming them: %v", err)
	}
	installMemberCRDs(t, cl)

	// Apply: stages by role, found through discovery.
	applied, err := apply.Objects(ctx, cl, v1, apply.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != len(v1) {
		t.Fatalf("applied %d of %d objects", len(applied), len(v1))
	}
	pos := map[string]int{}
	for i, u := range applied {
		pos[u.GetKind()] = i
		if u.GetKind() == "ClusterIssuer" || u.GetKind() == "GizmoClass" || u.GetKind() == "GatewayClass" {
			if u.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s applied with namespace %s", u.GetKind(), u.GetNamespace())
			}
		}
	}
	for _, order := range [][2]string{
		{"CustomResourceDefinition", "ServiceAccount"}, {"ServiceAccount", "ConfigMap"}, {"ClusterRoleBinding", "PriorityClass"},
		{"ConfigMap", "Service"}, {"PriorityClass", "ValidatingAdmissionPolicy"}, {"APIService", "Deployment"},
		{"Service", "DaemonSet"}, {"Deployment", "PodDisruptionBudget"}, {"CronJob", "ServiceMonitor"},
		{"HorizontalPodAutoscaler", "Gizmo"}, {"DaemonSet", "Certificate"},
	} {
		if pos[order[0]] >= pos[order[1]] {
			t.Errorf("%s must be applied before %s (positions %d, %d)", order[0], order[1], pos[order[0]], pos[order[1]])
		}
	}

	// The health gate covers every applied object, whatever its kind.
	last := "never checked"
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		res, err := health.Check(ctx, cl, health.Target{Applied: v1, Namespace: ns, OperatorImage: "example.com/gizmo@sha256:" + strings.Repeat("a1", 32),
			CRDs: release.CRDInventory(v1)})
		switch {
		case err != nil && ctx.Err() == nil:
			last = err.Error()
		case err == nil:
			last = strings.Join(res.Problems, "\n  ")
		}
		return err == nil && res.Healthy(), nil
	})
	if err != nil {
		t.Fatalf("the release did not become healthy:\n  %s", last)
	}

	// A child the (absent) operator would have made: a ConfigMap owned by the default Gizmo.
	gizmo, err := cl.Dynamic.Resource(gizmoGVR).Namespace(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "default-gizmo-state", "namespace": ns,
			"ownerReferences": []any{map[string]any{"apiVersion": "kinds.example.com/v1", "kind": "Gizmo", "name": "default", "uid": string(gizmo.GetUID()), "controller": true}}},
		"data": map[string]any{"state": "ready"}}}
	if _, err := cl.Dynamic.Resource(cmGVR).Namespace(ns).Create(ctx, child, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gizmo.Object["status"] = map[string]any{"phase": "Running", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "reason": "Up", "message": "ok", "lastTransitionTime": "2026-11-30T10:00:00Z"}}}
	if _, err := cl.Dynamic.Resource(gizmoGVR).Namespace(ns).UpdateStatus(ctx, gizmo, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Capture.
	var buf bytes.Buffer
	if _, err := snapshot.Capture(ctx, cl, snapshot.Options{Operator: "gizmo", Namespace: ns, Manifests: v1}, &buf); err != nil {
		t.Fatal(err)
	}
	hdr, entries, err := snapshot.ReadAll(&buf)
	if err != nil {
		t.Fatal(err)
	}
	captured := map[string]bool{}
	for _, e := range entries {
		captured[e.Object.GetKind()+"/"+e.Object.GetName()] = true
	}
	for _, u := range v1 {
		if !captured[u.GetKind()+"/"+u.GetName()] {
			t.Errorf("the snapshot lacks %s %s", u.GetKind(), u.GetName())
		}
	}
	if !captured["ConfigMap/default-gizmo-state"] {
		t.Error("the snapshot lacks the default Gizmo's child")
	}

	// A new release changes every kind; some fields can only be set on create; the default
	// Gizmo is deleted (and with it, by the garbage collector, its child); objects are added.
	v2 := objects(t, "b2")
	for _, u := range v2 {
		switch u.GetKind() {
		case "ConfigMap":
			_ = unstructured.SetNestedField(u.Object, "debug", "data", "level")
		case "PodDisruptionBudget":
			_ = unstructured.SetNestedField(u.Object, "50%", "spec", "minAvailable")
		case "ServiceMonitor":
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"port": "metrics", "interval": "5s"}}, "spec", "endpoints")
		case "Certificate":
			_ = unstructured.SetNestedStringSlice(u.Object, []string{"gizmo.example.com"}, "spec", "dnsNames")
		case "ClusterIssuer", "GizmoClass":
			u.SetLabels(map[string]string{"changed": "true"})
		case "CronJob":
			_ = unstructured.SetNestedField(u.Object, "*/5 * * * *", "spec", "schedule")
		case "Gizmo":
			_ = unstructured.SetNestedField(u.Object, int64(7), "spec", "size")
		}
	}
	extra := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
		"metadata": map[string]any{"name": "gizmo-extra"}, "spec": map[string]any{"selector": map[string]any{}, "endpoints": []any{}}}}
	if _, err := apply.Objects(ctx, cl, append(v2, extra), apply.Options{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Dynamic.Resource(gizmoGVR).Namespace(ns).Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Someone recreated the IngressClass for another controller: spec.controller is immutable,
	// so the restore must recreate it too.
	icGVR := schemaGVR("networking.k8s.io", "v1", "ingressclasses")
	if err := cl.Dynamic.Resource(icGVR).Delete(ctx, "gizmo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
		"metadata": map[string]any{"name": "gizmo"}, "spec": map[string]any{"controller": "example.com/other-ingress"}}}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cl.Dynamic.Resource(icGVR).Create(ctx, other, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("recreating the IngressClass for another controller")
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cl.Dynamic.Resource(cmGVR).Namespace(ns).Get(ctx, "default-gizmo-state", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatal("the garbage collector did not delete the deleted Gizmo's child")
	}

	// Restore: every object back exactly; the immutable field by a recreate; the Gizmo and
	// its child recreated, the child owned by the new Gizmo; what was added since pruned.
	rep, err := restore.Run(ctx, cl, restore.Options{Header: hdr, Entries: snapshot.RawEntriesOf(entries), Current: append(v2, extra), Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rep.Recreated, func(s string) bool { return strings.Contains(s, "IngressClass") }) {
		t.Errorf("the IngressClass (immutable controller) must be recreated: %v", rep.Recreated)
	}
	if !slices.ContainsFunc(rep.Pruned, func(s string) bool { return strings.Contains(s, "gizmo-extra") }) {
		t.Errorf("the ServiceMonitor added since must be pruned: %v", rep.Pruned)
	}
	for _, e := range entries {
		ri, _, err := cl.ResourceClient(cl.Dynamic, e.Object)
		if err != nil {
			t.Fatal(err)
		}
		live, err := ri.Get(ctx, e.Object.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s %s: %v", e.Object.GetKind(), e.Object.GetName(), err)
			continue
		}
		if !restore.Equal(e.Object, live) {
			t.Errorf("%s %s/%s differs from the snapshot after the restore", e.Object.GetKind(), e.Object.GetNamespace(), e.Object.GetName())
		}
	}
	newGizmo, err := cl.Dynamic.Resource(gizmoGVR).Namespace(ns).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kid, err := cl.Dynamic.Resource(cmGVR).Namespace(ns).Get(ctx, "default-gizmo-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := kid.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != newGizmo.GetUID() {
		t.Fatalf("the child's ownerReference must name the recreated Gizmo (%s): %+v", newGizmo.GetUID(), refs)
	}

	// Restoring again writes nothing.
	again, err := restore.Run(ctx, cl, restore.Options{Header: hdr, Entries: snapshot.RawEntriesOf(entries), Current: v1, Prune: true})
	if err != nil {
		t.Fatal(err)
	}
	if !again.NoOp {
		var written []string
		for k, r := range again.Kinds {
			if r.Restored+r.Created+r.Recreated+r.Pruned > 0 {
				written = append(written, fmt.Sprintf("%s %+v", k, *r))
			}
		}
		t.Fatalf("a second restore must write nothing: %+v (%v)", again.Totals(), written)
	}
}

var (
	gizmoGVR = schemaGVR("kinds.example.com", "v1", "gizmos")
	cmGVR    = schemaGVR("", "v1", "configmaps")
)

func schemaGVR(g, v, r string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g, Version: v, Resource: r}
}
