// Package controller holds rewind's reconcilers and the manager that runs them in the hub.
package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/rewind-dev/rewind/api/v1alpha1"
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
}

// NewManager builds the manager with health and readiness checks and every reconciler.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	ns := o.LeaderElectionNamespace
	if ns == "" && o.LeaderElection {
		ns = "rewind-system"
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "rewind-controller.rewind.dev",
		LeaderElectionNamespace: ns,
		Controller:              config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{LabelMemberKubeconfig: "true"})},
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
	if err := setupReconcilers(mgr, o); err != nil {
		return nil, err
	}
	return mgr, nil
}

// setupReconcilers registers every reconciler with the manager. They share one access layer
// to the members and one cache of releases.
func setupReconcilers(mgr ctrl.Manager, o Options) error {
	hub := hubReader{Client: mgr.GetClient(), reader: mgr.GetAPIReader()}
	members := &member.Cache{Hub: hub}
	releases := &release.Cache{}
	if err := (&MemberClusterReconciler{Client: mgr.GetClient(), Members: members}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the MemberCluster controller: %w", err)
	}
	ro := &rollout.Reconciler{Client: mgr.GetClient(), Hub: hub, Releases: releases, Recorder: mgr.GetEventRecorder("rewind-rollout")}
	if err := ro.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Rollout controller: %w", err)
	}
	tr := &target.Reconciler{Client: mgr.GetClient(), Hub: hub, Members: members, Releases: releases,
		Recorder: mgr.GetEventRecorder("rewind-rollout"), GatePoll: o.GatePoll, Workers: o.TargetWorkers, CrashAt: o.CrashAt}
	if err := tr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the RolloutTarget controller: %w", err)
	}
	if err := (&SnapshotStoreReconciler{Client: hub}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SnapshotStore controller: %w", err)
	}
	if err := (&SnapshotScheduleReconciler{Client: hub, Members: members, Releases: releases}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the SnapshotSchedule controller: %w", err)
	}
	return nil
}

// The manager's permissions in the hub.
// +kubebuilder:rbac:groups=rewind.dev,resources=memberclusters;operatorreleases;rollouts;rollouttargets;snapshots;snapshotstores;snapshotschedules,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rewind.dev,resources=memberclusters/status;operatorreleases/status;rollouts/status;rollouttargets/status;snapshots/status;snapshotstores/status;snapshotschedules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// hubReader reads Secrets straight from the API server (the manager caches only the labelled
// ones) and everything else from the manager's cache.
type hubReader struct {
	client.Client
	reader client.Reader
}

func (h hubReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		return h.reader.Get(ctx, key, obj, opts...)
	}
	return h.Client.Get(ctx, key, obj, opts...)
}
