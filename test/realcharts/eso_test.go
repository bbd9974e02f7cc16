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

// External Secrets Operator 0.15.1 -> 0.16.2 (the chart as ESO packages it; see
// test/fixtures/charts/README-external-secrets.md). Between them ExternalSecret, SecretStore and
// ClusterSecretStore move their storage version from v1beta1 to v1. Pods on kwok serve
// nothing, so the chart's admission webhooks, its cert-controller and (in 0.15.1) the CRD
// conversion webhook are switched off by values (webhook.create, certController.create,
// crds.conversion.enabled all false: test/fixtures/charts/values/external-secrets-kwok.yaml).
func TestExternalSecretsOperator(t *testing.T) {
	root := repoRoot(t)
	charts := filepath.Join(root, "test", "fixtures", "charts")
	const group = "external-secrets.io"
	oc := operatorChart{
		operator: "external-secrets", installNS: "external-secrets",
		values: filepath.Join(root, "test", "fixtures", "charts", "values", "external-secrets-kwok.yaml"),
		image:  "oci.external-secrets.io/external-secrets/external-secrets",
		pins:   []pin{{repo: "oci.external-secrets.io/external-secrets/external-secrets", path: []string{"image", "tag"}}},
		from:   chartVersion{dir: filepath.Join(charts, "external-secrets-0.15.1"), version: "0.15.1", app: "v0.15.1"},
		to:     chartVersion{dir: filepath.Join(charts, "external-secrets-0.16.2"), version: "0.16.2", app: "v0.16.2"},
		kinds: []schema.GroupVersionResource{
			{Group: group, Version: "v1beta1", Resource: "secretstores"},
			{Group: group, Version: "v1beta1", Resource: "clustersecretstores"},
			{Group: group, Version: "v1beta1", Resource: "externalsecrets"},
		},
		create: func(t *testing.T, c *member.Cluster, crNS string) {
			docs := fmt.Sprintf(`apiVersion: external-secrets.io/v1beta1
kind: ClusterSecretStore
metadata: {name: shared-%[1]s, labels: {team: platform}}
spec:
  provider: {fake: {data: [{key: /db/password, value: s3cr3t}, {key: /db/user, value: app}]}}
%[2]s
---
apiVersion: external-secrets.io/v1beta1
kind: SecretStore
metadata: {name: team-store, namespace: %[1]s}
spec:
  refreshInterval: 60
  provider: {fake: {data: [{key: /api/token, value: t0k3n, version: v1}]}}
%[3]s`, crNS, readyStatus("store validated"), readyStatus("store validated"))
			for i := range 4 {
				docs += fmt.Sprintf(`
---
apiVersion: external-secrets.io/v1beta1
kind: ExternalSecret
metadata: {name: app-%[1]d, namespace: %[2]s, annotations: {owner: team-%[1]d}}
spec:
  refreshInterval: 1h
  secretStoreRef: {name: team-store, kind: SecretStore}
  target: {name: app-%[1]d-secret, creationPolicy: Owner}
  data:
  - secretKey: token
    remoteRef: {key: /api/token, version: v1}
status:
  refreshTime: "2026-11-30T10:00:00Z"
  syncedResourceVersion: "1-abc%[1]d"
  conditions:
  - {type: Ready, status: "True", reason: SecretSynced, message: "Secret was synced", lastTransitionTime: "2026-11-30T10:00:00Z"}`, i, crNS)
			}
			createWithStatus(t, c, docs)
		},
		change: func(t *testing.T, c *member.Cluster, crNS string) {
			// At v1, the new storage version: a changed spec, a changed status, a new object.
			update(t, c, group+"/v1", "SecretStore", crNS, "team-store", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "refreshInterval")
			})
			update(t, c, group+"/v1", "ExternalSecret", crNS, "app-1", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "5m", "spec", "refreshInterval")
				_ = unstructured.SetNestedField(u.Object, "2-def1", "status", "syncedResourceVersion")
			})
			update(t, c, group+"/v1", "ClusterSecretStore", "", "shared-"+crNS, func(u *unstructured.Unstructured) {
				u.SetLabels(map[string]string{"team": "security"})
			})
			createWithStatus(t, c, fmt.Sprintf(`apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: created-at-v1, namespace: %s}
spec:
  secretStoreRef: {name: team-store, kind: SecretStore}
  target: {name: created-at-v1}
  data: [{secretKey: user, remoteRef: {key: /db/user}}]`, crNS))
		},
	}
	oc.run(t)
}
