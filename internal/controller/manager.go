// Package controller holds rewind's reconcilers and the manager that runs them in the hub.
package controller

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/controller/notification"
	"github.com/rewind-dev/rewind/internal/controller/operatorrelease"
	"github.com/rewind-dev/rewind/internal/controller/rollout"
	"github.com/rewind-dev/rewind/internal/controller/target"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Scheme holds every type the manager works with.
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(Scheme))
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
}

// LabelMemberKubeconfig marks the hub Secrets that hold member kubeconfigs; only those are
// watched (and cached) by the manager.
const LabelMemberKubeconfig = "rewind.dev/member-kubeconfig"

// Options configure the manager.
type Options struct {
	// MetricsAddr is the bind address of the Prometheus metrics endpoint ("0" disables it).
	MetricsAddr string
	// ProbeAddr is the bind address of /healthz and /readyz.
	ProbeAddr string
	// PprofAddr is the bind address of Go's /debug/pprof endpoints ("" or "0" disables them).
	PprofAddr string
	// LeaderElection makes only one replica active at a time.
	LeaderElection bool
	// LeaderElectionNamespace is where the lease lives (default: the in-cluster namespace, or
	// rewind-system out of cluster).
	LeaderElectionNamespace string
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
	// CrashAt injects a crash at a per-cluster rollout step (tests).
	CrashAt func(cluster, step string) bool
	// GatePoll is how often unhealthy clusters are re-checked (default 2s).
	GatePoll time.Duration
	// TargetWorkers is how many clusters' steps run at once (default 32).
	TargetWorkers int
	// ProbeInterval is how often every member's health is probed (default 5s);
	// ProbeFailureThreshold the consecutive failed probes that make a member unreachable
	// (default 3).
	ProbeInterval         time.Duration
	ProbeFailureThreshold int
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (0: controller-runtime's
	// 15s, 10s and 2s). A standby takes over about LeaseDuration (plus up to two jittered
	// RetryPeriods) after the leader died; test/ha measures it.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MetricsSecure serves the metrics endpoint over HTTPS, and only to clients the hub
	// authenticates (TokenReview) and authorizes for GET /metrics (SubjectAccessReview).
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the metrics endpoint; empty generates a
	// self-signed certificate.
	MetricsCertDir string
	// KubeconfigNamespaces are the namespaces whose labelled member kubeconfig Secrets are
	// watched, so that a changed Secret re-checks its members (default: rewind-system). A
	// MemberCluster may name a Secret elsewhere; it is read, but its changes are only seen at
	// the next periodic check. The controller needs no Secret access outside the namespaces it
	// is bound to.
	KubeconfigNamespaces []string
	// RestoreMemory bounds the snapshot content (uncompressed bytes) that running restores
	// hold in memory at once; 0 is no bound.
	RestoreMemory int64
	// HubQPS and HubBurst, when positive, set the client-side rate limit of requests to the
	// hub. A wave of N clusters makes about 25 hub requests per cluster at once.
	HubQPS   float32
	HubBurst int
	// DashboardAddr, when set (not "" nor "0"), serves the web dashboard of
	// DashboardNamespace there, on every replica, to the users the hub authenticates
	// (TokenReview) and authorises (SubjectAccessReview: get and list rollouts.rewind.dev in
	// the namespace to see it, update rollouts to act, as the user, with their own token). Off by default.
	DashboardAddr      string
	DashboardNamespace string
	// DashboardActions shows the approve, pause, resume, rollback and retry buttons.
	DashboardActions bool
	// DashboardCertDir holds tls.crt and tls.key for the dashboard (reloaded when they
	// change); empty generates a self-signed certificate. DashboardInsecure serves plain HTTP
	// (behind a proxy that terminates TLS).
	DashboardCertDir  string
	DashboardInsecure bool
	// NotifyCrashAfterSend stops the notification reconciler after a receiver accepted a
	// notification and before it is recorded (tests).
	NotifyCrashAfterSend func(key, destination string) bool
}

// DefaultSystemNamespace holds the member kubeconfig Secrets, the snapshot key and the
// leader-election lease.
const DefaultSystemNamespace = "rewind-system"

// NewManager builds the manager with health and readiness checks and every reconciler.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.HubQPS > 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = o.HubQPS, max(o.HubBurst, 1)
	}
	ns := o.LeaderElectionNamespace
	if ns == "" && o.LeaderElection {
		ns = DefaultSystemNamespace
	}
	metricsOpts := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		metricsOpts.SecureServing = true
		metricsOpts.CertDir = o.MetricsCertDir
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	secretNamespaces := map[string]cache.Config{}
	for _, n := range o.KubeconfigNamespaces {
		secretNamespaces[n] = cache.Config{}
	}
	if len(secretNamespaces) == 0 {
		secretNamespaces[DefaultSystemNamespace] = cache.Config{}
	}
	if err := checkCRDs(cfg); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        Scheme,
		Metrics:                       metricsOpts,
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOrNil(o.LeaseDuration),
		RenewDeadline:                 durationOrNil(o.RenewDeadline),
		RetryPeriod:                   durationOrNil(o.RetryPeriod),
		Controller:                    config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {
				Label:      labels.SelectorFromSet(labels.Set{LabelMemberKubeconfig: "true"}),
				Namespaces: secretNamespaces,
			},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	members, err := setupReconcilers(mgr, o)
	if err != nil {
		return nil, err
	}
	if dashboardEnabled(o) {
		d, err := newDashboard(cfg, o, hubReader{Client: mgr.GetClient(), reader: mgr.GetAPIReader()}, members)
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(d); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// checkCRDs fails when the hub does not serve every rewind.dev kind this controller watches:
// without one, the controller would only exit minutes later, when that kind's informer gives
// up syncing. A hub that cannot be asked is left to the manager's own errors.
func checkCRDs(cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a discovery client for the hub: %w", err)
	}
	// CRDs just installed (by the same script, or a moment ago) reach discovery a little after
	// they are Established: ask again for a few seconds before refusing.
	var missing []string
	deadline := time.Now().Add(crdWait)
	for {
		served := map[string]bool{}
		list, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil
		default:
			for _, r := range list.APIResources {
				served[r.Kind] = true
			}
		}
		missing = missing[:0]
		for gvk, typ := range Scheme.AllKnownTypes() {
			if gvk.GroupVersion() != v1alpha1.GroupVersion || served[gvk.Kind] {
				continue
			}
			if _, ok := reflect.New(typ).Interface().(metav1.Object); ok { // not lists, nor options
				missing = append(missing, gvk.Kind)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	slices.Sort(missing)
	return fmt.Errorf("the hub does not serve %s %s: install rewind's CRDs first (rewind install --crds-only, or kubectl apply --server-side -k config/crd)",
		v1alpha1.GroupVersion, strings.Join(missing, ", "))
}

// crdWait is how long checkCRDs waits for CRDs to appear in discovery.
var crdWait = 10 * time.Second

// LeaderElectionID names the leader-election Lease.
const LeaderElectionID = "rewind-controller.rewind.dev"

func durationOrNil(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// setupReconcilers registers every reconciler with the manager. They share one access layer
// to the members and one cache of releases; the members' access is returned for the dashboard.
func setupReconcilers(mgr ctrl.Manager, o Options) (*member.Cache, error) {
	hub := hubReader{Client: mgr.GetClient(), reader: mgr.GetAPIReader()}
	// Member kubeconfig Secrets are read on every step of every cluster: from the manager's
	// cache, which watches the labelled ones; another (unlabelled, or in a namespace the cache
	// does not watch) from the API server.
	members := &member.Cache{Hub: kubeconfigReader{hub: hub, cache: mgr.GetClient()}}
	releases := &release.Cache{}
	probes := &member.Prober{Hub: mgr.GetClient(), Members: members, Interval: o.ProbeInterval, FailureThreshold: o.ProbeFailureThreshold}
	if err := (&MemberClusterReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Members: members, Probes: probes}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the MemberCluster controller: %w", err)
	}
	if err := (&operatorrelease.Reconciler{Client: hub, Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("rewind-operatorrelease")}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the OperatorRelease controller: %w", err)
	}
	ro := &rollout.Reconciler{Client: mgr.GetClient(), Hub: hub, Live: mgr.GetAPIReader(), Releases: releases, Probes: probes, Recorder: mgr.GetEventRecorder("rewind-rollout")}
	if err := ro.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the Rollout controller: %w", err)
	}
	tr := &target.Reconciler{Client: mgr.GetClient(), Hub: hub, APIReader: mgr.GetAPIReader(), Members: members, Probes: probes, Releases: releases,
		Recorder: mgr.GetEventRecorder("rewind-rollout"), GatePoll: o.GatePoll, Workers: o.TargetWorkers, CrashAt: o.CrashAt,
		Restores: target.NewMemoryBudget(o.RestoreMemory)}
	if err := tr.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the RolloutTarget controller: %w", err)
	}
	if err := (&notification.Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the notification controller: %w", err)
	}
	if err := (&notification.Deliverer{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), CrashAfterSend: o.NotifyCrashAfterSend}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the notification delivery controller: %w", err)
	}
	if err := (&notification.PolicyReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the NotificationPolicy controller: %w", err)
	}
	if err := (&SnapshotStoreReconciler{Client: hub}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the SnapshotStore controller: %w", err)
	}
	if err := (&SnapshotScheduleReconciler{Client: hub, Members: members, Releases: releases}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the SnapshotSchedule controller: %w", err)
	}
	return members, nil
}

