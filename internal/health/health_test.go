package health

import (
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func cr(gen int64, status map[string]any, labels map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "database.example.com/v1", "kind": "MySQLCluster",
		"metadata": map[string]any{"name": "db", "namespace": "ns", "generation": gen},
	}}
	if labels != nil {
		u.Object["metadata"].(map[string]any)["labels"] = labels
	}
	if status != nil {
		u.Object["status"] = status
	}
	return u
}

func TestCRReadiness(t *testing.T) {
	cases := []struct {
		name string
		// obj is the custom resource; want is a substring of the problem ("" = ready).
		obj  *unstructured.Unstructured
		want string
	}{
		{"no status exposes nothing: ready", cr(3, nil, nil), ""},
		{"observedGeneration caught up", cr(3, map[string]any{"observedGeneration": int64(3)}, nil), ""},
		{"observedGeneration behind", cr(3, map[string]any{"observedGeneration": int64(2)}, nil), "not reconciled yet"},
		{"Ready True", cr(1, map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}, nil), ""},
		{"Ready False", cr(1, map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "message": "replica 2 down"}}}, nil), "replica 2 down"},
		{"Ready condition for an old generation", cr(4, map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True", "observedGeneration": int64(3)}}}, nil), "observedGeneration 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := crProblem(tc.obj)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("problem %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCELChecks(t *testing.T) {
	progs, err := CompileCEL([]v1alpha1.CELCheck{
		{Kind: "MySQLCluster", Expression: "self.status.readyReplicas >= 1"},
		{Kind: "MySQLCluster", Expression: "!has(self.metadata.labels) || !('frozen' in self.metadata.labels)", Message: "frozen"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ok := cr(1, map[string]any{"readyReplicas": int64(2)}, nil)
	bad := cr(1, map[string]any{"readyReplicas": int64(0)}, map[string]any{"frozen": "yes"})
	for i, p := range progs["MySQLCluster"] {
		if res, err := p.eval(ok); err != nil || !res {
			t.Errorf("check %d on a healthy object: %v %v", i, res, err)
		}
		if res, err := p.eval(bad); err != nil || res {
			t.Errorf("check %d on an unhealthy object must be false: %v %v", i, res, err)
		}
	}
	if _, err := CompileCEL([]v1alpha1.CELCheck{{Kind: "X", Expression: "self.("}}); err == nil || !strings.Contains(err.Error(), "spec.healthGates.cel") {
		t.Fatalf("a bad expression must be refused naming the field, got %v", err)
	}
}

// A read of an applied object that failed says nothing of its health: it is an error (a fault
// is retried by the caller), never a problem that a gate's timeout or a bake could fail on. An
// object that is not there is a problem.
func TestAFailedReadIsNotUnhealthy(t *testing.T) {
	dep := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "op", "namespace": "ns"}}}
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	for _, tc := range []struct {
		// name says what the read met; err is what it returned.
		name string
		err  error
		// wantErr says the check returns an error; otherwise it reports a problem.
		wantErr bool
	}{
		{"reset connection", &url.Error{Op: "Get", URL: "https://member", Err: syscall.ECONNRESET}, true},
		{"503 while the API server restarts", apierrors.NewServiceUnavailable("restarting"), true},
		{"not found", apierrors.NewNotFound(gvr.GroupResource(), "op"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())
			dyn.PrependReactor("get", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
			problems, _, err := checkApplied(t.Context(), dyn.Resource(gvr).Namespace("ns"), dep, "")
			if (err != nil) != tc.wantErr || (len(problems) > 0) == tc.wantErr {
				t.Fatalf("checkApplied: problems %v, error %v; want an error: %t", problems, err, tc.wantErr)
			}
		})
	}
}
