package release

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// RenderManifests reads every *.yaml, *.yml and *.json file under dir (recursively, in lexical
// order; folders whose name starts with a dot are skipped), splits multi-document YAML, skips
// empty documents and flattens List kinds. A document that is not a Kubernetes object is an
// error naming its file and 1-based document index. Objects are returned as found; namespaces
// are left as written.
func RenderManifests(dir string) ([]*unstructured.Unstructured, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("reading manifests: %s is not a folder", dir)
	}
	return renderManifests(dirTree(dir))
}

// RenderManifestsFS is RenderManifests for the root folder of fsys (fetched content); name
// says where fsys comes from in messages (e.g. a Git URL, commit and path).
func RenderManifestsFS(fsys fs.FS, name string) ([]*unstructured.Unstructured, error) {
	return renderManifests(fsTree(fsys, name))
}

func renderManifests(t tree) ([]*unstructured.Unstructured, error) {
	// A Helm chart or an OLM bundle read as plain manifests fails on its first file that is
	// not an object (Chart.yaml, annotations.yaml): say what the folder is instead.
	if _, err := fs.Stat(t.fsys, "Chart.yaml"); err == nil {
		return nil, fmt.Errorf("%s is a Helm chart (it has Chart.yaml), not a folder of plain manifests: render it as a chart (rewind release create --chart, or a source of kind helm)", t.name("."))
	}
	if _, err := fs.Stat(t.fsys, "metadata/annotations.yaml"); err == nil {
		if _, err := fs.Stat(t.fsys, "manifests"); err == nil {
			return nil, fmt.Errorf("%s is an OLM bundle (it has metadata/annotations.yaml and manifests/), not a folder of plain manifests: read it as a bundle (rewind release create --bundle, or a source of kind bundle)", t.name("."))
		}
	}
	files, err := manifestFiles(t, ".")
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml, *.yml or *.json files in %s", t.name("."))
	}
	objs, err := decodeFiles(t, files)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no Kubernetes objects in %s: every manifest file is empty", t.name("."))
	}
	return objs, nil
}

// tree is a folder to read a release from: a folder on disk or content fetched from a source.
type tree struct {
	fsys fs.FS
	// name says where a slash-separated path of fsys is, in messages.
	name func(p string) string
}

// dirTree is the folder dir on disk; paths are named as paths on disk.
func dirTree(dir string) tree {
	return tree{fsys: os.DirFS(dir), name: func(p string) string {
		if p == "." {
			return dir
		}
		return filepath.Join(dir, filepath.FromSlash(p))
	}}
}

// fsTree is fsys; paths are named relative to label ("label/p").
func fsTree(fsys fs.FS, label string) tree {
	return tree{fsys: fsys, name: func(p string) string {
		switch {
		case label == "":
			return p
		case p == ".":
			return label
		}
		return strings.TrimSuffix(label, "/") + "/" + p
	}}
}

// manifestFiles lists the manifest files under dir of t in lexical order.
func manifestFiles(t tree, dir string) ([]string, error) {
	info, err := fs.Stat(t.fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %s: %w", t.name(dir), unwrapPathError(err))
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("reading manifests: %s is not a folder", t.name(dir))
	}
	var files []string
	// WalkDir visits entries in lexical order, so files come back sorted.
	err = fs.WalkDir(t.fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != dir && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		if hasManifestExtension(d.Name()) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading manifests in %s: %w", t.name(dir), err)
	}
	return files, nil
}

// unwrapPathError drops the *fs.PathError's own (relative) path: the caller names the file.
func unwrapPathError(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

func hasManifestExtension(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// decodeFiles decodes the objects of each file of t, in order.
func decodeFiles(t tree, files []string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := fs.ReadFile(t.fsys, f)
		if err != nil {
			return nil, fmt.Errorf("reading manifests: %s: %w", t.name(f), unwrapPathError(err))
		}
		found, err := decodeDocuments(t.name(f), data)
		if err != nil {
			return nil, err
		}
		objs = append(objs, found...)
	}
	return objs, nil
}
