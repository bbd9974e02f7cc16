package release

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/ignore"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// RenderKubeVersion is the Kubernetes version charts are rendered against
// (.Capabilities.KubeVersion). It is fixed, not discovered, so that rendering is deterministic
// and the digest of a chart does not depend on where it was rendered.
const RenderKubeVersion = "v1.37.0"

// RenderChart renders the Helm chart at chartPath (a chart folder or a packaged .tgz) the way
// `helm install` would, without a cluster: the chart's values are merged with valuesFile (when
// not empty), templates are rendered with the Helm SDK for release releaseName in namespace
// (IsInstall, fixed Capabilities, see RenderKubeVersion), and the objects of the chart's crds/
// folders are added. NOTES.txt, partials, empty documents and hooks (which are not part of a
// Helm release's manifest, see `helm get manifest`) are left out. Namespaced objects without a namespace are put in
// namespace, as `helm install --namespace` does.
//
// The chart must have an appVersion: it is how rewind binds the chart to the operator version.
//
// .Capabilities.APIVersions lists what a Kubernetes RenderKubeVersion API server serves of its
// own, as group/version and group/version/Kind (as `helm install` sees them through discovery),
// plus apiVersions: the group/versions (or group/version/Kind) of other APIs the target clusters
// serve, such as monitoring.coreos.com/v1 for charts that render a ServiceMonitor only where the
// cluster has it (Helm's --api-versions).
func RenderChart(chartPath, valuesFile, releaseName, namespace string, apiVersions ...string) ([]*unstructured.Unstructured, *v1alpha1.ChartInfo, error) {
	if err := checkRenderTarget(releaseName, namespace); err != nil {
		return nil, nil, err
	}
	chrt, err := loader.Load(chartPath)
	if err != nil {
		return nil, nil, fmt.Errorf("loading chart %s: %w", chartPath, err)
	}
	values := chartutil.Values{}
	if valuesFile != "" {
		values, err = chartutil.ReadValuesFile(valuesFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading values file %s: %w", valuesFile, err)
		}
	}
	return renderChart(chrt, values, releaseName, namespace, apiVersions)
}

func checkRenderTarget(releaseName, namespace string) error {
	if releaseName == "" {
		return errors.New("rendering chart: a release name is required")
	}
	if namespace == "" {
		return errors.New("rendering chart: a namespace is required")
	}
	return nil
}

// chartFiles reads the files of the chart at the root of fsys as helm's loader.LoadDir does:
// .helmignore rules (and helm's defaults) apply, a UTF-8 byte order mark is dropped.
func chartFiles(fsys fs.FS) ([]*loader.BufferedFile, error) {
	rules := ignore.Empty()
	if data, err := fs.ReadFile(fsys, ignore.HelmIgnore); err == nil {
		if rules, err = ignore.Parse(bytes.NewReader(data)); err != nil {
			return nil, fmt.Errorf("%s: %w", ignore.HelmIgnore, err)
		}
	}
	rules.AddDefaults()
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rules.Ignore(p, fi) {
				return fs.SkipDir
			}
			return nil
		}
		if rules.Ignore(p, fi) {
			return nil
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("cannot load irregular file %s as it has file mode type bits set", p)
		}
		if fi.Size() > loader.MaxDecompressedFileSize {
			return fmt.Errorf("chart file %q is larger than the maximum file size %d", p, loader.MaxDecompressedFileSize)
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: p, Data: bytes.TrimPrefix(data, []byte{0xEF, 0xBB, 0xBF})})
		return nil
	})
	return files, err
}

