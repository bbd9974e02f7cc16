//go:build !unit

package dashboard

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

// A snapshot's diff against the live cluster, on the page: a field changed on the member since
// the snapshot shows up with its old and new values, a Secret changed since shows up as
// changed with every value redacted, and no Secret value (old or new) reaches the DOM.
func TestSnapshotDiffAgainstTheLiveCluster(t *testing.T) {
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
