//go:build !unit

package dashboard

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/dashboard"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

// identities are ServiceAccounts of a namespace with real tokens of the hub: operator may
// see the dashboard and act (get, list, update and patch rollouts), viewer only see it, stranger
// nothing.
type identities struct{ operator, viewer, stranger string }

func makeIdentities(t *testing.T, ns string) identities {
	t.Helper()
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(suite.Env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	view := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouts", "rollouttargets", "snapshots"}, Verbs: []string{"get", "list", "watch"}}
	act := rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"rollouts"}, Verbs: []string{"update", "patch"}}
	roles := map[string][]rbacv1.PolicyRule{"operator": {view, act}, "viewer": {view}}
	tokens := map[string]string{}
	for _, name := range []string{"operator", "viewer", "stranger"} {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if rules, ok := roles[name]; ok {
			if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tr.Status.Token
	}
	return identities{operator: tokens["operator"], viewer: tokens["viewer"], stranger: tokens["stranger"]}
}

// pausedRollout creates a Rollout (no release behind it) to be shown.
func pausedRollout(t *testing.T, ns, name string) {
	t.Helper()
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.RolloutSpec{
		Operator: fleet.Operator, Release: "mysql-b", InstallNamespace: "mysql-system", Paused: true,
		Waves: []v1alpha1.Wave{{Name: "canary", Clusters: []string{"member1"}}}}}
	if err := suite.Hub(t).Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
}

