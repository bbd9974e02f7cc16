//go:build !unit

package install_test

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// TestControllerIdentityHasExactlyItsPermissions asks the hub, as the controller's
// ServiceAccount with the shipped RBAC, what it may do.
func TestControllerIdentityHasExactlyItsPermissions(t *testing.T) {
	team := testenv.Namespace(t, env.Hub.RESTConfig())
	other := testenv.Namespace(t, env.Hub.RESTConfig())
	cfg := testenv.ControllerConfig(t, env.Hub, team)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sys := rbac.SystemNamespace
	cases := []accessCase{
		{why: "watches every Rollout", group: "rewind.dev", resource: "rollouts", verb: "watch", allowed: true},
		{why: "writes a Rollout's status", group: "rewind.dev", resource: "rollouts", sub: "status", verb: "patch", ns: team, allowed: true},
		{why: "never writes a Rollout's spec (GitOps owns it)", group: "rewind.dev", resource: "rollouts", verb: "update", ns: team},
		{why: "creates RolloutTargets", group: "rewind.dev", resource: "rollouttargets", verb: "create", ns: team, allowed: true},
		{why: "creates Snapshots", group: "rewind.dev", resource: "snapshots", verb: "create", ns: team, allowed: true},
		// Pull members: the hub copies the releases a target names into the member's hub
		// namespace (internal/controller/target/pull.go), so the controller creates releases.
		{why: "creates copies of releases for pull members", group: "rewind.dev", resource: "operatorreleases", verb: "create", ns: team, allowed: true},
		{why: "never updates a release's spec (releases are immutable)", group: "rewind.dev", resource: "operatorreleases", verb: "update", ns: team},
		{why: "records what it stored of a release from a source", group: "rewind.dev", resource: "operatorreleases", sub: "status", verb: "patch", ns: team, allowed: true},
		{why: "reads a release's values ConfigMaps in an enabled namespace", resource: "configmaps", verb: "get", ns: team, allowed: true},
		{why: "no ConfigMap in a namespace it is not enabled in", resource: "configmaps", verb: "get", ns: other},
		{why: "never creates MemberClusters", group: "rewind.dev", resource: "memberclusters", verb: "create"},
		{why: "writes a MemberCluster's status", group: "rewind.dev", resource: "memberclusters", sub: "status", verb: "patch", allowed: true},
		{why: "no Secret cluster-wide", resource: "secrets", verb: "list"},
		{why: "no Secret in a namespace it is not enabled in", resource: "secrets", verb: "get", ns: other},
		{why: "watches member kubeconfigs in rewind-system", resource: "secrets", verb: "watch", ns: sys, allowed: true},
		{why: "creates the snapshot key in rewind-system", resource: "secrets", verb: "create", ns: sys, allowed: true},
		{why: "never deletes Secrets in rewind-system", resource: "secrets", verb: "delete", ns: sys},
		{why: "reads release manifests in an enabled namespace", resource: "secrets", verb: "get", ns: team, allowed: true},
		{why: "writes snapshot payloads in an enabled namespace", resource: "secrets", verb: "patch", ns: team, allowed: true},
		{why: "deletes old snapshot payloads in an enabled namespace", resource: "secrets", verb: "delete", ns: team, allowed: true},
		{why: "never updates Secrets", resource: "secrets", verb: "update", ns: team},
		{why: "renews its lease in rewind-system", group: "coordination.k8s.io", resource: "leases", verb: "update", ns: sys, allowed: true},
		{why: "no lease elsewhere", group: "coordination.k8s.io", resource: "leases", verb: "update", ns: team},
		{why: "records Events", group: "events.k8s.io", resource: "events", verb: "create", ns: team, allowed: true},
		{why: "checks callers of /metrics", group: "authentication.k8s.io", resource: "tokenreviews", verb: "create", allowed: true},
		{why: "authorizes callers of /metrics", group: "authorization.k8s.io", resource: "subjectaccessreviews", verb: "create", allowed: true},
		{why: "never touches workloads in the hub", group: "apps", resource: "deployments", verb: "create", ns: sys},
		{why: "never changes CRDs in the hub", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", verb: "update"},
		{why: "never grants itself more", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings", verb: "create"},
		{why: "never impersonates", resource: "users", verb: "impersonate"},
	}
	assertAccess(t, cs, cases)
}

// TestMissingPermissionFailsLoudly runs the manager as the controller's ServiceAccount with
// the shipped RBAC and leader election. A member whose kubeconfig Secret lives in a namespace
// the controller may not read reports it in its conditions, naming the Secret and the
// forbidden access; a member whose Secret is in rewind-system is checked normally.
func TestMissingPermissionFailsLoudly(t *testing.T) {
	ctx := t.Context()
	admin := testenv.HubClient(t, env.Hub.RESTConfig())
	elsewhere := testenv.Namespace(t, env.Hub.RESTConfig())
	cfg := testenv.ControllerConfig(t, env.Hub)

	// The hub stands in for a member here: what matters is whether the Secret can be read.
	kc, err := env.Hub.KubeconfigBytes()
	if err != nil {
		t.Fatal(err)
	}
	suffix := strings.ToLower(elsewhere[len(elsewhere)-5:])
	for _, ns := range []string{rbac.SystemNamespace, elsewhere} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kubeconfig-" + suffix, Namespace: ns,
			Labels: map[string]string{controller.LabelMemberKubeconfig: "true"}}, Data: map[string][]byte{"kubeconfig": kc}}
		if err := admin.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), sec) })
	}
	allowed, forbidden := "allowed-"+suffix, "forbidden-"+suffix
	for name, ns := range map[string]string{allowed: rbac.SystemNamespace, forbidden: elsewhere} {
		mc := &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyRef{Namespace: ns, Name: "kubeconfig-" + suffix, Key: "kubeconfig"}}}
		if err := admin.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), mc) })
	}

	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0", ProbeAddr: "0", SkipNameValidation: true,
		LeaderElection: true, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond})
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

	cond := func(name string) *metav1.Condition {
		mc := &v1alpha1.MemberCluster{}
		if err := admin.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(mc.Status.Conditions, v1alpha1.ConditionReady)
	}
	var got *metav1.Condition
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = cond(forbidden)
		return got != nil, nil
	})
	if err != nil {
		t.Fatalf("the controller (as its ServiceAccount) never reported on %s: %v", forbidden, err)
	}
	if got.Status != metav1.ConditionFalse || got.Reason != v1alpha1.ReasonSecretForbidden {
		t.Errorf("Ready of %s: %s %s, want False %s", forbidden, got.Status, got.Reason, v1alpha1.ReasonSecretForbidden)
	}
	for _, want := range []string{elsewhere + "/kubeconfig-" + suffix, "forbidden", `cannot get resource "secrets"`, "system:serviceaccount:rewind-system:rewind-controller"} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("the message must name %q: %s", want, got.Message)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = cond(allowed)
		return got != nil && got.Status == metav1.ConditionTrue, nil
	})
	if err != nil {
		t.Errorf("a member whose Secret is in rewind-system is not Ready under the shipped RBAC: %+v", got)
	}
}

// accessCase is one access review: what an identity does (or must never do) and whether it is
// allowed.
type accessCase struct {
	why                                    string
	group, resource, sub, verb, ns, nonRes string
	allowed                                bool
}

// assertAccess asks the API server, as cs's identity (SelfSubjectAccessReview), each case.
func assertAccess(t *testing.T, cs kubernetes.Interface, cases []accessCase) {
	t.Helper()
	for _, c := range cases {
		spec := authorizationv1.SelfSubjectAccessReviewSpec{}
		if c.nonRes != "" {
			spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: c.nonRes, Verb: c.verb}
		} else {
			spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Group: c.group, Resource: c.resource, Subresource: c.sub, Verb: c.verb, Namespace: c.ns}
		}
		res, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status.Allowed != c.allowed {
			t.Errorf("%s: %s %s/%s%s in %q: allowed %v, want %v", c.why, c.verb, c.resource, c.sub, c.nonRes, c.ns, res.Status.Allowed, c.allowed)
		}
	}
}
