package target

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// A store's copy in a pull member's namespace names the copies of its Secrets (prefixed with
// the Rollout's namespace, as the copy itself), and keeps everything else of its spec; the
// copy's status drops the hub's key ID when the source uses the hub's default key (the
// member wraps with its own).
func TestStoreCopyRenamesItsSecrets(t *testing.T) {
	src := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "s3"}, Spec: v1alpha1.SnapshotStoreSpec{
		Provider: v1alpha1.StoreProviderS3, Bucket: "b", Prefix: "p", Endpoint: "http://s3.example:9000",
		CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "creds"},
		KeyRef: &v1alpha1.SnapshotKeyRef{SecretRef: &v1alpha1.SecretKeyReference{Name: "kek", Key: "k"},
			CredentialsSecretRef: &v1alpha1.LocalSecretReference{Name: "creds"}},
	}, Status: v1alpha1.SnapshotStoreStatus{KeyID: "local:abc", URL: "s3://b/p"}}
	cp := storeCopy(src, "rewind-member-edge")
	if cp.Namespace != "rewind-member-edge" || cp.Name != "team-a.s3" ||
		cp.Labels[v1alpha1.LabelSourceNamespace] != "team-a" || cp.Labels[v1alpha1.LabelSourceName] != "s3" {
		t.Fatalf("copy meta: %+v", cp.ObjectMeta)
	}
	if cp.Spec.CredentialsSecretRef.Name != "team-a.creds" || cp.Spec.KeyRef.SecretRef.Name != "team-a.kek" || cp.Spec.KeyRef.SecretRef.Key != "k" ||
		cp.Spec.KeyRef.CredentialsSecretRef.Name != "team-a.creds" || cp.Spec.Bucket != "b" || cp.Spec.Endpoint != src.Spec.Endpoint {
		t.Fatalf("copy spec: %+v, key %+v", cp.Spec, cp.Spec.KeyRef)
	}
	if src.Spec.CredentialsSecretRef.Name != "creds" || src.Spec.KeyRef.SecretRef.Name != "kek" {
		t.Fatal("the source's spec was changed")
	}
	if got := storeSecrets(src); !slices.Equal(got, []string{"creds", "kek"}) {
		t.Fatalf("the store's Secrets: %v", got)
	}
	if st := copiedStoreStatus(src, cp); st.KeyID != "local:abc" {
		t.Fatalf("a keyRef's key ID must stay: %+v", st)
	}
	src.Spec.KeyRef = nil
	if st := copiedStoreStatus(src, storeCopy(src, "rewind-member-edge")); st.KeyID != "" || st.URL != "s3://b/p?endpoint=http%3A%2F%2Fs3.example%3A9000" {
		t.Fatalf("with the hub's default key: %+v", st)
	}
}

// A pull member's copy of a target names the copies of its metric gates' Secrets (prefixed
// with the Rollout's namespace, as copyMetricSecrets names them), so that the agent's gate
// reads them in its namespace; the source's spec is not changed.
func TestCopySpecRenamesMetricSecrets(t *testing.T) {
	src := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-edge"}, Spec: v1alpha1.RolloutTargetSpec{
		HealthGates: v1alpha1.HealthGates{Metrics: []v1alpha1.Metric{
			{Name: "prom", Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: "http://p", Query: "q",
				SecretRef: &v1alpha1.LocalSecretReference{Name: "prom-token"}}}},
			{Name: "open", Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: "http://p", Query: "q"}}},
			{Name: "web", Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{URL: "http://w",
				SecretRef: &v1alpha1.LocalSecretReference{Name: "web-basic"}}}},
		}},
	}}
	spec := copySpec(src)
	m := spec.HealthGates.Metrics
	if m[0].Provider.Prometheus.SecretRef.Name != "team-a.prom-token" || m[1].Provider.Prometheus.SecretRef != nil ||
		m[2].Provider.Web.SecretRef.Name != "team-a.web-basic" {
		t.Fatalf("copy's metric Secrets: %+v, %+v, %+v", m[0].Provider.Prometheus.SecretRef, m[1].Provider.Prometheus.SecretRef, m[2].Provider.Web.SecretRef)
	}
	var names []string
	for _, ref := range metricSecretRefs(&src.Spec) {
		names = append(names, ref.Name)
	}
	if !slices.Equal(names, []string{"prom-token", "web-basic"}) {
		t.Fatalf("the source's metric Secrets: %v (its spec must not change)", names)
	}
	if again := copySpec(&v1alpha1.RolloutTarget{ObjectMeta: src.ObjectMeta, Spec: spec}); again.HealthGates.Metrics[0].Provider.Prometheus.SecretRef.Name != "team-a.prom-token" {
		t.Fatalf("a name already prefixed is prefixed again: %s", again.HealthGates.Metrics[0].Provider.Prometheus.SecretRef.Name)
	}
}

// TestAWaveReadsEachCredentialOnce: the Secrets the relay copies to pull members (here a metric
// gate's) are read from the hub once per revision for all its members, not once per member;
// a Secret changed since reaches every member's copy with the next revision, and a Secret
// missing is copied nowhere (the agent's step names its copy as missing).
func TestAWaveReadsEachCredentialOnce(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prom-token"}, Data: map[string][]byte{"token": []byte("one")}}
	hub := fake.NewClientBuilder().WithScheme(scheme).WithObjects(token).Build()
	reads := &secretReads{Reader: hub, ns: "team-a"}
	r := &Reconciler{Client: hub, Hub: reads, APIReader: hub}
	target := func(member string, rev int32, secret string) *v1alpha1.RolloutTarget {
		return &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "ro-" + member}, Spec: v1alpha1.RolloutTargetSpec{
			Rollout: "ro", Cluster: member, Revision: rev,
			HealthGates: v1alpha1.HealthGates{Metrics: []v1alpha1.Metric{{Name: "prom", Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{
				Address: "http://p", Query: "q", SecretRef: &v1alpha1.LocalSecretReference{Name: secret}}}}}},
		}}
	}
	members := []string{"edge1", "edge2", "edge3"}
	revision := func(rev int32, secret, want string) {
		t.Helper()
		reads.n = 0
		for _, m := range members {
			if err := r.copyMetricSecrets(ctx, target(m, rev, secret), v1alpha1.MemberNamespace(m)); err != nil {
				t.Fatalf("revision %d, %s: %v", rev, m, err)
			}
			cp := &corev1.Secret{}
			err := hub.Get(ctx, client.ObjectKey{Namespace: v1alpha1.MemberNamespace(m), Name: MemberSnapshotName("team-a", secret)}, cp)
			switch {
			case want == "" && !apierrors.IsNotFound(err):
				t.Errorf("revision %d, %s: a copy of missing Secret %s: %v", rev, m, secret, err)
			case want != "" && (err != nil || string(cp.Data["token"]) != want):
				t.Errorf("revision %d, %s: the copy holds %q (%v), want %q", rev, m, cp.Data["token"], err, want)
			}
		}
		if reads.n != 1 {
			t.Errorf("revision %d: Secret %s read %d times from the hub for %d members, want once", rev, secret, reads.n, len(members))
		}
	}
	revision(2, "prom-token", "one")
	token.Data["token"] = []byte("two") // rotated
	if err := hub.Update(ctx, token); err != nil {
		t.Fatal(err)
	}
	revision(3, "prom-token", "two")
	revision(4, "no-such-token", "")
}
