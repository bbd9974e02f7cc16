package rollout

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

// clusterManifests renders rel again, with the values of spec.valuesFrom that apply to each
// cluster, for the clusters any entry applies to; stores each rendering content-addressed
// (clusters with the same values share one) and returns their digests by cluster. Clusters
// no entry applies to use the release's own manifests (absent from the map).
func (r *Reconciler) clusterManifests(ctx context.Context, ro *v1alpha1.Rollout, rel *v1alpha1.OperatorRelease, clusters []WaveCluster) (map[string]string, error) {
	if len(ro.Spec.ValuesFrom) == 0 {
		return nil, nil
	}
	var members v1alpha1.MemberClusterList
	if err := r.Client.List(ctx, &members); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	clusterLabels := map[string]labels.Set{}
	for _, mc := range members.Items {
		clusterLabels[mc.Name] = mc.Labels
	}
	// Each entry's values and selector, read once.
	type entry struct {
		sel    labels.Selector
		values map[string]any
	}
	entries := make([]entry, 0, len(ro.Spec.ValuesFrom))
	for i, v := range ro.Spec.ValuesFrom {
		e := entry{sel: labels.Everything()}
		if v.ClusterSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(v.ClusterSelector)
			if err != nil {
				return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.valuesFrom[%d].clusterSelector: %v", i, err)
			}
			e.sel = sel
		}
		values, err := r.overrideValues(ctx, ro, i, v)
		if err != nil {
			return nil, err
		}
		e.values = values
		entries = append(entries, e)
	}
	var in *release.RenderInput
	out := map[string]string{}
	byValues := map[string]string{} // the digest of each distinct list of overrides
	for _, c := range clusters {
		var overrides []map[string]any
		for _, e := range entries {
			if e.sel.Matches(clusterLabels[c.Name]) {
				overrides = append(overrides, e.values)
			}
		}
		if len(overrides) == 0 {
			continue
		}
		key, err := json.Marshal(overrides)
		if err != nil {
			return nil, err
		}
		if digest, ok := byValues[string(key)]; ok {
			out[c.Name] = digest
			continue
		}
		if in == nil {
			if in, err = release.LoadRenderInput(ctx, r.Hub, rel); err != nil {
				return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.valuesFrom: %v", err)
			}
		}
		objs, err := in.Render(overrides...)
		if err != nil {
			return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.valuesFrom: rendering release %s with the values for cluster %s: %v", rel.Name, c.Name, err)
		}
		if err := release.CheckImageField(objs, release.OperatorImageIn(objs, rel.Spec.Image), "spec.image"); err != nil {
			return nil, stallf(v1alpha1.ReasonInvalidSpec, "spec.valuesFrom: release %s rendered for cluster %s: %v", rel.Name, c.Name, err)
		}
		canonical, err := release.Canonical(objs)
		if err != nil {
			return nil, err
		}
		stored, err := release.Store(ctx, r.Hub, ro.Namespace, canonical) // Secrets read uncached
		if err != nil {
			return nil, fmt.Errorf("storing the manifests of release %s for cluster %s: %w", rel.Name, c.Name, err)
		}
		byValues[string(key)] = stored.Ref.Digest
		out[c.Name] = stored.Ref.Digest
	}
	return out, nil
}

// overrideValues reads one entry of spec.valuesFrom.
func (r *Reconciler) overrideValues(ctx context.Context, ro *v1alpha1.Rollout, i int, v v1alpha1.ValuesOverride) (map[string]any, error) {
	field := fmt.Sprintf("spec.valuesFrom[%d]", i)
	var data []byte
	switch {
	case v.Values != nil:
		data = v.Values.Raw
	case v.ConfigMap != nil:
		cm := &corev1.ConfigMap{}
		err := r.Hub.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: v.ConfigMap.ConfigMap}, cm)
		key := v.ConfigMap.Key
		if key == "" {
			key = "values.yaml"
		}
		switch {
		case apierrors.IsNotFound(err) && v.ConfigMap.Optional:
			return nil, nil
		case apierrors.IsNotFound(err):
			return nil, stallf(v1alpha1.ReasonInvalidSpec, "%s.configMap: ConfigMap %s/%s not found: create it or fix the name", field, ro.Namespace, v.ConfigMap.ConfigMap)
		case err != nil:
			return nil, fmt.Errorf("%s.configMap: reading ConfigMap %s/%s: %w", field, ro.Namespace, v.ConfigMap.ConfigMap, err)
		}
		s, ok := cm.Data[key]
		if !ok && v.ConfigMap.Optional {
			return nil, nil
		}
		if !ok {
			return nil, stallf(v1alpha1.ReasonInvalidSpec, "%s.configMap: ConfigMap %s/%s has no key %q", field, ro.Namespace, v.ConfigMap.ConfigMap, key)
		}
		data = []byte(s)
	}
	values := map[string]any{}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return nil, stallf(v1alpha1.ReasonInvalidSpec, "%s: the values are not a YAML or JSON object: %v", field, err)
	}
	return values, nil
}
