package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
)

// RenderInputKind labels the stored render inputs of chart releases.
const RenderInputKind = "release-render-input"

// RenderInput is what a chart release was rendered from, kept so that a Rollout can render
// it again with per-cluster values: the chart (a packaged archive, or its files), the values
// it was rendered with, the Helm release name, namespace and extra API versions.
type RenderInput struct {
	// Archive is a packaged chart (.tgz), when the chart came packaged.
	Archive []byte `json:"archive,omitempty"`
	// Files are the chart's files (.helmignore applied), when it came as a folder.
	Files []ChartFile `json:"files,omitempty"`
	// Values are the values the release was rendered with.
	Values map[string]any `json:"values,omitempty"`
	// ReleaseName, Namespace and APIVersions are RenderChart's.
	ReleaseName string   `json:"releaseName"`
	Namespace   string   `json:"namespace"`
	APIVersions []string `json:"apiVersions,omitempty"`
}

// ChartFile is one file of a chart folder.
type ChartFile struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
}

// ChartFilesFS reads the chart folder at the root of fsys as helm does (.helmignore applies).
func ChartFilesFS(fsys fs.FS) ([]ChartFile, error) {
	files, err := chartFiles(fsys)
	if err != nil {
		return nil, err
	}
	out := make([]ChartFile, 0, len(files))
	for _, f := range files {
		out = append(out, ChartFile{Name: f.Name, Data: f.Data})
	}
	return out, nil
}

func (in *RenderInput) load() (*chart.Chart, error) {
	if len(in.Archive) > 0 {
		return loader.LoadArchive(bytes.NewReader(in.Archive))
	}
	files := make([]*loader.BufferedFile, 0, len(in.Files))
	for _, f := range in.Files {
		files = append(files, &loader.BufferedFile{Name: f.Name, Data: f.Data})
	}
	return loader.LoadFiles(files)
}

// Render renders the chart with its values and then each of overrides over them, in order
// (maps merge key by key; any other value replaces).
func (in *RenderInput) Render(overrides ...map[string]any) ([]*unstructured.Unstructured, error) {
	chrt, err := in.load()
	if err != nil {
		return nil, fmt.Errorf("loading the stored chart: %w", err)
	}
	values := MergeValues(nil, in.Values)
	for _, o := range overrides {
		values = MergeValues(values, o)
	}
	objs, _, err := renderChart(chrt, values, in.ReleaseName, in.Namespace, in.APIVersions)
	return objs, err
}

// MergeValues returns a copy of dst with src merged over it: maps merge key by key, any other
// value of src replaces dst's.
func MergeValues(dst, src map[string]any) map[string]any {
	out := make(map[string]any, len(dst)+len(src))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := out[k].(map[string]any); ok {
				out[k] = MergeValues(dm, sm)
				continue
			}
			out[k] = MergeValues(nil, sm)
			continue
		}
		out[k] = v
	}
	return out
}

// StoreRenderInput stores in content-addressed in namespace and records it in rel's status
// (the caller writes the status).
func StoreRenderInput(ctx context.Context, c client.Client, rel *v1alpha1.OperatorRelease, in *RenderInput) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ref, err := artifact.Put(ctx, c, rel.Namespace, RenderInputKind, data)
	if err != nil {
		return fmt.Errorf("storing the render input of release %s: %w", rel.Name, err)
	}
	rel.Status.RenderInput = ref.Digest
	return nil
}

// LoadRenderInput reads what rel was rendered from. A release that is not a chart, or was
// stored before render inputs were kept, has none: an error says so.
func LoadRenderInput(ctx context.Context, c client.Reader, rel *v1alpha1.OperatorRelease) (*RenderInput, error) {
	if rel.Status.RenderInput == "" {
		return nil, fmt.Errorf("release %s has no stored chart to render with other values (only chart releases have one): per-cluster values (spec.valuesFrom) need a chart release", rel.Name)
	}
	data, err := artifact.Get(ctx, c, rel.Namespace, rel.Status.RenderInput)
	if err != nil {
		return nil, fmt.Errorf("reading the render input of release %s: %w", rel.Name, err)
	}
	in := &RenderInput{}
	if err := json.Unmarshal(data, in); err != nil {
		return nil, fmt.Errorf("the render input of release %s: %w", rel.Name, err)
	}
	return in, nil
}

// LoadManifests reads canonical manifests stored under digest in namespace (a release's, or a
// cluster's own rendering of it).
func LoadManifests(ctx context.Context, c client.Reader, namespace, digest string) ([]*unstructured.Unstructured, error) {
	data, err := artifact.Get(ctx, c, namespace, digest)
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", digest, err)
	}
	return Parse(data)
}