// The manager's permissions in the hub (least privilege; the README's "Permissions" section
// explains them). Cluster-wide, in the ClusterRole rewind-controller: read every rewind.dev
// kind, write the objects and status it owns, record Events, and check the callers of the
// metrics endpoint. No Secret access cluster-wide: Secrets are granted per namespace, by the
// Role rewind-controller in rewind-system (member kubeconfigs, the snapshot key, the
// leader-election lease) and by RoleBindings to the ClusterRole rewind-controller-namespace
// in each namespace that holds releases and rollouts (see internal/rbac).
// +kubebuilder:rbac:groups=rewind.dev,resources=memberclusters;operatorreleases;rollouts;rollouttargets;snapshots,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshots,verbs=create;delete
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshots/status,verbs=get;update;patch
// SnapshotStores (probed; a finalizer keeps one while Snapshots live in it) and
// SnapshotSchedules (they take Snapshots outside rollouts).
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores;snapshotschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores,verbs=update;patch
// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores/status;snapshotschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// In rewind-system only (Role rewind-controller): the member kubeconfig Secrets (watched), the
// snapshot key-encryption key (created on first use) and the leader-election Lease.
// +kubebuilder:rbac:groups="",namespace=rewind-system,resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=rewind-system,resources=leases,verbs=get;create;update

