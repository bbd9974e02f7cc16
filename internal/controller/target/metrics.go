package target

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/analysis"
)

// maxMeasurementsPerReconcile bounds the measurements one reconcile takes of one metric
// (a metric without interval takes its count back to back).
const maxMeasurementsPerReconcile = 10

func (r *Reconciler) measurer() *analysis.Measurer {
	if r.Measurer != nil {
		return r.Measurer
	}
	return &analysis.Measurer{Now: r.now}
}

func (r *Reconciler) metricErrorRetry() time.Duration {
	if r.MetricErrorRetry > 0 {
		return r.MetricErrorRetry
	}
	return analysis.DefaultErrorRetry
}

// analyze runs the gate's metric analyses once every object is healthy, on the upgrade path
// (a rollback returns to a release that ran before: its metrics are not what is judged).
// It takes the measurements that are due and records them in status.metrics; a metric that
// failed, or erred more often in a row than its consecutiveErrorLimit, fails the gate; an
// inconclusive one holds the cluster (waitingFor AwaitingApproval) until the target carries
// approved.rewind.dev/metrics for its revision (rewind rollout approve). Only results of the
// target's revision count: a result of the revision before is dropped, never passed on.
func (x *execution) analyze(ctx context.Context) (time.Duration, error) {
	t, st := x.t, &x.t.Status
	specs := t.Spec.HealthGates.Metrics
	if len(specs) == 0 || t.Spec.Path != v1alpha1.PathUpgrade {
		return 0, nil
	}
	metrics, err := analysis.Compile(specs)
	if err != nil {
		return 0, terminalf("%v", err) // refused before the revision started; a guard
	}
	st.Metrics = analysis.Current(st.Metrics, specs, t.Spec.Revision, t.Generation)
	var (
		data *analysis.Data
		wait time.Duration
	)
	for _, m := range metrics {
		res := resultOf(st, m.Spec.Name)
		if res == nil {
			st.Metrics = append(st.Metrics, analysis.Start(m.Spec.Name, t.Spec.Revision, t.Generation, x.r.now()))
			res = &st.Metrics[len(st.Metrics)-1]
		}
		for n := 0; res.Phase == v1alpha1.MetricRunning && n < maxMeasurementsPerReconcile; n++ {
			if d := analysis.Due(m.Spec, *res, x.r.metricErrorRetry()).Sub(x.r.now()); d > 0 {
				if wait == 0 || d < wait {
					wait = d
				}
				break
			}
			if data == nil {
				if data, err = x.analysisData(ctx); err != nil {
					return 0, err
				}
			}
			creds, err := x.credentials(ctx, m)
			if err != nil {
				return 0, err
			}
			meas, permanent := x.r.measurer().Measure(ctx, m, *data, creds)
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			analysis.Record(m.Spec, res, meas, permanent)
		}
		if res.Phase == v1alpha1.MetricRunning && wait == 0 {
			wait = time.Second // measured back to back up to the bound: go on at once
		}
	}
	phase, msg := analysis.Verdict(st.Metrics, specs, t.Spec.Revision)
	switch phase {
	case v1alpha1.MetricFailed:
		return 0, terminalf("health gate failed: %s", msg)
	case v1alpha1.MetricInconclusive:
		if t.Annotations[v1alpha1.AnnotationApprovedMetrics] == strconv.Itoa(int(t.Spec.Revision)) {
			x.note("Normal", "MetricsApproved", "%s: inconclusive metrics approved for revision %d: %s", t.Spec.Cluster, t.Spec.Revision, msg)
			return 0, nil
		}
		return 0, &waitError{reason: v1alpha1.ReasonAwaitingApproval,
			err: fmt.Errorf("%s; the cluster holds until a person approves (rewind rollout approve %s) or rolls back", msg, t.Spec.Rollout)}
	case v1alpha1.MetricRunning:
		st.Message = "analysing: " + msg
		return wait, nil
	}
	return 0, nil
}

func resultOf(st *v1alpha1.RolloutTargetStatus, name string) *v1alpha1.MetricResult {
	for i := range st.Metrics {
		if st.Metrics[i].Name == name {
			return &st.Metrics[i]
		}
	}
	return nil
}

// analysisData is what the queries of this target see: its cluster's name and labels, the
// install namespace and what is released.
func (x *execution) analysisData(ctx context.Context) (*analysis.Data, error) {
	t := x.t
	mc := &v1alpha1.MemberCluster{}
	if err := x.r.Client.Get(ctx, client.ObjectKey{Name: t.Spec.Cluster}, mc); err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	labels := mc.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	return &analysis.Data{Cluster: analysis.Cluster{Name: t.Spec.Cluster, Labels: labels}, Namespace: t.Spec.InstallNamespace,
		Rollout: t.Spec.Rollout, Release: t.Spec.ToRelease, Revision: t.Spec.Revision}, nil
}

// credentials reads a metric's secretRef (the Rollout's namespace). A Secret that is not
// there fails the gate, naming the field; its data is never logged nor put in a message.
func (x *execution) credentials(ctx context.Context, m *analysis.Metric) (analysis.Credentials, error) {
	var ref *v1alpha1.LocalSecretReference
	field := m.Field + ".provider."
	switch p := m.Spec.Provider; {
	case p.Prometheus != nil:
		ref, field = p.Prometheus.SecretRef, field+"prometheus.secretRef"
	case p.Web != nil:
		ref, field = p.Web.SecretRef, field+"web.secretRef"
	}
	if ref == nil {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := x.r.Hub.Get(ctx, client.ObjectKey{Namespace: x.t.Namespace, Name: ref.Name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, terminalf("%s: Secret %s/%s does not exist", field, x.t.Namespace, ref.Name)
		}
		return nil, fmt.Errorf("%s: reading Secret %s/%s: %w", field, x.t.Namespace, ref.Name, err)
	}
	return analysis.Credentials(s.Data), nil
}
