package member

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// DefaultKubeconfigKey is the Secret key that holds a member's kubeconfig.
const DefaultKubeconfigKey = "kubeconfig"

// Scheme is what member clients decode: the built-in types.
var Scheme = runtime.NewScheme()

func init() {
	_ = clientgoscheme.AddToScheme(Scheme)
}

// RESTConfigFromSecret builds a client configuration for a member from its kubeconfig Secret.
// Errors never include the kubeconfig's content.
func RESTConfigFromSecret(secret *corev1.Secret, key string) (*rest.Config, error) {
	if key == "" {
		key = DefaultKubeconfigKey
	}
	data, ok := secret.Data[key]
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no key %q holding a kubeconfig", secret.Namespace, secret.Name, key)
	}
	return RESTConfigFromKubeconfig(data)
}

// RESTConfigFromKubeconfig parses a kubeconfig (its current context) with rewind's timeouts.
func RESTConfigFromKubeconfig(data []byte) (*rest.Config, error) {
	cc, err := clientcmd.NewClientConfigFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig cannot be parsed: %w", err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig has no usable current context: %w", err)
	}
	cfg.Timeout = RequestTimeout
	return cfg, nil
}

// Info is what a check of a member finds.
type Info struct {
	ClusterID     string
	ServerVersion string
	Records       []Record
}

// Check reads the member's identity and installed-version records.
func (c *Cluster) Check(ctx context.Context) (*Info, error) {
	v, err := c.discovery.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	id, err := c.ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := ListRecords(ctx, c.Client)
	if err != nil {
		return nil, err
	}
	return &Info{ClusterID: id, ServerVersion: v.GitVersion, Records: recs}, nil
}

// Installed converts records to their API form.
func Installed(recs []Record) []v1alpha1.InstalledRelease {
	out := make([]v1alpha1.InstalledRelease, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.InstalledRelease())
	}
	return out
}
