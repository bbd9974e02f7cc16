//go:build !unit

package orchestration

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/cli"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
	"github.com/rewind-dev/rewind/internal/testfixture"
	"github.com/rewind-dev/rewind/test/fleet"
)

// A release that lowers spec.replicas' maximum below what live MySQLClusters use: the preflight
// (spec.preflight unset: Enforce) stops the revision before any cluster changes, naming the
// objects and the field in the Preflight and Stalled conditions; ignoring the checks lets the
// release go on, with the findings recorded.
func TestPreflightEnforceStopsBeforeAnyChange(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
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

// memberState is the resourceVersion of every object the release or the fleet put on each
// member the rollout targets (the CRD, the record, the operator's objects, the MySQLClusters
// and their children): any write changes one.
func memberState(t *testing.T, f *fleet.Fleet) map[string]string {
	t.Helper()
	out := map[string]string{}
	kinds := []schema.GroupVersionResource{
		{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
		testfixture.MySQLGVR,
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "apps", Version: "v1", Resource: "statefulsets"},
		{Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "services"},
	}
	for _, m := range suite.Env.Members {
		dyn := testenv.Member(t, m).Dynamic
		for _, gvr := range kinds {
			list, err := dyn.Resource(gvr).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range list.Items {
				ns := o.GetNamespace()
				if ns != "" && ns != f.OpNS && ns != f.CRNS && ns != member.RecordNamespace {
					continue
				}
				if gvr.Resource == "customresourcedefinitions" && o.GetName() != "mysqlclusters.database.example.com" {
					continue
				}
				out[m.Name+" "+gvr.Resource+" "+ns+"/"+o.GetName()] = o.GetResourceVersion()
			}
		}
	}
	return out
}

func assertSameState(t *testing.T, when string, before, after map[string]string) {
	t.Helper()
	crs := 0
	for k, v := range before {
		if strings.Contains(k, " mysqlclusters ") {
			crs++
		}
		if after[k] != v {
			t.Errorf("%s: %s changed (resourceVersion %s -> %q)", when, k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s was created", when, k)
		}
	}
	if crs == 0 {
		t.Errorf("%s: no MySQLCluster in the state compared: the comparison proves nothing", when)
	}
}

// A release that narrows an enum the live MySQLClusters use: a dry run (spec.dryRun) plans it
// into status.plan and the Planned condition, rewind plan names the refused objects, and when
// the dry run is turned off Enforce stops the revision; through all of it no object on any
// member changes.
func TestPreflightEnumNarrowedDryRunThenEnforce(t *testing.T) {
	f := newFleet(t, fleet.TwoWaves())
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate() // spec.version 8.0.30 .. 8.0.35 on every member (db-00000 .. db-00005)
	enum := func(values ...string) string {
		crd := strings.Replace(testfixture.MySQLCRDYAML, "              version:\n                type: string\n",
			"              version:\n                type: string\n                enum: ["+strings.Join(values, ", ")+"]\n", 1)
		if crd == testfixture.MySQLCRDYAML {
			t.Fatal("the fixture CRD has no spec.version to restrict")
		}
		return crd
	}
	all := []string{"8.0.30", "8.0.31", "8.0.32", "8.0.33", "8.0.34", "8.0.35", "8.0.36", "8.0.37", "8.0.38", "8.0.39"}
	if err := testfixture.CreateReleaseWithCRD(t.Context(), hub(t), t.TempDir(), f.NS, "mysql-enum", "2.1.0", healthy, enum(all...)); err != nil {
		t.Fatal(err)
	}
	if err := testfixture.CreateReleaseWithCRD(t.Context(), hub(t), t.TempDir(), f.NS, "mysql-enum-narrow", "2.2.0", healthy, enum(all[:4]...)); err != nil {
		t.Fatal(err)
	}
	// The enum every live value is in: nothing is refused, the release goes on.
	f.SetRelease("mysql-enum", nil)
	f.WaitPhase("mysql-enum", v1alpha1.RolloutSucceeded, 3*time.Minute)
	before := memberState(t, f)
	revision := f.Rollout().Status.Revision

	// The dry run: planned, not rolled out.
	f.SetRelease("mysql-enum-narrow", func(s *v1alpha1.RolloutSpec) { s.DryRun = true })
	c := f.WaitCondition(v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, 2*time.Minute)
	ro := f.Rollout()
	if ro.Status.Revision != revision || ro.Status.CurrentRelease != "mysql-enum" {
		t.Errorf("the dry run started a revision: %d (was %d), current release %s", ro.Status.Revision, revision, ro.Status.CurrentRelease)
	}
	p := ro.Status.Plan
	if p == nil || p.Release != "mysql-enum-narrow" || p.ObservedGeneration != ro.Generation || len(p.Clusters) != 3 {
		t.Fatalf("status.plan: %+v (condition %s)", p, c.Message)
	}
	for _, s := range []string{"release mysql-enum-narrow planned on 3 clusters (3 to upgrade)", "nothing was changed"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("the Planned condition does not say %q: %s", s, c.Message)
		}
	}
	for _, cp := range p.Clusters {
		// db-00004 (8.0.34) and db-00005 (8.0.35) are refused.
		if cp.Error != "" || cp.Path != v1alpha1.PathUpgrade || cp.RefusedObjects != 2 || cp.CustomResources != 6 || cp.Bytes == 0 ||
			cp.CRDFindings == 0 || cp.Errors < 3 || cp.Updates == 0 || cp.SnapshotEstimate == "" {
			t.Errorf("%s: plan %+v", cp.Cluster, cp)
		}
		findings := strings.Join(cp.Findings, "\n")
		for _, s := range []string{"EnumNarrowed", "ObjectRefused", f.CRNS + "/db-00004 .spec.version", f.CRNS + "/db-00005 .spec.version"} {
			if !strings.Contains(findings, s) {
				t.Errorf("%s: the plan's findings do not name %q:\n%s", cp.Cluster, s, findings)
			}
		}
		// The rollout took snapshots of each cluster: the estimate comes from their measured rate.
		if !strings.HasPrefix(cp.SnapshotEstimate, "about ") {
			t.Errorf("%s: snapshot estimate %q, want one from the measured rate", cp.Cluster, cp.SnapshotEstimate)
		}
	}
	out, err := cli.Run(t.Context(), "plan", "mysql", "--kubeconfig", suite.Env.Hub.Kubeconfig, "-n", f.NS)
	if err == nil || !strings.Contains(out, f.CRNS+"/db-00004 .spec.version") || !strings.Contains(out, "capture time about") {
		t.Errorf("rewind plan must name the refused objects and fail: %v\n%s", err, out)
	}
	assertSameState(t, "after the dry run", before, memberState(t, f))

	// The dry run off: Enforce stops the revision before any cluster changes.
	f.SetRelease("mysql-enum-narrow", func(s *v1alpha1.RolloutSpec) { s.DryRun = false })
	c = f.WaitCondition(v1alpha1.ConditionPreflight, metav1.ConditionFalse, v1alpha1.ReasonPreflightFailed, 2*time.Minute)
	for _, s := range []string{"stopped before any cluster changed", "ObjectRefused", f.CRNS + "/db-00004 .spec.version", "member1", "member2", "member3"} {
		if !strings.Contains(c.Message, s) {
			t.Errorf("the Preflight condition does not say %q:\n%s", s, c.Message)
		}
	}
	ro = f.Rollout()
	if ro.Status.Revision != revision || ro.Status.Plan != nil || meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.ConditionPlanned) != nil {
		t.Errorf("revision %d (was %d); the dry run's plan must be gone: %+v", ro.Status.Revision, revision, ro.Status.Plan)
	}
	assertSameState(t, "after Enforce stopped the release", before, memberState(t, f))
}

