//go:build !unit

package dashboard

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

// liveChange is a snapshot taken by a rollout and what changed on its member since.
type liveChange struct {
	f          *fleet.Fleet
	snap       string
	oldVersion string
	secrets    []string // every Secret value of the member's CR namespace, old and new
}

// changeSinceSnapshot rolls mysql-a then mysql-b to member1 (a snapshot is taken before the
// upgrade), stops the controller, then changes on member1 a MySQLCluster's spec.version (to
// 9.9.99) and a Secret's value.
func changeSinceSnapshot(t *testing.T) liveChange {
	t.Helper()
	f := suite.New(t, []v1alpha1.Wave{{Name: "canary", Clusters: []string{"member1"}, MaxConcurrency: 1}})
	stop := suite.StartManager(t, f.NS, controller.Options{})
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	f.SetRelease("mysql-b", nil)
	ro := f.WaitPhase("mysql-b", v1alpha1.RolloutSucceeded, 3*time.Minute)
	stop()
	snap := f.SnapshotsOf(ro.Status.Revision)["member1"]
	if snap == "" {
		t.Fatalf("no snapshot of member1 before the upgrade to mysql-b")
	}

	// On member1, after the snapshot: a MySQLCluster's spec.version and a Secret's value change.
	mc := suite.Member(t, "member1")
	c := fleet.MemberClient(t, mc)
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(testfixture.MySQLGVR.GroupVersion().WithKind("MySQLCluster"))
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: f.CRNS, Name: "db-00001"}, cr); err != nil {
		t.Fatal(err)
	}
	oldVersion, _, _ := unstructured.NestedString(cr.Object, "spec", "version")
	if err := unstructured.SetNestedField(cr.Object, "9.9.99", "spec", "version"); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(t.Context(), cr); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: f.CRNS, Name: "db-00002-credentials"}, sec); err != nil {
		t.Fatal(err)
	}
	const newSecret = "n3w-s3cr3t-value-never-shown"
	sec.Data["password"] = []byte(newSecret)
	if err := c.Update(t.Context(), sec); err != nil {
		t.Fatal(err)
	}
	secrets := append(secretValues(t, mc, f.CRNS), testfixture.SecretValue("db-00002"), newSecret)

	return liveChange{f: f, snap: snap, oldVersion: oldVersion, secrets: secrets}
}

// A snapshot's diff against the live cluster, on the page: a field changed on the member since
// the snapshot shows up with its old and new values, a Secret changed since shows up as
// changed with every value redacted, and no Secret value (old or new) reaches the DOM.
func TestSnapshotDiffAgainstTheLiveCluster(t *testing.T) {
	lc := changeSinceSnapshot(t)
	f, snap, oldVersion, secrets := lc.f, lc.snap, lc.oldVersion, lc.secrets
	base := serve(t, f.NS, false)
	ctx := browser(t)
	run(t, ctx, chromedp.Navigate(base+"/snapshots/"+snap))
	waitJS(t, ctx, 15*time.Second, `document.querySelector('#diff-live')`, `document.body.innerText.slice(0, 2000)`)
	run(t, ctx, chromedp.SetValue(chromedp.CSS(`select[name=diff]`), ":live"), chromedp.Click(chromedp.CSS(`.diff-form button`)))
	waitJS(t, ctx, 90*time.Second, `document.querySelector('#diff-title') && document.querySelector('#diff-title').innerText.includes('live cluster member1') && (document.querySelector('#changes') || document.querySelector('.failure'))`,
		`document.body.innerText.slice(0, 3000)`)
	if q := eval[string](t, ctx, `location.search`); !strings.Contains(q, "diff="+url.QueryEscape(":live")) {
		t.Errorf("the live diff's address is %q", q)
	}
	changes := eval[string](t, ctx, `document.querySelector('#changes') ? document.querySelector('#changes').innerText : document.body.innerText.slice(0, 3000)`)
	t.Logf("diff against the live cluster:\n%s", changes)
	if !strings.Contains(changes, "db-00001") || !strings.Contains(changes, "spec.version") || !strings.Contains(changes, oldVersion) || !strings.Contains(changes, "9.9.99") {
		t.Errorf("the live diff must show db-00001's spec.version %s → 9.9.99", oldVersion)
	}
	if !strings.Contains(changes, "db-00002-credentials") || !strings.Contains(changes, "<redacted>") {
		t.Errorf("the live diff must show the changed Secret db-00002-credentials, its values <redacted>")
	}
	mustNotContain(t, html(t, ctx), "the live diff", secrets)
}

