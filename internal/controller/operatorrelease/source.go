package operatorrelease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/patch"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/source"
)

// fromSource fetches, verifies, renders and stores a release from spec.source. Nothing is
// stored unless every check passed; a failure is recorded in the conditions and retried when
// it can go away by itself.
func (r *Reconciler) fromSource(ctx context.Context, h *patch.Helper, rel *v1alpha1.OperatorRelease) (ctrl.Result, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	fetchCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stored, info, f := r.build(fetchCtx, rel)
	if f != nil {
		r.failed(h, rel, f)
		if !f.retry {
			return ctrl.Result{}, nil
		}
		since := r.now()
		if c := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionStalled); c != nil && !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.Time
		}
		return ctrl.Result{RequeueAfter: retryAfter(r.now(), since)}, nil
	}
	stored.SetReady(&rel.Status, rel.Generation)
	rel.Status.Format, rel.Status.Chart, rel.Status.Bundle = info.format, info.chart, info.bundle
	if r.Recorder != nil {
		msg := fmt.Sprintf("%d manifests from %s stored at %s", stored.Objects, describe(rel.Spec.Source), stored.Ref)
		h.OnPatched(func() { r.Recorder.Eventf(rel, nil, "Normal", v1alpha1.ReasonStored, "Fetch", "%s", msg) })
	}
	return ctrl.Result{}, nil
}

// rendered says what a source rendered from.
type rendered struct {
	format string
	chart  *v1alpha1.ChartInfo
	bundle *v1alpha1.BundleInfo
}

// build does the work of fromSource: credentials, values, fetch, render, checks, store.
func (r *Reconciler) build(ctx context.Context, rel *v1alpha1.OperatorRelease) (*release.Stored, *rendered, *failure) {
	creds, f := r.credentials(ctx, rel)
	if f != nil {
		return nil, nil, f
	}
	values, f := r.values(ctx, rel)
	if f != nil {
		return nil, nil, f
	}
	content, err := source.Fetch(ctx, rel.Spec.Source, creds)
	if err != nil {
		var se *source.Error
		if errors.As(err, &se) {
			return nil, nil, &failure{reason: se.Reason, err: se.Err, fix: se.Fix, retry: se.Retry}
		}
		return nil, nil, &failure{reason: v1alpha1.ReasonSourceUnreachable, err: err, retry: true}
	}
	objs, info, f := render(rel, content, values)
	if f != nil {
		return nil, nil, f
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		return nil, nil, &failure{reason: v1alpha1.ReasonRenderFailed, err: fmt.Errorf("%s: %w", content.Name, err), fix: "fix the manifests of the source and create a new release"}
	}
	digest := release.Digest(canonical)
	if rel.Spec.Digest != "" && digest != rel.Spec.Digest {
		return nil, nil, &failure{reason: v1alpha1.ReasonDigestMismatch,
			err: fmt.Errorf("the manifests rendered from %s have digest %s, not spec.digest %s", content.Name, digest, rel.Spec.Digest),
			fix: "spec.digest pins the rendered manifests: the source, the values or the install namespace differ from those it was computed with; create a new release (without spec.digest, or with the right one)"}
	}
	stored, err := release.Store(ctx, r.Client, rel.Namespace, canonical)
	if err != nil {
		return nil, nil, &failure{reason: v1alpha1.ReasonStoreFailed, err: fmt.Errorf("storing the manifests in namespace %s: %w", rel.Namespace, err), fix: "rewind keeps trying", retry: true}
	}
	if content.Format == v1alpha1.FormatChart {
		// What the chart was rendered from, for a Rollout's per-cluster values.
		in := &release.RenderInput{Values: values, ReleaseName: rel.Spec.Operator, Namespace: installNamespace(rel), APIVersions: rel.Spec.APIVersions}
		for _, f := range content.Chart.Raw {
			in.Files = append(in.Files, release.ChartFile{Name: f.Name, Data: f.Data})
		}
		if err := release.StoreRenderInput(ctx, r.Client, rel, in); err != nil {
			return nil, nil, &failure{reason: v1alpha1.ReasonStoreFailed, err: err, fix: "rewind keeps trying", retry: true}
		}
	}
	return stored, info, nil
}

