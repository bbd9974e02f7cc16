//go:build !unit

package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testfixture"
)

// A release that lowers spec.replicas' maximum below what live MySQLClusters use: the preflight
// (spec.preflight unset: Enforce) stops the revision before any cluster changes, naming the
// objects and the field in the Preflight and Stalled conditions; ignoring the checks lets the
// release go on, with the findings recorded.
func TestPreflightEnforceStopsBeforeAnyChange(t *testing.T) {
	f := newFleet(t, waves2())
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate() // replicas 1..5 on every member
	narrow := strings.Replace(testfixture.MySQLCRDYAML, "maximum: 10", "maximum: 3", 1)
	if narrow == testfixture.MySQLCRDYAML {
		t.Fatal("the fixture CRD has no maximum: 10 to lower")
	}
	if err := testfixture.CreateReleaseWithCRD(t.Context(), hub(t), t.TempDir(), f.NS, "mysql-narrow", "2.1.0", healthy, narrow); err != nil {
		t.Fatal(err)
	}
	before := f.Rollout().Status.Revision
	f.SetRelease("mysql-narrow", nil)

	c := f.WaitCondition(v1alpha1.ConditionPreflight, metav1.ConditionFalse, v1alpha1.ReasonPreflightFailed, time.Minute)
	for _, s := range []string{"stopped before any cluster changed", "ObjectRefused", f.CRNS + "/db-00003 .spec.replicas", "member1", "member3", "spec.preflight.ignore", "rewind plan mysql --release mysql-narrow"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("the Preflight condition does not say %q:\n%s", s, c.Message)
		}
	}
	f.WaitCondition(v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonPreflightFailed, time.Minute)
	ro := f.Rollout()
	if ro.Status.Revision != before || ro.Status.CurrentRelease != "mysql-a" {
		t.Errorf("a revision started: revision %d (was %d), current release %s", ro.Status.Revision, before, ro.Status.CurrentRelease)
	}
	var targets v1alpha1.RolloutTargetList
	if err := hub(t).List(t.Context(), &targets, client.InNamespace(f.NS)); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets.Items {
		if tg.Spec.Revision != before || tg.Spec.ToRelease != "mysql-a" {
			t.Errorf("target %s was planned for %s (revision %d)", tg.Name, tg.Spec.ToRelease, tg.Spec.Revision)
		}
	}
	for _, m := range suite.Env.Members {
		if rec := f.Record(m); rec != nil && rec.Release != "mysql-a" {
			t.Errorf("%s was changed: it runs %s", m.Name, rec.Release)
		}
		crd := &unstructured.Unstructured{}
		crd.SetAPIVersion("apiextensions.k8s.io/v1")
		crd.SetKind("CustomResourceDefinition")
		if err := memberClient(t, m).Get(t.Context(), client.ObjectKey{Name: "mysqlclusters.database.example.com"}, crd); err != nil {
			continue // not in the waves
		}
		if strings.Contains(mustJSON(t, crd), `"maximum":3`) {
			t.Errorf("%s: the release's CRD was applied", m.Name)
		}
	}

	// The person accepts what the preflight found: the release goes on, the findings stay on
	// record.
	f.SetRelease("mysql-narrow", func(s *v1alpha1.RolloutSpec) {
		s.Preflight = &v1alpha1.Preflight{Ignore: []string{"ObjectRefused", "BoundTightened"}}
	})
	ro = f.WaitPhase("mysql-narrow", v1alpha1.RolloutSucceeded, 2*time.Minute)
	p := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionPreflight)
	if p == nil || p.Status != metav1.ConditionTrue || !strings.Contains(p.Message, "not enforced") || !strings.Contains(p.Message, "ObjectRefused") {
		t.Errorf("the Preflight condition must record the findings it let through: %+v", p)
	}
}

func mustJSON(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	b, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
