package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ids returns "Kind namespace/name" (or "Kind name") for each object, sorted.
func ids(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			id = o.GetKind() + " " + ns + "/" + o.GetName()
		}
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// find returns the object of kind and name in objs, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s in %v", kind, name, ids(objs))
	return nil
}

// images returns the container images of a Deployment.
func images(t *testing.T, dep *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range containers {
		out = append(out, c.(map[string]interface{})["image"].(string))
	}
	return out
}

// writeFiles writes files (path relative to dir -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// copyDir copies the folder src into a new temporary folder and returns it.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// wantErr checks that err is not nil and contains every one of parts.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

// The images of the fixtures.
const (
	imageV1 = "example.com/widget-operator@sha256:9a29f767217bb37ff4908f8cdde53c33bd89babc544a8722d7559128d47a7651"
	imageV2 = "example.com/widget-operator@sha256:96de02ea89f210bd768e9511189362b1dd87b8e26bd35d6b92fbf9bdc95504c0"
	imageV3 = "example.com/widget-operator@sha256:882525a9c0fb9d06fade63fe984bb3c1111756299ed9c7c332641fa52a46198b"
)
