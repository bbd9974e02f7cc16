package apply

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/rewind-dev/rewind/internal/member"
)

// RoleOf orders kinds by what discovery says of them, not by their names: a kind rewind has
// never heard of gets a stage from its group, scope and categories.
func TestRoleOf(t *testing.T) {
	all := []string{"all"}
	for _, tc := range []struct {
		name   string
		group  string // of the resource
		res    string // resource name
		ns     bool   // namespaced
		cats   []string
		custom bool // a custom resource of a CRD in the release
		want   Stage
	}{
		{"CRD", "apiextensions.k8s.io", "customresourcedefinitions", false, nil, false, StageCRDs},
		{"Namespace", "", "namespaces", false, nil, false, StageNamespaces},
		{"ServiceAccount", "", "serviceaccounts", true, nil, false, StageRBAC},
		{"ClusterRole", "rbac.authorization.k8s.io", "clusterroles", false, nil, false, StageRBAC},
		{"RoleBinding", "rbac.authorization.k8s.io", "rolebindings", true, nil, false, StageRBAC},
		{"ConfigMap", "", "configmaps", true, nil, false, StageConfig},
		{"Secret", "", "secrets", true, nil, false, StageConfig},
		{"PriorityClass", "scheduling.k8s.io", "priorityclasses", false, nil, false, StageConfig},
		{"RuntimeClass", "node.k8s.io", "runtimeclasses", false, nil, false, StageConfig},
		{"IngressClass", "networking.k8s.io", "ingressclasses", false, nil, false, StageConfig},
		{"ValidatingWebhookConfiguration", "admissionregistration.k8s.io", "validatingwebhookconfigurations", false, nil, false, StageWebhooks},
		{"ValidatingAdmissionPolicy", "admissionregistration.k8s.io", "validatingadmissionpolicies", false, nil, false, StageWebhooks},
		{"APIService", "apiregistration.k8s.io", "apiservices", false, nil, false, StageWebhooks},
		{"Service (in all)", "", "services", true, all, false, StageWebhooks},
		{"Deployment", "apps", "deployments", true, all, false, StageWorkloads},
		{"DaemonSet", "apps", "daemonsets", true, all, false, StageWorkloads},
		{"CronJob", "batch", "cronjobs", true, all, false, StageWorkloads},
		{"HorizontalPodAutoscaler", "autoscaling", "horizontalpodautoscalers", true, all, false, StageWorkloads},
		{"a CRD kind that puts itself in all", "argoproj.io", "rollouts", true, all, false, StageWorkloads},
		{"PodDisruptionBudget", "policy", "poddisruptionbudgets", true, nil, false, StageOthers},
		{"Ingress", "networking.k8s.io", "ingresses", true, nil, false, StageOthers},
		{"NetworkPolicy", "networking.k8s.io", "networkpolicies", true, nil, false, StageOthers},
		{"ServiceMonitor (CRD already on the member)", "monitoring.coreos.com", "servicemonitors", true, nil, false, StageOthers},
		{"ClusterIssuer (cluster-scoped CR)", "cert-manager.io", "clusterissuers", false, nil, false, StageOthers},
		{"GatewayClass (a class in a Kubernetes API group, as IngressClass)", "gateway.networking.k8s.io", "gatewayclasses", false, nil, false, StageConfig},
		{"ReferenceGrant", "gateway.networking.k8s.io", "referencegrants", true, nil, false, StageOthers},
		{"a default CR of the release's own CRD", "example.com", "widgets", true, nil, true, StageOthers},
	} {
		res := member.Resource{GVR: schema.GroupVersionResource{Group: tc.group, Version: "v1", Resource: tc.res}, Namespaced: tc.ns, Categories: tc.cats}
		if got := RoleOf(schema.GroupVersionKind{Group: tc.group, Version: "v1", Kind: tc.name}, res, tc.custom); got != tc.want {
			t.Errorf("%s: stage %s, want %s", tc.name, got, tc.want)
		}
	}
}