// installNamespace is the namespace a release from a source is rendered for.
func installNamespace(rel *v1alpha1.OperatorRelease) string {
	return release.InstallNamespace(rel.Spec.Operator, rel.Spec.InstallNamespace)
}

// render renders fetched content for rel and checks it binds to the release: chart appVersion
// or bundle operatorVersion equal to spec.version, a Deployment running spec.image.
func render(rel *v1alpha1.OperatorRelease, content *source.Content, values map[string]interface{}) ([]*unstructured.Unstructured, *rendered, *failure) {
	ns := installNamespace(rel)
	info := &rendered{format: content.Format}
	if content.Format != v1alpha1.FormatChart && (len(values) > 0 || len(rel.Spec.APIVersions) > 0) {
		return nil, nil, &failure{reason: v1alpha1.ReasonValuesInvalid,
			err: fmt.Errorf("spec.values, spec.valuesFrom and spec.apiVersions apply to a Helm chart, but %s is %s", content.Name, article(content.Format)),
			fix: "create a new release without them"}
	}
	renderFailed := func(err error) *failure {
		return &failure{reason: v1alpha1.ReasonRenderFailed, err: err, fix: "fix the source (or spec.values) and create a new release"}
	}
	var objs []*unstructured.Unstructured
	var err error
	switch content.Format {
	case v1alpha1.FormatChart:
		objs, info.chart, err = release.RenderLoadedChart(content.Chart, values, rel.Spec.Operator, ns, rel.Spec.APIVersions...)
		if err != nil {
			return nil, nil, renderFailed(fmt.Errorf("%s: %w", content.Name, err))
		}
		if strings.TrimPrefix(info.chart.AppVersion, "v") != strings.TrimPrefix(rel.Spec.Version, "v") {
			return nil, nil, &failure{reason: v1alpha1.ReasonRenderFailed,
				err: fmt.Errorf("chart %s %s from %s has appVersion %s but spec.version is %s", info.chart.Name, info.chart.Version, content.Name, info.chart.AppVersion, rel.Spec.Version),
				fix: "one release version binds the chart's appVersion to the operator version: point spec.source at the chart of " + rel.Spec.Version + ", or create a release with spec.version " + info.chart.AppVersion}
		}
	case v1alpha1.FormatBundle:
		objs, info.bundle, err = release.RenderBundleFS(content.Files, content.Name, ns)
		if err != nil {
			return nil, nil, renderFailed(err)
		}
		if strings.TrimPrefix(info.bundle.OperatorVersion, "v") != strings.TrimPrefix(rel.Spec.Version, "v") {
			return nil, nil, &failure{reason: v1alpha1.ReasonRenderFailed,
				err: fmt.Errorf("the bundle %s has olm.operatorVersion (CSV spec.version) %s but spec.version is %s", content.Name, info.bundle.OperatorVersion, rel.Spec.Version),
				fix: "one release version binds them: point spec.source at the bundle of " + rel.Spec.Version + ", or create a release with spec.version " + info.bundle.OperatorVersion}
		}
	default:
		objs, err = release.RenderManifestsFS(content.Files, content.Name)
		if err != nil {
			return nil, nil, renderFailed(err)
		}
	}
	if err := release.CheckImageField(objs, rel.Spec.Image, "spec.image"); err != nil {
		return nil, nil, &failure{reason: v1alpha1.ReasonRenderFailed, err: fmt.Errorf("%s: %w", content.Name, err), fix: "create a new release"}
	}
	return objs, info, nil
}

func article(format string) string {
	if format == v1alpha1.FormatManifests {
		return "plain manifests"
	}
	return "an OLM bundle"
}

