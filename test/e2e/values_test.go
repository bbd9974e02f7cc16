//go:build !unit

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// A Rollout gives the clusters of one region their own Helm values (an image registry mirror):
// those clusters run their own rendering of the chart release, recorded by digest on their
// targets and records, so drift checks stay exact; the others run the release as it is. A
// rollback returns each cluster to the rendering it ran.
func TestValuesFromPerClusterLabel(t *testing.T) {
	c := hub(t)
	ns := testenv.Namespace(t, suite.Env.Hub.RESTConfig())
	const image = "example.com/widget-operator@sha256:96de02ea89f210bd768e9511189362b1dd87b8e26bd35d6b92fbf9bdc95504c0"
	const mirror = "mirror.eu.example.com/widget-operator@sha256:96de02ea89f210bd768e9511189362b1dd87b8e26bd35d6b92fbf9bdc95504c0"
	chart := filepath.Join("..", "..", "internal", "release", "testdata", "chart")
	rewind(t, ns, "release", "create", "widget-v2", "--operator", "widget", "--version", "2.0.0", "--git-commit", "0123456",
		"--image", image, "--chart", chart, "--install-namespace", "widget-"+ns)
	rel := &v1alpha1.OperatorRelease{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "widget-v2"}, rel); err != nil || rel.Status.RenderInput == "" {
		t.Fatalf("a chart release keeps what it was rendered from (status.renderInput): %v %+v", err, rel.Status)
	}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "widget", Namespace: ns}, Spec: v1alpha1.RolloutSpec{
		Operator: "widget", Release: "widget-v2", InstallNamespace: "widget-" + ns,
		Waves:       []v1alpha1.Wave{{Name: "all", Clusters: []string{"member1", "member2"}, MaxConcurrency: 2}},
		HealthGates: v1alpha1.HealthGates{Timeout: &metav1.Duration{Duration: time.Minute}},
		ValuesFrom: []v1alpha1.ValuesOverride{{
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"index": "2"}},
			Values:          &apiextensionsv1.JSON{Raw: []byte(`{"image":{"repository":"mirror.eu.example.com/widget-operator"}}`)},
		}},
	}}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanupOperator(t, "widget", "widget-"+ns, "widgets.example.com") })
	startManager(t, ns, nil)
	waitRollout(t, ns, "widget", "widget-v2", v1alpha1.RolloutSucceeded, 2*time.Minute)

	want := map[string]string{"member1": image, "member2": mirror}
	for i, m := range suite.Env.Members[:2] {
		mc := memberClient(t, m)
		deps := &unstructured.UnstructuredList{}
		deps.SetAPIVersion("apps/v1")
		deps.SetKind("DeploymentList")
		if err := mc.List(t.Context(), deps, client.InNamespace("widget-"+ns)); err != nil || len(deps.Items) != 1 {
			t.Fatalf("%s: want the operator Deployment: %v (%d)", m.Name, err, len(deps.Items))
		}
		containers, _, _ := unstructured.NestedSlice(deps.Items[0].Object, "spec", "template", "spec", "containers")
		got, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
		if got != want[m.Name] {
			t.Errorf("%s runs %s, want %s", m.Name, got, want[m.Name])
		}
		rec, err := member.ReadRecord(t.Context(), mc, "widget")
		if err != nil || rec == nil {
			t.Fatalf("%s record: %v", m.Name, err)
		}
		tgt := &v1alpha1.RolloutTarget{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "widget-" + m.Name}, tgt); err != nil {
			t.Fatal(err)
		}
		own := i == 1
		if own != (tgt.Spec.Manifests != "") || (own && rec.Digest != tgt.Spec.Manifests) || (!own && rec.Digest != release.ManifestDigest(rel)) || rec.Image != want[m.Name] {
			t.Errorf("%s: target manifests %q, record digest %s image %s (release digest %s): each cluster records what it runs",
				m.Name, tgt.Spec.Manifests, rec.Digest, rec.Image, release.ManifestDigest(rel))
		}
	}
	// The drift check sees no drift on either cluster.
	out := rewind(t, ns, "clusters", "check", "--operator", "widget", "--expect", "widget-v2", "-l", "index in (1,2)")
	if strings.Contains(out, "drift") || strings.Contains(out, "Drift") {
		t.Errorf("rewind clusters check reports drift for a cluster with its own values:\n%s", out)
	}
}

// cleanupOperator leaves the members without an operator's record, CRD and namespace.
func cleanupOperator(t *testing.T, operator, namespace, crdName string) {
	ctx := context.Background()
	for _, m := range suite.Env.Members {
		mc := memberClient(t, m)
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		crd.SetName(crdName)
		for _, o := range []client.Object{
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: member.RecordNamespace, Name: member.RecordName(operator)}},
			crd, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		} {
			_ = mc.Delete(ctx, o)
		}
	}
}

// waitRollout waits for a rollout to reach a phase for a release.
func waitRollout(t *testing.T, ns, name, rel, phase string, timeout time.Duration) *v1alpha1.Rollout {
	t.Helper()
	ro := &v1alpha1.Rollout{}
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := hub(t).Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
			return false, nil
		}
		return ro.Status.CurrentRelease == rel && ro.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("rollout %s did not reach %s for %s: phase %s, failures %+v, conditions %+v", name, phase, rel, ro.Status.Phase, ro.Status.Failures, ro.Status.Conditions)
	}
	return ro
}
