package release

import (
	"fmt"
	"io/fs"
	"os"
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
	files, err := manifestFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml, *.yml or *.json files in %s", dir)
	}
	objs, err := decodeFiles(files)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no Kubernetes objects in %s: every manifest file is empty", dir)
	}
	return objs, nil
}

// manifestFiles lists the manifest files under dir in lexical order.
func manifestFiles(dir string) ([]string, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("reading manifests: %s is not a folder", dir)
	}
	var files []string
	// WalkDir visits entries in lexical order, so files come back sorted.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if hasManifestExtension(d.Name()) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading manifests in %s: %w", dir, err)
	}
	return files, nil
}

func hasManifestExtension(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// decodeFiles decodes the objects of each file, in order.
func decodeFiles(files []string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading manifests: %w", err)
		}
		found, err := decodeDocuments(f, data)
		if err != nil {
			return nil, err
		}
		objs = append(objs, found...)
	}
	return objs, nil
}
