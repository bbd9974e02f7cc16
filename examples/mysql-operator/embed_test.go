package mysqloperator_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	mysqloperator "github.com/rewind-dev/rewind/examples/mysql-operator"
	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/internal/release"
)

// TestEveryReleaseRendersWithItsImageAndExtraArgs renders each release in its own format, as
// `rewind release create` does, with and without extra operator arguments.
func TestEveryReleaseRendersWithItsImageAndExtraArgs(t *testing.T) {
	for _, b := range operator.Builds {
		for _, args := range [][]string{nil, {"--fail-on-config=query_cache"}} {
			p, err := mysqloperator.Write(t.TempDir(), b.Version, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := p.Render("mysql-operator-system")
			if err != nil {
				t.Fatalf("%s (%s): %v", b.Version, p.Source, err)
			}
			if err := release.CheckImage(objs, b.Image()); err != nil {
				t.Fatalf("%s: %v", b.Version, err)
			}
			var gotArgs []string
			var crd *unstructured.Unstructured
			for _, o := range objs {
				switch o.GetKind() {
				case "Deployment":
					cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
					for _, a := range cs[0].(map[string]any)["args"].([]any) {
						gotArgs = append(gotArgs, a.(string))
					}
				case "CustomResourceDefinition":
					crd = o
				}
			}
			for _, a := range args {
				if !slices.Contains(gotArgs, a) {
					t.Errorf("%s (%s): operator args %v lack %s", b.Version, p.Source, gotArgs, a)
				}
			}
			if len(args) == 0 && slices.Contains(gotArgs, "--fail-on-config=query_cache") {
				t.Errorf("%s: a plain release carries the bad flag", b.Version)
			}
			if crd == nil {
				t.Fatalf("%s: no CRD", b.Version)
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			storage := ""
			for _, v := range versions {
				if v.(map[string]any)["storage"] == true {
					storage = v.(map[string]any)["name"].(string)
				}
			}
			if storage != b.APIVersion {
				t.Errorf("%s: CRD storage version %s, want %s", b.Version, storage, b.APIVersion)
			}
			strategy, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy")
			if b.ServesConversion != (strategy == "Webhook") {
				t.Errorf("%s: conversion strategy %q", b.Version, strategy)
			}
		}
	}
}
