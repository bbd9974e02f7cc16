package member

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	cfg.Timeout = 15 * time.Second
	cfg.QPS = 100
	cfg.Burst = 200
	return cfg, nil
}

// Info is what a check of a member finds.
type Info struct {
	ClusterID     string
	ServerVersion string
	Records       []Record
}

// Check connects to a member and reads its identity and installed-version records.
func Check(ctx context.Context, cfg *rest.Config) (*Info, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace kube-system for the cluster ID: %w", err)
	}
	recs, err := ListRecords(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Info{ClusterID: string(ns.UID), ServerVersion: v.GitVersion, Records: recs}, nil
}

// Installed converts records to their API form.
func Installed(recs []Record) []v1alpha1.InstalledRelease {
	out := make([]v1alpha1.InstalledRelease, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.InstalledRelease())
	}
	return out
}
