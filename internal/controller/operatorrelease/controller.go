// Package operatorrelease reconciles OperatorReleases: a release from spec.source is fetched,
// verified against the digest or commit its spec pins, rendered and stored content-addressed in
// the hub, and its status filled (CRDs, counts, artifact, digest, Ready); an uploaded release
// (rewind release create) is checked to have its manifests stored.
package operatorrelease

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
)

// Reconciler fetches, verifies, renders and stores OperatorReleases.
type Reconciler struct {
	// Client reads and writes OperatorReleases and writes the artifact chunks.
	Client client.Client
	// Reader reads Secrets, ConfigMaps and artifact chunks straight from the API server (the
	// manager caches neither).
	Reader client.Reader
	// Recorder records Events on OperatorReleases (optional).
	Recorder events.EventRecorder
	// Timeout bounds one fetch and render (default 5 minutes).
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// The reconciler's permissions besides the manager's: it records what it stored in the
// release's status. (It reads values ConfigMaps and writes manifest Secrets in the release's
// namespace through the namespace role, internal/rbac.)
// +kubebuilder:rbac:groups=rewind.dev,resources=operatorreleases/status,verbs=get;update;patch

// SetupWithManager registers the reconciler. Only spec (generation) and annotation changes
// start a reconcile, so its own status writes do not; annotating a release retries a failure
// that is not retried by itself.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("operatorrelease").
		For(&v1alpha1.OperatorRelease{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WithOptions(fault.ControllerOptions(2)).
		Complete(r)
}

// Reconcile brings one OperatorRelease's status to what its source or upload holds.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rel := &v1alpha1.OperatorRelease{}
	if err := r.Client.Get(ctx, req.NamespacedName, rel); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("operatorrelease", klog.KObj(rel)))
	if ready(rel) {
		return ctrl.Result{}, nil // a release never changes once stored
	}
	// One status helper for the reconcile: its writes carry the resourceVersion read, and the
	// Events that tell what a write records are emitted once it went through.
	h := patch.NewHelper(rel, r.Client, patch.WithReader(r.Reader))
	if rel.Spec.Source == nil {
		res, err := r.checkUpload(ctx, h, rel)
		return h.Done(ctx, rel, res, err)
	}
	// Fetching may take a while: say so first, on the first attempt. A retry (Stalled, with
	// the last failure) writes its status once, when it ends.
	if !meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionReconciling) && meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionStalled) == nil {
		meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue,
			Reason: v1alpha1.ReasonFetching, Message: "fetching " + describe(rel.Spec.Source), ObservedGeneration: rel.Generation})
		if perr := h.Patch(ctx, rel); perr != nil {
			return patch.Result(ctx, ctrl.Result{}, nil, perr)
		}
	}
	res, err := r.fromSource(ctx, h, rel)
	return h.Done(ctx, rel, res, err)
}

// ready reports whether rel's manifests are stored for its generation.
func ready(rel *v1alpha1.OperatorRelease) bool {
	c := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == rel.Generation && release.ManifestDigest(rel) != ""
}

// checkUpload fills the status of an uploaded release (no spec.source) from its stored
// manifests, or says they are missing. rewind release create stores them before it creates
// the release, so a missing artifact is a release applied without an upload.
func (r *Reconciler) checkUpload(ctx context.Context, h *patch.Helper, rel *v1alpha1.OperatorRelease) (ctrl.Result, error) {
	canonical, err := artifact.Get(ctx, r.Reader, rel.Namespace, rel.Spec.Digest)
	if err != nil {
		r.failed(h, rel, &failure{reason: v1alpha1.ReasonArtifactMissing,
			err: fmt.Errorf("the manifests of digest %s (spec.digest) are not stored in namespace %s: %w", rel.Spec.Digest, rel.Namespace, err),
			fix: "upload them with rewind release create " + rel.Name + " -n " + rel.Namespace + " --manifests/--chart/--bundle ... (the same flags that gave this spec), or give the release a spec.source for the controller to fetch"})
		return ctrl.Result{}, nil
	}
	// artifact.Get verified the chunks against spec.digest: they are stored, read once.
	stored, err := release.Describe(rel.Namespace, canonical)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("the manifests of digest %s (spec.digest) stored in namespace %s: %w", rel.Spec.Digest, rel.Namespace, err)
	}
	stored.SetReady(&rel.Status, rel.Generation)
	rel.Status.Format, rel.Status.Chart, rel.Status.Bundle = rel.Spec.Format, rel.Spec.Chart, rel.Spec.Bundle
	return ctrl.Result{}, nil
}

// failure is a failed attempt at a release: the Ready and Stalled conditions it makes.
type failure struct {
	reason string
	err    error
	fix    string
	// retry: the controller tries again (with a growing delay); otherwise only a new release
	// (or an annotation on this one) does.
	retry bool
}

func (f *failure) message() string {
	if f.fix == "" {
		return f.err.Error()
	}
	return f.err.Error() + "; " + f.fix
}

// failed records f in rel's conditions, and in an Event once they are written.
func (r *Reconciler) failed(h *patch.Helper, rel *v1alpha1.OperatorRelease, f *failure) {
	msg := f.message()
	if len(msg) > 32000 {
		msg = msg[:32000] + "..."
	}
	for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionStalled} {
		status := metav1.ConditionTrue
		if t == v1alpha1.ConditionReady {
			status = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: f.reason, Message: msg, ObservedGeneration: rel.Generation})
	}
	meta.RemoveStatusCondition(&rel.Status.Conditions, v1alpha1.ConditionReconciling)
	rel.Status.ObservedGeneration = rel.Generation
	if r.Recorder != nil {
		h.OnPatched(func() { r.Recorder.Eventf(rel, nil, "Warning", f.reason, "Fetch", "%s", msg) })
	}
}

// retryAfter is the delay before the next attempt at a release whose Stalled condition has
// been True since stalledSince: as long as it has been failing (so delays double), between
// 10 seconds and 5 minutes.
func retryAfter(now, stalledSince time.Time) time.Duration {
	d := now.Sub(stalledSince)
	return min(max(d, 10*time.Second), 5*time.Minute)
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// notFound says whether err is a NotFound answer.
func notFound(err error) bool { return apierrors.IsNotFound(err) }