// setPaused sets a Rollout's spec.paused with a merge patch: the controller writes the Rollout
// too (its status, its finalizer), and an update from an earlier read would be refused as a
// conflict (a CI run failed so, between this test's read and its write).
func setPaused(t *testing.T, c client.Client, key client.ObjectKey, paused bool) {
	t.Helper()
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	p := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"paused":%t}}`, paused)))
	if err := c.Patch(t.Context(), ro, p); err != nil {
		t.Fatal(err)
	}
}

// serveCert writes a self-signed serving certificate for 127.0.0.1 into a folder and returns
// the folder and a pool that trusts it.
func serveCert(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	crt, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{{127, 0, 0, 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(crt) {
		t.Fatal("the generated certificate does not parse")
	}
	return dir, pool
}

// get asks url with the bearer token (none when "") and returns the status and body.
func get(t *testing.T, hc *http.Client, method, url, token string, header map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

var tokenAttr = regexp.MustCompile(`data-token="([0-9a-f]+)"`)

// The controller serves the dashboard on --dashboard-bind-address, as its own ServiceAccount
// with the shipped RBAC, over HTTPS, to users of the hub only: no token or a bad one gets
// 401, a token without rights 403, a viewer sees but may not act, an operator acts; a
// browser signs in and the page works.
func TestControllerServesTheDashboardToUsersOfTheHub(t *testing.T) {
	ns := testenv.Namespace(t, suite.Env.Hub.RESTConfig())
	pausedRollout(t, ns, "shop")
	ids := makeIdentities(t, ns)
	certDir, pool := serveCert(t)
	addr := testenv.FreeAddr(t)
	suite.StartManager(t, ns, controller.Options{DashboardAddr: addr, DashboardNamespace: ns, DashboardActions: true, DashboardCertDir: certDir})
	base := "https://" + addr
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the controller's dashboard does not answer on %s: %v", addr, err)
	}

	// Never anonymous.
	for _, path := range []string{"/", "/rollouts/shop", "/events?rollout=shop", "/members", "/snapshots/x"} {
		if code, _, _ := get(t, hc, http.MethodGet, base+path, "", nil); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
	}
	if code, _, _ := get(t, hc, http.MethodPost, base+"/rollouts/shop/actions/resume", "", nil); code != http.StatusUnauthorized {
		t.Errorf("POST resume without a token: %d, want 401", code)
	}
	if code, _, _ := get(t, hc, http.MethodGet, base+"/", "not-a-token-of-this-hub", nil); code != http.StatusUnauthorized {
		t.Errorf("GET / with a token the hub does not know: %d, want 401", code)
	}
	// A browser without a token gets the sign-in form, with 401.
	code, body, _ := get(t, hc, http.MethodGet, base+"/rollouts/shop", "", map[string]string{"Accept": "text/html"})
	if code != http.StatusUnauthorized || !strings.Contains(body, `id="login"`) {
		t.Errorf("a browser without a token: %d, want 401 with the sign-in form:\n%.500s", code, body)
	}
	// A real token without rights: 403, naming what is missing.
	code, body, _ = get(t, hc, http.MethodGet, base+"/rollouts/shop", ids.stranger, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "rollouts.rewind.dev") {
		t.Errorf("GET /rollouts/shop as stranger: %d %q, want 403 naming rollouts.rewind.dev", code, body)
	}
	// The viewer sees, but may not act, nor see the members (a cluster-wide right).
	code, body, _ = get(t, hc, http.MethodGet, base+"/rollouts/shop", ids.viewer, nil)
	if code != http.StatusOK || !strings.Contains(body, "shop") {
		t.Fatalf("GET /rollouts/shop as viewer: %d, want 200:\n%.500s", code, body)
	}
	if code, body, _ := get(t, hc, http.MethodGet, base+"/members", ids.viewer, nil); code != http.StatusForbidden || !strings.Contains(body, "memberclusters") {
		t.Errorf("GET /members as viewer: %d %q, want 403 naming memberclusters", code, body)
	}
	m := tokenAttr.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the Rollout page has no action token")
	}
	if code, body, _ := get(t, hc, http.MethodPost, base+"/rollouts/shop/actions/resume", ids.viewer, map[string]string{"X-Rewind-Token": m[1]}); code != http.StatusForbidden || !strings.Contains(body, "update rollouts") {
		t.Errorf("POST resume as viewer: %d %q, want 403 naming update rollouts", code, body)
	}
	ro := &v1alpha1.Rollout{}
	if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "shop"}, ro); err != nil || !ro.Spec.Paused {
		t.Fatalf("a refused resume changed the rollout (paused %v, %v)", ro.Spec.Paused, err)
	}
	// The operator acts, with the token of their own page (another user's is refused).
	_, body, _ = get(t, hc, http.MethodGet, base+"/rollouts/shop", ids.operator, nil)
	om := tokenAttr.FindStringSubmatch(body)
	if om == nil || om[1] == m[1] {
		t.Fatalf("the operator's page must have an action token of its own")
	}
	if code, _, _ := get(t, hc, http.MethodPost, base+"/rollouts/shop/actions/resume", ids.operator, map[string]string{"X-Rewind-Token": m[1]}); code != http.StatusForbidden {
		t.Errorf("POST resume as operator with the viewer's action token: %d, want 403", code)
	}
	if code, body, _ := get(t, hc, http.MethodPost, base+"/rollouts/shop/actions/resume", ids.operator, map[string]string{"X-Rewind-Token": om[1]}); code != http.StatusOK || !strings.Contains(body, "resumed") {
		t.Errorf("POST resume as operator: %d %q, want 200", code, body)
	}
	if err := suite.Hub(t).Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "shop"}, ro); err != nil || ro.Spec.Paused {
		t.Errorf("the operator's resume did not resume the rollout (paused %v, %v)", ro.Spec.Paused, err)
	}

	// ?token= signs in: the token goes into an HttpOnly cookie and out of the address.
	code, _, resp := get(t, hc, http.MethodGet, base+"/rollouts/shop?token="+ids.viewer+"&x=1", "", nil)
	loc := resp.Header.Get("Location")
	if code != http.StatusSeeOther || strings.Contains(loc, ids.viewer) || !strings.HasPrefix(loc, "/rollouts/shop") {
		t.Fatalf("GET ?token=: %d to %q, want 303 to /rollouts/shop without the token", code, loc)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Value == ids.viewer {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("the sign-in cookie must be HttpOnly, Secure and SameSite=Strict: %+v", ck)
	}
	jar, _ := cookiejar.New(nil)
	hc.Jar = jar
	if code, _, _ := get(t, hc, http.MethodGet, base+"/rollouts/shop?token="+ids.viewer, "", nil); code != http.StatusSeeOther {
		t.Fatalf("signing in again: %d", code)
	}
	if code, body, _ := get(t, hc, http.MethodGet, base+"/rollouts/shop", "", nil); code != http.StatusOK || strings.Contains(body, ids.viewer) {
		t.Errorf("GET with the cookie: %d (the page must not hold the token)", code)
	}
	if code, _, _ := get(t, hc, http.MethodGet, base+"/?token=bad-token", "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET ?token= with a bad token: %d, want 401", code)
	}

	// In a browser: the sign-in form, then the live page.
	ctx := browser(t, chromedp.Flag("ignore-certificate-errors", true))
	run(t, ctx, chromedp.Navigate(base+"/rollouts/shop"))
	waitJS(t, ctx, 10*time.Second, `document.querySelector('#login-token')`, `document.body.innerText.slice(0, 1000)`)
	// SetValue, not SendKeys: a token is about a thousand characters, typed one by one slowly.
	run(t, ctx, chromedp.SetValue(chromedp.CSS(`#login-token`), ids.operator), chromedp.Click(chromedp.CSS(`#login-submit`)))
	waitJS(t, ctx, 15*time.Second, `location.pathname === '/rollouts/shop' && document.querySelector('#rollout-head') && document.querySelector('#user')`,
		`[location.href, document.body.innerText.slice(0, 1000)]`)
	user := eval[string](t, ctx, `document.querySelector('#user').textContent`)
	if user != "system:serviceaccount:"+ns+":operator" {
		t.Errorf("the page says it is signed in as %q", user)
	}
	if href := eval[string](t, ctx, `location.href`); strings.Contains(href, ids.operator) {
		t.Errorf("the token is in the address after sign-in")
	}
	if ck := eval[string](t, ctx, `document.cookie`); strings.Contains(ck, ids.operator) {
		t.Errorf("the page's scripts can read the token from the cookie")
	}
	if strings.Contains(html(t, ctx), ids.operator) {
		t.Errorf("the page holds the token")
	}
	// Live: the stream works with the cookie.
	setPaused(t, suite.Hub(t), client.ObjectKey{Namespace: ns, Name: "shop"}, true)
	waitJS(t, ctx, 20*time.Second, `document.querySelector('#rollout-paused')`, `document.querySelector('#rollout-head').innerText`)
	screenshot(t, ctx, "dashboard-controller.png")
}

