//go:build !unit

package realcharts

import (
	"fmt"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/member"
)

// Kyverno 3.1.5 -> 3.2.9 (test/fixtures/charts, packaged as Kyverno packages it). Its release
// carries a ServiceMonitor and a PodDisruptionBudget per controller and cleanup CronJobs
// (test/fixtures/charts/values/kyverno-kwok.yaml); the member runs prometheus-operator's CRDs,
// as production clusters do. Nothing has to be switched off: the chart ships no webhook
// configuration (Kyverno registers its webhooks at run time, which pods on kwok never do).
func TestKyverno(t *testing.T) {
	root := repoRoot(t)
	fixtures := filepath.Join(root, "test", "fixtures", "charts")
	oc := operatorChart{
		operator: "kyverno", installNS: "kyverno",
		values: filepath.Join(fixtures, "values", "kyverno-kwok.yaml"),
		image:  "ghcr.io/kyverno/kyverno",
		pins: []pin{
			{repo: "ghcr.io/kyverno/kyverno", path: []string{"admissionController", "container", "image", "tag"}},
			{repo: "ghcr.io/kyverno/kyvernopre", path: []string{"admissionController", "initContainer", "image", "tag"}},
			{repo: "ghcr.io/kyverno/background-controller", path: []string{"backgroundController", "image", "tag"}},
			{repo: "ghcr.io/kyverno/cleanup-controller", path: []string{"cleanupController", "image", "tag"}},
			{repo: "ghcr.io/kyverno/reports-controller", path: []string{"reportsController", "image", "tag"}},
		},
		from:       chartVersion{dir: filepath.Join(fixtures, "kyverno-3.1.5"), version: "3.1.5", app: "v1.11.5"},
		to:         chartVersion{dir: filepath.Join(fixtures, "kyverno-3.2.9"), version: "3.2.9", app: "v1.12.7"},
		memberCRDs: []string{filepath.Join(root, "test", "fixtures", "crds", "prometheus-operator-v0.93.0")},
		kinds: []schema.GroupVersionResource{
			{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"},
			{Group: "kyverno.io", Version: "v1", Resource: "policies"},
		},
		create: func(t *testing.T, c *member.Cluster, crNS string) {
			createWithStatus(t, c, fmt.Sprintf(`apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team-%[1]s, annotations: {policies.kyverno.io/title: Require a team label}}
spec:
  validationFailureAction: Audit
  background: true
  rules:
  - name: require-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: "the label team is required", pattern: {metadata: {labels: {team: "?*"}}}}
status:
  ready: true
  conditions:
  - {type: Ready, status: "True", reason: Succeeded, message: "Ready", lastTransitionTime: "2026-11-30T10:00:00Z"}
---
apiVersion: kyverno.io/v1
kind: Policy
metadata: {name: no-latest, namespace: %[1]s}
spec:
  validationFailureAction: Enforce
  rules:
  - name: no-latest-tag
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: "pin the image", pattern: {spec: {containers: [{image: "!*:latest"}]}}}
status:
  ready: true
  conditions:
  - {type: Ready, status: "True", reason: Succeeded, message: "Ready", lastTransitionTime: "2026-11-30T10:00:00Z"}`, crNS))
		},
		change: func(t *testing.T, c *member.Cluster, crNS string) {
			update(t, c, "kyverno.io/v1", "ClusterPolicy", "", "require-team-"+crNS, func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Enforce", "spec", "validationFailureAction")
				_ = unstructured.SetNestedField(u.Object, false, "status", "ready")
			})
			createWithStatus(t, c, fmt.Sprintf(`apiVersion: kyverno.io/v1
kind: Policy
metadata: {name: created-after-upgrade, namespace: %s}
spec:
  rules:
  - name: requests
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {message: "set requests", pattern: {spec: {containers: [{resources: {requests: {memory: "?*"}}}]}}}`, crNS))
		},
	}
	oc.run(t)
}