// hubReader reads Secrets straight from the API server (the manager caches only the labelled
// member kubeconfigs, in the kubeconfig namespaces) and everything else from the manager's
// cache. Secret lists (payload chunks, by label) and metadata reads of Secrets go to the API
// server too: through the cache they would start an informer on every Secret, which the
// controller's RBAC does not allow and which would hold every Secret in memory.
type hubReader struct {
	client.Client
	reader client.Reader
}

func (h hubReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if isSecret(obj) || isConfigMap(obj) {
		return h.reader.Get(ctx, key, obj, opts...)
	}
	return h.Client.Get(ctx, key, obj, opts...)
}

func (h hubReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if isSecret(list) {
		return h.reader.List(ctx, list, opts...)
	}
	return h.Client.List(ctx, list, opts...)
}

// isConfigMap says whether obj is a ConfigMap: values ConfigMaps are read where the
// controller may read them (namespaces it is enabled in), never cached cluster-wide.
func isConfigMap(obj runtime.Object) bool {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		return true
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return gvk.Group == "" && gvk.Kind == "ConfigMap"
}

// isSecret says whether obj is a Secret or a list of them, typed, metadata-only or
// unstructured.
func isSecret(obj runtime.Object) bool {
	switch obj.(type) {
	case *corev1.Secret, *corev1.SecretList:
		return true
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return gvk.Group == "" && (gvk.Kind == "Secret" || gvk.Kind == "SecretList")
}

// kubeconfigReader reads Secrets from the manager's cache first (the member kubeconfigs it
// watches) and from the API server when the cache does not have them; everything else as hub.
type kubeconfigReader struct {
	hub   hubReader
	cache client.Reader
}

func (k kubeconfigReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if isSecret(obj) && k.cache.Get(ctx, key, obj, opts...) == nil {
		return nil
	}
	return k.hub.Get(ctx, key, obj, opts...)
}

func (k kubeconfigReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return k.hub.List(ctx, list, opts...)
}
