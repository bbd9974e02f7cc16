package fault

import (
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// MaxRequeueDelay bounds how long a reconcile that returned an error waits before it runs again.
const MaxRequeueDelay = 30 * time.Second

// ReconcileRateLimiter is when a reconcile that returned an error runs again: after 5 ms,
// doubling at each error in a row up to MaxRequeueDelay, and at most 10 per second overall with
// bursts of 100 (controller-runtime's default, but for the bound). controller-runtime's own
// bound is 1,000 s: a reconcile that met a fault of its hub 16 times in a row (a hub that
// resets its connections and refuses new ones for a moment every few seconds fails most of a
// reconcile's requests while it does) waited about 2.7 minutes, and 17 times about 5.5, after
// the hub was well. A fault then costs a reconcile at most 30 s, as it costs a step (the
// target's own fault backoff goes up to 30 s too). A reconcile that keeps failing for good (a
// hub that forbids a request) runs every 30 s rather than every 16 minutes; each failure is
// logged and counted (controller_runtime_reconcile_errors_total).
func ReconcileRateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, MaxRequeueDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// ControllerOptions are a controller's options: workers reconciles at once (0: one), and
// ReconcileRateLimiter.
func ControllerOptions(workers int) controller.Options {
	return controller.Options{MaxConcurrentReconciles: workers, RateLimiter: ReconcileRateLimiter()}
}
