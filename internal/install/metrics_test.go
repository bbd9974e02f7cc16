//go:build !unit

package install_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// TestMetricsEndpointIsAuthenticatedAndAuthorized runs the manager as its ServiceAccount with
// the shipped RBAC and the secure metrics endpoint (as the Deployment does): a caller without a
// token is refused (401), a ServiceAccount without rewind-metrics-reader is forbidden (403), and
// one bound to it reads the metrics.
func TestMetricsEndpointIsAuthenticatedAndAuthorized(t *testing.T) {
	ctx := t.Context()
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	cfg := testenv.ControllerConfig(t, env.Hub)
	addr := testenv.FreeAddr(t)
	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: addr, MetricsSecure: true, ProbeAddr: "0", SkipNameValidation: true})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with an error: %v", err)
		}
	})

	// A Prometheus-like scraper, first without the reader role.
	admin, err := kubernetes.NewForConfig(env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "scraper", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The manager serves a self-signed certificate unless --metrics-cert-dir is set.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test of authn/authz, not of the certificate
	}}
	get := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expect := func(what, bearer string, want int) string {
		t.Helper()
		var code int
		var body string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			code, body = get(bearer)
			return code == want, nil
		})
		if err != nil {
			t.Fatalf("%s: GET /metrics answered %d, want %d", what, code, want)
		}
		return body
	}
	expect("no token", "", http.StatusUnauthorized)
	expect("a ServiceAccount without rewind-metrics-reader", token, http.StatusForbidden)

	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rewind-metrics-" + ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rewind-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns}}}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	// The endpoint caches authorization decisions briefly; the binding shows within a minute.
	body := expect("a ServiceAccount bound to rewind-metrics-reader", token, http.StatusOK)
	if !strings.Contains(body, "controller_runtime_reconcile_total") {
		t.Errorf("the metrics lack controller-runtime's reconcile counters:\n%.500s", body)
	}
}