// A release whose conversion webhook (served here over TLS, named by URL with the caBundle of
// the CA that signed its certificate) drops spec.config on the way back to v1alpha1: the round
// trip names the field before the rollout starts, in the dry run's plan and in rewind plan;
// then the release rolls out (the lost field is a warning) and the members' API servers convert
// through the same webhook.
func TestPreflightConversionWebhookDropsAFieldOnTheWayBack(t *testing.T) {
	certPEM, keyPEM, err := suite.Env.ServingCert("lossy-conversion")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		review := apiextensionsv1.ConversionReview{}
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not a ConversionReview", http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(raw.Raw); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			u.SetAPIVersion(review.Request.DesiredAPIVersion)
			if review.Request.DesiredAPIVersion == "database.example.com/v1alpha1" {
				unstructured.RemoveNestedField(u.Object, "spec", "config") // the bug
			}
			b, _ := u.MarshalJSON()
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
		}
		review.Response, review.Request = resp, nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	// Closed after the fleet is cleaned up (cleanups run last first): the CRD is deleted while
	// its webhook still answers.
	t.Cleanup(srv.Close)

	f := newFleet(t, fleet.TwoWaves())
	startManager(t, f.NS, nil)
	f.WaitPhase("mysql-a", v1alpha1.RolloutSucceeded, 2*time.Minute)
	f.Populate()
	for _, m := range suite.Env.Members[:3] {
		crs := testenv.Member(t, m).Dynamic.Resource(testfixture.MySQLGVR).Namespace(f.CRNS)
		patch := []byte(`{"spec":{"config":"max_connections=500"}}`)
		cr, err := crs.Patch(t.Context(), "db-00000", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// As its operator would: the new generation is reconciled (the health gate asks).
		_ = unstructured.SetNestedField(cr.Object, cr.GetGeneration(), "status", "observedGeneration")
		if _, err := crs.UpdateStatus(t.Context(), cr, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	crd := testfixture.MySQLCRDv1beta1YAML + fmt.Sprintf(`  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        url: %s/convert
        caBundle: %s
`, srv.URL, base64.StdEncoding.EncodeToString(suite.Env.CABundle()))
	if err := testfixture.CreateReleaseWithCRD(t.Context(), hub(t), t.TempDir(), f.NS, "mysql-conv", "3.0.0", healthy, crd); err != nil {
		t.Fatal(err)
	}
	before := memberState(t, f)

	// Before the rollout starts: the dry run's plan and rewind plan name the field.
	f.SetRelease("mysql-conv", func(s *v1alpha1.RolloutSpec) { s.DryRun = true })
	f.WaitCondition(v1alpha1.ConditionPlanned, metav1.ConditionTrue, v1alpha1.ReasonPlanned, 2*time.Minute)
	p := f.Rollout().Status.Plan
	if p == nil || len(p.Clusters) != 3 {
		t.Fatalf("status.plan: %+v", p)
	}
	for _, cp := range p.Clusters {
		findings := strings.Join(cp.Findings, "\n")
		if cp.Error != "" || cp.RoundTripFindings == 0 || !strings.Contains(findings, "FieldLost") || !strings.Contains(findings, f.CRNS+"/db-00000 .spec.config") ||
			strings.Contains(findings, "ConversionNotVerified") {
			t.Errorf("%s: the plan must name .spec.config lost on the way back: %+v", cp.Cluster, cp)
		}
	}
	out, err := cli.Run(t.Context(), "plan", "mysql", "--kubeconfig", suite.Env.Hub.Kubeconfig, "-n", f.NS)
	t.Logf("rewind plan mysql:\n%s", out)
	if err != nil || !strings.Contains(out, "FieldLost") || !strings.Contains(out, f.CRNS+"/db-00000 .spec.config") ||
		!strings.Contains(out, "converted back from v1beta1 to v1alpha1 by the release's CRD (Webhook)") {
		t.Errorf("rewind plan must name the field the webhook drops on the way back: %v\n%s", err, out)
	}
	assertSameState(t, "after the plans", before, memberState(t, f))

	// The lost field is a warning: the release rolls out, and each member's API server converts
	// through the webhook the plan called.
	f.SetRelease("mysql-conv", func(s *v1alpha1.RolloutSpec) { s.DryRun = false })
	f.WaitPhase("mysql-conv", v1alpha1.RolloutSucceeded, 3*time.Minute)
	n := calls.Load()
	v1beta1 := testfixture.MySQLGVR
	v1beta1.Version = "v1beta1"
	got, err := testenv.Member(t, suite.Env.Members[0]).Dynamic.Resource(v1beta1).Namespace(f.CRNS).Get(t.Context(), "db-00000", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading a MySQLCluster at v1beta1 through the webhook: %v", err)
	}
	if c, _, _ := unstructured.NestedString(got.Object, "spec", "config"); c != "max_connections=500" || calls.Load() == n {
		t.Errorf("the member's API server did not convert through the webhook: spec.config %q, calls %d -> %d", c, n, calls.Load())
	}
}
