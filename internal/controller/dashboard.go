package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/dashboard"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// The dashboard authenticates each request with a TokenReview and authorises it with a
// SubjectAccessReview for the caller (see dashboard.Auth).
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// dashboardEnabled says whether o asks for the dashboard.
func dashboardEnabled(o Options) bool { return o.DashboardAddr != "" && o.DashboardAddr != "0" }

// dashboardServer serves the web dashboard from the manager, on every replica (it does not
// need the lead: it only reads, and its actions are writes any replica may make).
type dashboardServer struct {
	srv      *dashboard.Server
	o        Options
	listener net.Listener
	tls      *tls.Config
	watcher  *certwatcher.CertWatcher
}

func (d *dashboardServer) NeedLeaderElection() bool { return false }

// newDashboard builds the dashboard of o.DashboardNamespace, read with the controller's own
// identity, and binds its address (so that a taken port fails the start). A snapshot's diff
// against the live cluster captures the member with the controller's member access (members,
// whose kubeconfigs hub reads), by the same code as `rewind snapshot diff --live`; like the
// snapshot page it is on, it is shown only to users allowed to get snapshots in the namespace.
func newDashboard(cfg *rest.Config, o Options, hub client.Reader, members *member.Cache) (*dashboardServer, error) {
	if o.DashboardNamespace == "" {
		return nil, errors.New("--dashboard-namespace is required with --dashboard-bind-address: the hub namespace whose rollouts the dashboard shows")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	opts := dashboard.Options{Namespace: o.DashboardNamespace, Auth: &dashboard.Auth{Client: cs}}
	readRelease := func(ctx context.Context, ns, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
		rel := &v1alpha1.OperatorRelease{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rel); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, fmt.Errorf("release %s not found in namespace %s: %w", name, ns, err)
			}
			return nil, nil, fmt.Errorf("reading release %s/%s: %w", ns, name, err)
		}
		objs, err := release.Manifests(ctx, hub, rel)
		return rel, objs, err
	}
	opts.Live = func(ctx context.Context, snap *v1alpha1.Snapshot, hdr snapshot.Header) ([]snapshot.Entry, error) {
		cl, err := members.Get(ctx, snap.Spec.Cluster)
		if err != nil {
			return nil, err
		}
		return snapshot.CaptureLive(ctx, cl, readRelease, snap, hdr)
	}
	if o.DashboardActions {
		// Each action runs as the signed-in user, with their own token: the controller
		// needs no right to change Rollouts, and the hub's audit log names the user.
		opts.UserActions = func(user *rest.Config) (dashboard.Actions, error) {
			c, err := client.New(user, client.Options{Scheme: Scheme})
			if err != nil {
				return nil, err
			}
			return dashboard.ClientActions(c, "rewind"), nil
		}
	}
	srv, err := dashboard.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	d := &dashboardServer{srv: srv, o: o}
	if !o.DashboardInsecure {
		d.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		crt, key := filepath.Join(o.DashboardCertDir, "tls.crt"), filepath.Join(o.DashboardCertDir, "tls.key")
		if o.DashboardCertDir != "" {
			if _, err := os.Stat(crt); err != nil {
				return nil, fmt.Errorf("--dashboard-cert-dir %s: %w (it must hold tls.crt and tls.key)", o.DashboardCertDir, err)
			}
			if d.watcher, err = certwatcher.New(crt, key); err != nil {
				return nil, fmt.Errorf("--dashboard-cert-dir %s: %w", o.DashboardCertDir, err)
			}
			d.tls.GetCertificate = d.watcher.GetCertificate
		} else {
			pem, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{{127, 0, 0, 1}}, nil)
			if err != nil {
				return nil, fmt.Errorf("generating the dashboard's self-signed certificate: %w", err)
			}
			pair, err := tls.X509KeyPair(pem, keyPEM)
			if err != nil {
				return nil, err
			}
			d.tls.Certificates = []tls.Certificate{pair}
		}
	}
	if d.listener, err = net.Listen("tcp", o.DashboardAddr); err != nil {
		return nil, fmt.Errorf("--dashboard-bind-address %s: %w", o.DashboardAddr, err)
	}
	return d, nil
}

// Start watches the hub for the dashboard and serves it until ctx ends.
func (d *dashboardServer) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("dashboard")
	defer d.listener.Close()
	if d.watcher != nil {
		go func() {
			if err := d.watcher.Start(ctx); err != nil {
				log.Error(err, "watching the dashboard's certificate")
			}
		}()
	}
	if err := d.srv.Start(ctx); err != nil {
		return err
	}
	hs := &http.Server{Handler: d.srv.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: d.tls}
	go func() {
		<-ctx.Done()
		sd, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sd)
	}()
	log.Info("serving the dashboard", "address", d.listener.Addr().String(), "namespace", d.o.DashboardNamespace,
		"tls", d.tls != nil, "actions", d.o.DashboardActions)
	var err error
	if d.tls != nil {
		err = hs.ServeTLS(d.listener, "", "")
	} else {
		err = hs.Serve(d.listener)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
