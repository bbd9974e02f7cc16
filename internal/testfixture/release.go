package testfixture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

// GitCommit is the commit the fixture releases claim to be built from.
const GitCommit = "0123456789abcdef0123456789abcdef01234567"

// OperatorImage is a digest-pinned image for a fixture release version.
func OperatorImage(version string) string {
	sum := sha256.Sum256([]byte(version))
	return "example.com/mysql-operator@sha256:" + hex.EncodeToString(sum[:])
}

// CreateRelease creates, in the hub namespace ns, the OperatorRelease name of operator
// mysql-operator at version: the MySQLCluster CRD and an operator Deployment running
// OperatorImage(version), its pod spec extended with podSpec (YAML lines indented by six
// spaces, e.g. a nodeSelector or affinity; "" for none). dir holds the rendered manifests.
func CreateRelease(ctx context.Context, hub client.Client, dir, ns, name, version, podSpec string) error {
	return CreateReleaseWithCRD(ctx, hub, dir, ns, name, version, podSpec, MySQLCRDYAML)
}

// CreateReleaseWithCRD is CreateRelease with another MySQLCluster CRD (crdYAML), e.g.
// MySQLCRDv1beta1YAML for a release that moves the storage version.
func CreateReleaseWithCRD(ctx context.Context, hub client.Client, dir, ns, name, version, podSpec, crdYAML string) error {
	dep := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: mysql-operator
  labels: {app: mysql-operator, version: "%s"}
spec:
  replicas: 1
  selector: {matchLabels: {app: mysql-operator}}
  template:
    metadata: {labels: {app: mysql-operator}}
    spec:
%s      containers:
      - name: manager
        image: %s
`, version, podSpec, OperatorImage(version))
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), []byte(crdYAML), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy.yaml"), []byte(dep), 0o600); err != nil {
		return err
	}
	objs, err := release.RenderManifests(dir)
	if err != nil {
		return err
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		return err
	}
	rel := &v1alpha1.OperatorRelease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1alpha1.OperatorReleaseSpec{
		Operator: "mysql-operator", Version: version, GitCommit: GitCommit, Image: OperatorImage(version),
		Format: v1alpha1.FormatManifests, Digest: release.Digest(canonical)}}
	_, err = release.Create(ctx, hub, rel, canonical)
	return err
}
