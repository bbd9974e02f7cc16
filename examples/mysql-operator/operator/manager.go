package operator

import (
	"crypto/tls"
	"fmt"
	"io"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options configure one operator process.
type Options struct {
	Build Build
	// FailReconcile: see Reconciler.FailReconcile (flag --fail-reconcile).
	FailReconcile bool
	// FailOnConfig: see Reconciler.FailOnConfig (flag --fail-on-config).
	FailOnConfig string
	// WebhookHost and WebhookPort are where the conversion webhook listens (builds that serve
	// it); flag --webhook-port.
	WebhookHost string
	WebhookPort int
	// GetCertificate serves the webhook's TLS certificate; when nil, the certificate is read
	// from CertDir (tls.crt, tls.key), as in a pod with a mounted certificate Secret.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	CertDir        string
	// Logger receives the manager's logs (discarded when zero).
	Logger logr.Logger
	// SkipNameValidation allows several managers in one process (the testbed's runner).
	SkipNameValidation bool
}

// ParseArgs reads the container arguments of the operator's Deployment into o. Arguments the
// operator does not know (--leader-elect, --metrics-bind-address, ...) are ignored, as an
// operator binary built with more flags would accept them.
func (o *Options) ParseArgs(args []string) error {
	fs := pflag.NewFlagSet("mysql-operator", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	fs.BoolVar(&o.FailReconcile, "fail-reconcile", o.FailReconcile, "fail every reconcile (a deliberately bad build)")
	fs.StringVar(&o.FailOnConfig, "fail-on-config", o.FailOnConfig, "fail reconciling MySQLClusters whose spec.config contains this text (a deliberately bad build)")
	fs.IntVar(&o.WebhookPort, "webhook-port", o.WebhookPort, "port of the conversion webhook")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "folder with tls.crt and tls.key for the webhook")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("operator arguments %q: %w", args, err)
	}
	return nil
}

// Scheme has the built-in types the operator creates.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	return s
}

// NewManager returns a manager that runs the build's reconciler (and, for builds that serve it,
// the conversion webhook) against the cluster of cfg.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	mopts := ctrl.Options{
		Scheme:                 Scheme(),
		Logger:                 o.Logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &o.SkipNameValidation},
	}
	if o.Build.ServesConversion {
		wo := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.CertDir}
		if o.GetCertificate != nil {
			get := o.GetCertificate
			wo.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = get }}
		}
		mopts.WebhookServer = webhook.NewServer(wo)
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, err
	}
	if o.Build.ServesConversion {
		mgr.GetWebhookServer().Register("/convert", ConversionHandler())
	}
	r := &Reconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Build: o.Build, FailReconcile: o.FailReconcile, FailOnConfig: o.FailOnConfig}
	cr := &unstructured.Unstructured{}
	cr.SetGroupVersionKind(GVK(o.Build.APIVersion))
	err = ctrl.NewControllerManagedBy(mgr).
		Named("mysqlcluster").
		For(cr).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return mgr, nil
}