// credentials reads the Secret of spec.source.secretRef (nil without one).
func (r *Reconciler) credentials(ctx context.Context, rel *v1alpha1.OperatorRelease) (*source.Credentials, *failure) {
	ref := rel.Spec.Source.SecretRef
	if ref == nil {
		return nil, nil
	}
	s := &corev1.Secret{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: ref.Name}, s); err != nil {
		fix := "rewind keeps trying"
		if notFound(err) {
			fix = "create it in namespace " + rel.Namespace + " with keys username and password, token, .dockerconfigjson or ca.crt; rewind keeps trying"
		}
		return nil, &failure{reason: v1alpha1.ReasonCredentialsInvalid, retry: true, fix: fix,
			err: fmt.Errorf("reading Secret %s/%s of spec.source.secretRef: %w", rel.Namespace, ref.Name, err)}
	}
	creds, err := source.FromSecretData(s.Data)
	if err != nil {
		return nil, &failure{reason: v1alpha1.ReasonCredentialsInvalid, retry: true, fix: "fix the Secret; rewind keeps trying",
			err: fmt.Errorf("Secret %s/%s of spec.source.secretRef: %w", rel.Namespace, ref.Name, err)}
	}
	return creds, nil
}

// values merges the Helm values of spec.valuesFrom, in order, then spec.values over them.
func (r *Reconciler) values(ctx context.Context, rel *v1alpha1.OperatorRelease) (map[string]interface{}, *failure) {
	out := map[string]interface{}{}
	for i, ref := range rel.Spec.ValuesFrom {
		key := ref.Key
		if key == "" {
			key = "values.yaml"
		}
		field := fmt.Sprintf("spec.valuesFrom[%d] (ConfigMap %s/%s, key %s)", i, rel.Namespace, ref.ConfigMap, key)
		cm := &corev1.ConfigMap{}
		if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: ref.ConfigMap}, cm); err != nil {
			if notFound(err) && ref.Optional {
				continue
			}
			return nil, &failure{reason: v1alpha1.ReasonValuesInvalid, retry: true, err: fmt.Errorf("%s: %w", field, err),
				fix: "create the ConfigMap (or mark the reference optional in a new release); rewind keeps trying"}
		}
		data, ok := cm.Data[key]
		if !ok {
			if ref.Optional {
				continue
			}
			return nil, &failure{reason: v1alpha1.ReasonValuesInvalid, retry: true, err: fmt.Errorf("%s: the ConfigMap has no key %s", field, key),
				fix: "add the key to the ConfigMap; rewind keeps trying"}
		}
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(data), &m); err != nil {
			return nil, &failure{reason: v1alpha1.ReasonValuesInvalid, retry: true, err: fmt.Errorf("%s: not a YAML map of Helm values: %w", field, err),
				fix: "fix the ConfigMap; rewind keeps trying"}
		}
		out = release.MergeValues(out, m)
	}
	if rel.Spec.Values != nil && len(rel.Spec.Values.Raw) > 0 {
		m := map[string]interface{}{}
		if err := json.Unmarshal(rel.Spec.Values.Raw, &m); err != nil {
			return nil, &failure{reason: v1alpha1.ReasonValuesInvalid, err: fmt.Errorf("spec.values is not a map of Helm values: %w", err), fix: "create a new release with a map in spec.values"}
		}
		out = release.MergeValues(out, m)
	}
	return out, nil
}

// describe names a source in messages.
func describe(src *v1alpha1.ReleaseSource) string {
	switch {
	case src == nil:
		return "no source"
	case src.OCI != nil:
		s := "oci://" + src.OCI.Repository + "@" + src.OCI.Digest
		if src.OCI.Tag != "" {
			s += " (tag " + src.OCI.Tag + ")"
		}
		return s
	case src.HelmRepository != nil:
		return fmt.Sprintf("chart %s %s of %s", src.HelmRepository.Chart, src.HelmRepository.Version, src.HelmRepository.URL)
	case src.Git != nil:
		s := src.Git.URL + "@" + src.Git.Commit
		if src.Git.Path != "" {
			s += ":" + src.Git.Path
		}
		return s
	}
	return "an empty source"
}
