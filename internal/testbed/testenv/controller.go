package testenv

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/rbac"
	"github.com/rewind-dev/rewind/internal/testbed"
)

// ShippedRBAC returns what `rewind install` applies for the controller's identity: the
// rewind-system namespace, the CRDs, the ServiceAccount, the ClusterRoles, the Role, their
// bindings, and a RoleBinding in each of namespaces. No Deployment.
func ShippedRBAC(namespaces ...string) ([]*unstructured.Unstructured, error) {
	objs, err := install.Manifests(install.Options{Namespaces: namespaces})
	if err != nil {
		return nil, err
	}
	keep := []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"}
	return slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool { return !slices.Contains(keep, u.GetKind()) }), nil
}

// ControllerConfig applies the controller's shipped RBAC to hub (as `rewind install` does,
// with a RoleBinding in each of namespaces, which must exist) and returns a client
// configuration authenticated as the controller's ServiceAccount, with a token from the
// TokenRequest API: the controller's own permissions, not cluster-admin. Run the manager with
// it to prove the shipped RBAC is enough.
func ControllerConfig(t testing.TB, hub *testbed.Cluster, namespaces ...string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := hub.RESTConfig()
	objs, err := ShippedRBAC(namespaces...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(admin, client.Options{Scheme: HubScheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := install.Apply(ctx, c, objs, install.ApplyOptions{}); err != nil {
		t.Fatalf("applying the shipped RBAC: %v", err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(rbac.SystemNamespace).CreateToken(ctx, rbac.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for %s/%s: %v", rbac.SystemNamespace, rbac.ServiceAccount, err)
	}
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = admin.QPS, admin.Burst
	return cfg
}

// KubeconfigFile writes cfg (server, CA and bearer token) as a kubeconfig file readable only
// by its owner, in a folder the test removes, for a process started by the test.
func KubeconfigFile(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "user"}
	kc.CurrentContext = "hub"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