// renderChart renders a loaded chart with values (see RenderChart).
func renderChart(chrt *chart.Chart, values chartutil.Values, releaseName, namespace string, apiVersions []string) ([]*unstructured.Unstructured, *v1alpha1.ChartInfo, error) {
	info := &v1alpha1.ChartInfo{
		Name:       chrt.Metadata.Name,
		Version:    chrt.Metadata.Version,
		AppVersion: chrt.Metadata.AppVersion,
	}
	if info.AppVersion == "" {
		return nil, nil, fmt.Errorf("Chart.yaml of %s has no appVersion; rewind binds the chart to the operator version through it", info.Name)
	}
	if values == nil {
		values = chartutil.Values{}
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, values); err != nil {
		return nil, nil, fmt.Errorf("chart %s: dependencies: %w", info.Name, err)
	}
	caps := renderCapabilities(apiVersions)
	if chrt.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(chrt.Metadata.KubeVersion, caps.KubeVersion.String()) {
		return nil, nil, fmt.Errorf("chart %s requires kubeVersion %s, which is incompatible with Kubernetes %s that rewind renders charts for", info.Name, chrt.Metadata.KubeVersion, caps.KubeVersion.String())
	}
	renderValues, err := chartutil.ToRenderValues(chrt, values, chartutil.ReleaseOptions{
		Name:      releaseName,
		Namespace: namespace,
		Revision:  1,
		IsInstall: true,
	}, caps)
	if err != nil {
		return nil, nil, fmt.Errorf("chart %s: values: %w", info.Name, err)
	}
	files, err := engine.Render(chrt, renderValues)
	if err != nil {
		return nil, nil, fmt.Errorf("rendering chart %s: %w", info.Name, err)
	}
	var objs []*unstructured.Unstructured
	crds := chrt.CRDObjects()
	sort.SliceStable(crds, func(i, j int) bool { return crds[i].Filename < crds[j].Filename })
	for _, crd := range crds {
		found, err := decodeDocuments(crd.Filename, crd.File.Data)
		if err != nil {
			return nil, nil, fmt.Errorf("chart %s: %w", info.Name, err)
		}
		objs = append(objs, found...)
	}
	names := make([]string, 0, len(files))
	for name, content := range files {
		// NOTES.txt is rendered like a template but is not a manifest; partials are not
		// rendered at all; whitespace-only files hold nothing.
		if strings.HasSuffix(name, "NOTES.txt") || strings.HasPrefix(path.Base(name), "_") || strings.TrimSpace(content) == "" {
			continue
		}
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		found, err := decodeDocuments(name, []byte(files[name]))
		if err != nil {
			return nil, nil, fmt.Errorf("chart %s: %w", info.Name, err)
		}
		for _, o := range found {
			// Hooks are not part of a Helm release's manifest (helm get manifest).
			if _, hook := o.GetAnnotations()[release.HookAnnotation]; hook {
				continue
			}
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 {
		return nil, nil, fmt.Errorf("chart %s renders no Kubernetes objects", info.Name)
	}
	defaultNamespace(objs, namespace)
	return objs, info, nil
}

// builtInKinds are "group/version/Kind" (or "version/Kind" for the core group) of every kind of
// the Kubernetes API the client libraries know, sorted: what discovery lists of a real cluster's
// built-in kinds, which charts test with .Capabilities.APIVersions.Has (Kyverno's
// "policy/v1/PodDisruptionBudget").
var builtInKinds = func() []string {
	var out []string
	for gvk := range clientgoscheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") ||
			gvk.Kind == "WatchEvent" || gvk.Kind == "Status" || gvk.Kind == "APIVersions" {
			continue
		}
		out = append(out, gvk.GroupVersion().String()+"/"+gvk.Kind)
	}
	slices.Sort(out)
	return out
}()

// renderCapabilities returns the fixed Capabilities charts are rendered with: Helm's default
// API versions, RenderKubeVersion, and no build-dependent Helm fields (Go version, git commit).
func renderCapabilities(extra []string) *chartutil.Capabilities {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.APIVersions = append(slices.Clone(caps.APIVersions), builtInKinds...)
	caps.APIVersions = append(caps.APIVersions, extra...)
	kv, err := chartutil.ParseKubeVersion(RenderKubeVersion)
	if err != nil {
		panic(fmt.Sprintf("RenderKubeVersion %q: %v", RenderKubeVersion, err))
	}
	caps.KubeVersion = *kv
	caps.HelmVersion.GoVersion = ""
	caps.HelmVersion.GitCommit = ""
	caps.HelmVersion.GitTreeState = ""
	return caps
}

// LoadChartFS loads the chart folder at the root of fsys as helm's loader.LoadDir loads a
// folder (.helmignore honoured).
func LoadChartFS(fsys fs.FS) (*chart.Chart, error) {
	files, err := chartFiles(fsys)
	if err != nil {
		return nil, err
	}
	return loader.LoadFiles(files)
}

// RenderLoadedChart is RenderChart for a chart already loaded (fetched from a source), with
// values already read (nil for none). It may change chrt (dependencies are processed in place).
func RenderLoadedChart(chrt *chart.Chart, values map[string]interface{}, releaseName, namespace string, apiVersions ...string) ([]*unstructured.Unstructured, *v1alpha1.ChartInfo, error) {
	if err := checkRenderTarget(releaseName, namespace); err != nil {
		return nil, nil, err
	}
	return renderChart(chrt, values, releaseName, namespace, apiVersions)
}