// The controller-served dashboard offers the diff against the live cluster too, captured with
// the controller's member access by the same code as `rewind snapshot diff --live`: a user
// allowed to get snapshots (and see rollouts) in the namespace gets it, with a real token of
// the hub, showing the changed field and no Secret value; a user who may see the rollouts but
// not get snapshots is refused (403 naming snapshots), as for the snapshot page itself.
func TestControllerServesTheDiffAgainstTheLiveCluster(t *testing.T) {
	lc := changeSinceSnapshot(t)
	ns := lc.f.NS
	ids := makeIdentities(t, ns)
	noSnapshots := tokenWithRules(t, ns, "rollouts-only", rbacv1.PolicyRule{APIGroups: []string{v1alpha1.GroupVersion.Group},
		Resources: []string{"rollouts"}, Verbs: []string{"get", "list", "watch"}})
	certDir, pool := serveCert(t)
	addr := testenv.FreeAddr(t)
	suite.StartManager(t, ns, controller.Options{DashboardAddr: addr, DashboardNamespace: ns, DashboardCertDir: certDir})
	base := "https://" + addr
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
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
	page := base + "/snapshots/" + lc.snap

	// The snapshot page offers the live cluster as the other side of a diff.
	var body string
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var code int
		code, body, _ = get(t, hc, http.MethodGet, page, ids.viewer, nil)
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("GET %s as viewer: %v\n%.1000s", page, err, body)
	}
	if !strings.Contains(body, `id="diff-live"`) {
		t.Errorf("the controller-served snapshot page does not offer the live cluster:\n%.2000s", body)
	}

	// The diff, with the viewer's token (get snapshots in the namespace).
	live := page + "?diff=" + url.QueryEscape(":live")
	code, body, _ := get(t, hc, http.MethodGet, live, ids.viewer, nil)
	if code != http.StatusOK {
		t.Fatalf("GET the live diff as viewer: %d\n%.2000s", code, body)
	}
	if strings.Contains(body, "cannot read member clusters") || !strings.Contains(body, `id="changes"`) {
		t.Fatalf("the controller-served dashboard shows no live diff:\n%.3000s", body)
	}
	for _, want := range []string{"live cluster member1", "db-00001", "spec.version", lc.oldVersion, "9.9.99", "db-00002-credentials", "&lt;redacted&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the live diff must show %q (db-00001's spec.version %s → 9.9.99, the Secret redacted):\n%.3000s", want, lc.oldVersion, body)
		}
	}
	mustNotContain(t, body, "the controller-served live diff", lc.secrets)

	// Without the right to get snapshots: refused, naming it; without a token: 401.
	if code, body, _ := get(t, hc, http.MethodGet, live, noSnapshots, nil); code != http.StatusForbidden || !strings.Contains(body, "snapshots.rewind.dev") {
		t.Errorf("GET the live diff without the right to get snapshots: %d %.300q, want 403 naming snapshots.rewind.dev", code, body)
	} else {
		mustNotContain(t, body, "the refusal", lc.secrets)
	}
	if code, _, _ := get(t, hc, http.MethodGet, live, "", nil); code != http.StatusUnauthorized {
		t.Errorf("GET the live diff without a token: %d, want 401", code)
	}
}

// tokenWithRules makes a ServiceAccount of ns bound to a Role of rules and returns its token.
func tokenWithRules(t *testing.T, ns, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(suite.Env.Hub.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
