//go:build !unit

package pull

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/controller/target"
)

// A metric gate whose provider reads its credentials from a Secret of the Rollout's namespace
// (secretRef) gates pull members as it gates push members: the hub copies the Secret into each
// pull member's namespace with the target's inputs, the copy's spec names that copy, and the
// agent's gate sends the token. Before, the agent looked for the Secret in its own namespace
// and the gate failed every pull member ("Secret ... does not exist").
func TestMetricGateWithASecretGatesPullMembers(t *testing.T) {
	const token = "gate-t0ken"
	var mu sync.Mutex
	seen := map[string]int{} // cluster -> authorized queries
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			refused++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		seen[strings.TrimPrefix(r.URL.Path, "/")]++
		_, _ = w.Write([]byte(`{"errorRate":0.01}`))
	}))
	t.Cleanup(srv.Close)

	joined(t)
	f := suite.New(t, allAtOnce())
	for _, name := range pullMembers {
		bind(t, name, f.NS)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.NS, Name: "gate-token"}, Data: map[string][]byte{"token": []byte(token)}}
	if err := suite.Hub(t).Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	f.SetRelease("mysql-a", func(s *v1alpha1.RolloutSpec) {
		s.HealthGates.Metrics = []v1alpha1.Metric{{
			Name: "web-errors", SuccessCondition: "result < 0.05", FailureCondition: "result >= 0.05",
			Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{
				URL: srv.URL + "/{{.Cluster.Name}}", JSONPath: "{$.errorRate}",
				SecretRef: &v1alpha1.LocalSecretReference{Name: "gate-token"},
			}},
		}}
	})
	for _, name := range pullMembers {
		startAgent(t, name)
	}
	suite.StartManager(t, f.NS, controller.Options{})
	ro := f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 4*time.Minute)

	for _, m := range suite.Env.Members {
		tg := f.Target(m.Name)
		var r *v1alpha1.MetricResult
		for i := range tg.Status.Metrics {
			if tg.Status.Metrics[i].Name == "web-errors" {
				r = &tg.Status.Metrics[i]
			}
		}
		if r == nil || r.Phase != v1alpha1.MetricSuccessful || r.Revision != ro.Status.Revision {
			t.Errorf("%s: metric %+v, want Successful for revision %d", m.Name, r, ro.Status.Revision)
		}
	}
	mu.Lock()
	for _, m := range suite.Env.Members {
		if seen[m.Name] == 0 {
			t.Errorf("the gate server saw no authorized query for %s: %v (refused %d)", m.Name, seen, refused)
		}
	}
	if refused != 0 {
		t.Errorf("the gate server refused %d queries without the token", refused)
	}
	mu.Unlock()
	for _, name := range pullMembers {
		cp := copyOf(t, f, name)
		ref := cp.Spec.HealthGates.Metrics[0].Provider.Web.SecretRef
		if want := target.MemberSnapshotName(f.NS, "gate-token"); ref == nil || ref.Name != want {
			t.Errorf("%s's copy names the gate's Secret %+v, want %s", name, ref, want)
			continue
		}
		s := &corev1.Secret{}
		if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: v1alpha1.MemberNamespace(name), Name: ref.Name}, s); err != nil {
			t.Errorf("%s: the gate's Secret's copy: %v", name, err)
			continue
		}
		if string(s.Data["token"]) != token || s.Labels[v1alpha1.LabelSourceNamespace] != f.NS || s.Labels[v1alpha1.LabelSourceName] != "gate-token" {
			t.Errorf("%s: the gate's Secret's copy has labels %v and not the source's data", name, s.Labels)
		}
	}
}
