// Package mysqloperator holds the sample MySQLCluster operator's three releases as they are
// shipped (deploy/v1: plain manifests, deploy/v2: a Helm chart, deploy/v3: an OLM bundle) and
// writes them out for `rewind release create`.
package mysqloperator

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
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

// Write copies the release of version ("1.0.0", "v2", ...) into dir/<major>[-failing] and returns
// where it is. failReconcile builds the same release with the operator started with
// --fail-reconcile: a bad release that really fails its health gate.
func Write(dir, version string, failReconcile bool) (Package, error) {
	b, err := operator.BuildFor(version)
	if err != nil {
		return Package{}, err
	}
	name := b.Major()
	if failReconcile {
		name += "-failing"
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
	if failReconcile {
		if err := addFailFlag(p); err != nil {
			return Package{}, err
		}
	}
	return p, nil
}

// addFailFlag adds --fail-reconcile to the operator container's arguments.
func addFailFlag(p Package) error {
	switch p.Source {
	case SourceChart:
		values := filepath.Join(p.Dir, "values.yaml")
		data, err := os.ReadFile(values)
		if err != nil {
			return err
		}
		return os.WriteFile(values, []byte(strings.Replace(string(data), "failReconcile: false", "failReconcile: true", 1)), 0o644)
	case SourceManifests:
		return editYAML(filepath.Join(p.Dir, "20-deployment.yaml"), func(m map[string]any) error {
			return appendArg(m, "spec", "template", "spec", "containers")
		})
	default:
		return editYAML(filepath.Join(p.Dir, "manifests", "mysql-operator.clusterserviceversion.yaml"), func(m map[string]any) error {
			deps, _ := dig(m, "spec", "install", "spec", "deployments").([]any)
			if len(deps) == 0 {
				return fmt.Errorf("the CSV has no deployments")
			}
			return appendArg(deps[0].(map[string]any), "spec", "template", "spec", "containers")
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

func dig(m map[string]any, fields ...string) any {
	var cur any = m
	for _, f := range fields {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[f]
	}
	return cur
}

func appendArg(m map[string]any, containersPath ...string) error {
	cs, _ := dig(m, containersPath...).([]any)
	if len(cs) == 0 {
		return fmt.Errorf("no containers at %s", strings.Join(containersPath, "."))
	}
	c := cs[0].(map[string]any)
	args, _ := c["args"].([]any)
	c["args"] = append(args, "--fail-reconcile")
	return nil
}
