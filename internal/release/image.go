package release

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// CheckImage makes sure the release's image is the one the manifests deploy: at least one
// container or init container of a Deployment in objs must use exactly image. Otherwise the
// error names the Deployments and the images they use.
func CheckImage(objs []*unstructured.Unstructured, image string) error {
	return CheckImageField(objs, image, "--image")
}

// CheckImageField is CheckImage for an image given by field (a CLI flag such as --image, or
// spec.image), which its errors name.
func CheckImageField(objs []*unstructured.Unstructured, image, field string) error {
	var found []string
	deployments := 0
	for _, o := range objs {
		if o == nil || o.GroupVersionKind().Group != "apps" || o.GetKind() != "Deployment" {
			continue
		}
		deployments++
		var images []string
		for _, field := range []string{"initContainers", "containers"} {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
			for _, raw := range containers {
				c, _ := raw.(map[string]interface{})
				img, _ := c["image"].(string)
				if img == image {
					return nil
				}
				images = append(images, img)
			}
		}
		name := o.GetName()
		if ns := o.GetNamespace(); ns != "" {
			name = ns + "/" + name
		}
		if len(images) == 0 {
			found = append(found, fmt.Sprintf("%s (no containers)", name))
			continue
		}
		found = append(found, fmt.Sprintf("%s uses %s", name, strings.Join(quoteAll(images), ", ")))
	}
	if deployments == 0 {
		return fmt.Errorf("the manifests have no Deployment, so no container runs %s %q; an operator release must deploy the operator", field, image)
	}
	return fmt.Errorf("no Deployment in the manifests runs %s %q (Deployment %s); pass the image the manifests use to %s, or fix the manifests", field, image, strings.Join(found, "; Deployment "), field)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// OperatorImageIn returns the image the manifests objs run for a release image: image itself
// when a Deployment runs it; else the image a Deployment runs with the same digest (a registry
// mirror set by per-cluster values: repository changed, content identical); else image.
func OperatorImageIn(objs []*unstructured.Unstructured, image string) string {
	_, digest, pinned := strings.Cut(image, "@")
	var mirror string
	for _, o := range objs {
		if o == nil || o.GroupVersionKind().Group != "apps" || o.GetKind() != "Deployment" {
			continue
		}
		for _, field := range []string{"initContainers", "containers"} {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
			for _, raw := range containers {
				c, _ := raw.(map[string]interface{})
				img, _ := c["image"].(string)
				if img == image {
					return image
				}
				if pinned && mirror == "" && strings.HasSuffix(img, "@"+digest) {
					mirror = img
				}
			}
		}
	}
	if mirror != "" {
		return mirror
	}
	return image
}