// The reviews ride out faults of the hub: a reset connection and a 503 on the first
// TokenReview and SubjectAccessReview are retried and the page is served; a hub that keeps
// failing gets 503 (try again), never 401 or 403.
func TestReviewsRideOutFaults(t *testing.T) {
	ns := testenv.Namespace(t, suite.Env.Hub.RESTConfig())
	pausedRollout(t, ns, "shop")
	ids := makeIdentities(t, ns)
	var faulty, injected atomic.Int64
	faulty.Store(2) // the first two reviews of each kind fail
	var seenTR, seenSAR atomic.Int64
	cfg := suite.Env.Hub.RESTConfig()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTrip(func(req *http.Request) (*http.Response, error) {
			var n int64
			switch {
			case strings.HasSuffix(req.URL.Path, "/tokenreviews"):
				n = seenTR.Add(1)
			case strings.HasSuffix(req.URL.Path, "/subjectaccessreviews"):
				n = seenSAR.Add(1)
			default:
				return rt.RoundTrip(req)
			}
			if f := faulty.Load(); f < 0 || n <= f {
				injected.Add(1)
				if n%2 == 1 {
					return nil, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
				}
				return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}}, Request: req,
					Body: io.NopCloser(strings.NewReader(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"injected","reason":"ServiceUnavailable","code":503}`))}, nil
			}
			return rt.RoundTrip(req)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.New(suite.Env.Hub.RESTConfig(), dashboard.Options{Namespace: ns, Auth: &dashboard.Auth{Client: cs, Tries: 4, TTL: time.Nanosecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	hc := hs.Client()

	code, body, _ := get(t, hc, http.MethodGet, hs.URL+"/rollouts/shop", ids.viewer, nil)
	if code != http.StatusOK || !strings.Contains(body, "shop") {
		t.Errorf("GET /rollouts/shop under faults: %d, want 200:\n%.300s", code, body)
	}
	if seenTR.Load() < 3 || seenSAR.Load() < 3 || injected.Load() < 4 {
		t.Fatalf("the faults were not met: %d TokenReviews, %d SubjectAccessReviews, %d faults injected", seenTR.Load(), seenSAR.Load(), injected.Load())
	}
	// A fault is no verdict: the stranger is still told 403 (the hub's answer) once it answers.
	faulty.Store(seenTR.Load() + 2)
	if code, _, _ := get(t, hc, http.MethodGet, hs.URL+"/rollouts/shop", ids.stranger, nil); code != http.StatusForbidden {
		t.Errorf("GET as stranger under faults: %d, want 403", code)
	}
	// A hub that keeps failing: 503, not 401 nor 403.
	faulty.Store(-1)
	if code, _, _ := get(t, hc, http.MethodGet, hs.URL+"/rollouts/shop", ids.viewer, nil); code != http.StatusServiceUnavailable {
		t.Errorf("GET while every review fails: %d, want 503", code)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
