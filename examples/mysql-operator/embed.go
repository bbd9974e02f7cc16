// Package mysqloperator holds the sample MySQLCluster operator's three releases as they are
// shipped (deploy/v1: plain manifests, deploy/v2: a Helm chart, deploy/v3: an OLM bundle) and
// writes them out for `rewind release create`.
package mysqloperator

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/internal/release"
)

// Deploy is the deploy/ folder.
//
//go:embed all:deploy
var Deploy embed.FS

// Source formats, as `rewind release create` takes them.
const (
	SourceManifests = "manifests"
	SourceChart     = "chart"
	SourceBundle    = "bundle"
)

// Package is a release written to disk.
type Package struct {
	Build operator.Build
	// Source is the flag of `rewind release create` that takes Dir (manifests, chart, bundle).
	Source string
	Dir    string
}

// ReleaseArgs are the arguments of `rewind release create NAME` for the package.
func (p Package) ReleaseArgs(name string) []string {
	return []string{"release", "create", name, "--operator", "mysql-operator", "--version", p.Build.Version,
		"--git-commit", p.Build.GitCommit, "--image", p.Build.Image(), "--" + p.Source, p.Dir,
		"--install-namespace", "mysql-operator-system"}
}

// Render renders the package's manifests as `rewind release create` does, for an install in
// namespace.
func (p Package) Render(namespace string) ([]*unstructured.Unstructured, error) {
	switch p.Source {
	case SourceManifests:
		return release.RenderManifests(p.Dir)
	case SourceChart:
		objs, _, err := release.RenderChart(p.Dir, "", "mysql-operator", namespace)
		return objs, err
	default:
		objs, _, err := release.RenderBundle(p.Dir, namespace)
		return objs, err
	}
}

// Write copies the release of version ("1.0.0", "v2", ...) into dir/<major> and returns where it
// is. With args, the release starts the operator with these extra arguments (in
// dir/<major>-<n>): for example --fail-reconcile or --fail-on-config=S make a bad release that
// really fails its health gate.
func Write(dir, version string, args ...string) (Package, error) {
	b, err := operator.BuildFor(version)
	if err != nil {
		return Package{}, err
	}
	name := b.Major()
	if len(args) > 0 {
		sum := sha256.Sum256([]byte(strings.Join(args, "\x00")))
		name += "-" + hex.EncodeToString(sum[:4])
	}
	out := filepath.Join(dir, name)
	src := "deploy/" + b.Major()
	err = fs.WalkDir(Deploy, src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(out, strings.TrimPrefix(strings.TrimPrefix(p, src), "/"))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(Deploy, p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		return Package{}, err
	}
	p := Package{Build: b, Dir: out}
	switch b.Major() {
	case "v1":
		p.Source = SourceManifests
	case "v2":
		p.Source = SourceChart
	default:
		p.Source = SourceBundle
	}
	if len(args) > 0 {
		if err := addArgs(p, args); err != nil {
			return Package{}, err
		}
	}
	return p, nil
}

// addArgs adds args to the operator container's arguments: in the chart's values
// (extraArgs), the plain Deployment, or the CSV's deployment.
func addArgs(p Package, args []string) error {
	switch p.Source {
	case SourceChart:
		return editYAML(filepath.Join(p.Dir, "values.yaml"), func(m map[string]any) error {
			extra, _ := m["extraArgs"].([]any)
			for _, a := range args {
				extra = append(extra, a)
			}
			m["extraArgs"] = extra
			return nil
		})
	case SourceManifests:
		return editYAML(filepath.Join(p.Dir, "20-deployment.yaml"), func(m map[string]any) error {
			return appendArgs(m, args, "spec", "template", "spec", "containers")
		})
	default:
		return editYAML(filepath.Join(p.Dir, "manifests", "mysql-operator.clusterserviceversion.yaml"), func(m map[string]any) error {
			v, _, _ := unstructured.NestedFieldNoCopy(m, "spec", "install", "spec", "deployments")
			deps, _ := v.([]any)
			if len(deps) == 0 {
				return fmt.Errorf("the CSV has no deployments")
			}
			return appendArgs(deps[0].(map[string]any), args, "spec", "template", "spec", "containers")
		})
	}
}

func editYAML(path string, edit func(map[string]any) error) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := edit(m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func appendArgs(m map[string]any, add []string, containersPath ...string) error {
	v, _, _ := unstructured.NestedFieldNoCopy(m, containersPath...)
	cs, _ := v.([]any)
	if len(cs) == 0 {
		return fmt.Errorf("no containers at %s", strings.Join(containersPath, "."))
	}
	c := cs[0].(map[string]any)
	args, _ := c["args"].([]any)
	for _, a := range add {
		args = append(args, a)
	}
	c["args"] = args
	return nil
}
