//go:build !unit

package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/test/fleet"
)

// The page's Approve does what `rewind rollout approve` does: a cluster held because a metric
// of its health gate is inconclusive (waiting for AwaitingApproval) is approved (its target
// gets approved.rewind.dev/metrics set to the revision), rather than the wave.
func TestApproveFromThePageReleasesAHeldTarget(t *testing.T) {
	c := suite.Hub(t)
	ns := testenv.Namespace(t, suite.Env.Hub.RESTConfig())
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}, Spec: v1alpha1.RolloutSpec{
		Operator: fleet.Operator, Release: "mysql-b", InstallNamespace: "mysql-system",
		Waves: []v1alpha1.Wave{{Name: "canary", Clusters: []string{"member1"}}, {Name: "rest", Clusters: []string{"member2"}}}}}
	if err := c.Create(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	ro.Status = v1alpha1.RolloutStatus{Revision: 3, CurrentRelease: "mysql-b", PreviousRelease: "mysql-a", Phase: v1alpha1.RolloutProgressing, ClustersDone: "0/2"}
	if err := c.Status().Update(t.Context(), ro); err != nil {
		t.Fatal(err)
	}
	var held, other *v1alpha1.RolloutTarget
	for i, cl := range []string{"member1", "member2"} {
		tg := &v1alpha1.RolloutTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held-" + cl, Labels: map[string]string{v1alpha1.LabelRollout: "held"}},
			Spec: v1alpha1.RolloutTargetSpec{Rollout: "held", Cluster: cl, Revision: 3, Wave: int32(i), Path: v1alpha1.PathUpgrade,
				FromRelease: "mysql-a", ToRelease: "mysql-b", Operator: fleet.Operator, InstallNamespace: "mysql-system", Snapshot: "snap-" + cl}}
		if err := c.Create(t.Context(), tg); err != nil {
			t.Fatal(err)
		}
		tg.Status = v1alpha1.RolloutTargetStatus{Revision: 3, Path: v1alpha1.PathUpgrade, Phase: v1alpha1.ClusterPending}
		if i == 0 {
			tg.Status.Phase, tg.Status.Step, tg.Status.WaitingFor = v1alpha1.ClusterUpgrading, "HealthGates", v1alpha1.ReasonAwaitingApproval
			tg.Status.Message = "metric error-rate is inconclusive: approve with rewind rollout approve held"
			held = tg
		} else {
			other = tg
		}
		if err := c.Status().Update(t.Context(), tg); err != nil {
			t.Fatal(err)
		}
	}

	url := serve(t, ns, true)
	ctx := browser(t)
	run(t, ctx, chromedp.Navigate(url+"/rollouts/held"))
	waitJS(t, ctx, 10*time.Second, `document.querySelector('#cell-member1') && document.querySelector('#cell-member1').dataset.phase === 'Upgrading' && document.querySelector('button[data-action=approve]')`,
		`document.body.innerText.slice(0, 2000)`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`button[data-action=approve]`)))
	waitJS(t, ctx, 5*time.Second, `document.querySelector('#confirm').open`, `document.querySelector('#confirm').outerHTML`)
	run(t, ctx, chromedp.Click(chromedp.CSS(`#confirm-ok`)))
	waitJS(t, ctx, 10*time.Second, `document.querySelector('#flash').innerText.includes('inconclusive metrics of cluster member1 approved for revision 3')`,
		`document.querySelector('#flash').innerText`)

	// The action answered once its patch was written: read what the hub has now.
	want := fmt.Sprint(ro.Status.Revision)
	for _, tg := range []*v1alpha1.RolloutTarget{held, other} {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(tg), tg); err != nil {
			t.Fatal(err)
		}
	}
	if got := held.Annotations[v1alpha1.AnnotationApprovedMetrics]; got != want {
		t.Errorf("the held target's %s is %q after the page's approve, want %q", v1alpha1.AnnotationApprovedMetrics, got, want)
	}
	if got, ok := other.Annotations[v1alpha1.AnnotationApprovedMetrics]; ok {
		t.Errorf("the target not held (member2) was approved too: %q", got)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(ro), ro); err != nil {
		t.Fatal(err)
	}
	if got, ok := ro.Annotations[v1alpha1.AnnotationApprovedPrefix+"canary"]; ok {
		t.Errorf("the page approved wave canary (%q) instead of the held cluster, unlike rewind rollout approve", got)
	}
}
