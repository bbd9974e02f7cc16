package preflight

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/internal/member"
)

var crdGVK = apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition")

// Read reads from a member what PlanCluster needs for the release's CRDs: the live CRDs of the
// same names and, for each, up to maxObjects custom resources at its storage version (read in
// pages; Truncated says where there were more).
func Read(ctx context.Context, cl *member.Cluster, release map[string]*apiextensionsv1.CustomResourceDefinition, maxObjects int) (ClusterInput, error) {
	in := ClusterInput{
		Release:   release,
		Live:      map[string]*apiextensionsv1.CustomResourceDefinition{},
		Objects:   map[string][]*unstructured.Unstructured{},
		Truncated: map[string]bool{},
	}
	for _, name := range sortedKeys(release) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(crdGVK)
		if err := retryRequest(ctx, func() error { return cl.Client.Get(ctx, client.ObjectKey{Name: name}, u) }); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return ClusterInput{}, fmt.Errorf("reading CRD %s: %w", name, err)
		}
		live, err := ToCRD(u)
		if err != nil {
			return ClusterInput{}, err
		}
		in.Live[name] = live
		objs, truncated, err := listCustomResources(ctx, cl, live, maxObjects)
		if err != nil {
			return ClusterInput{}, err
		}
		in.Objects[name], in.Truncated[name] = objs, truncated
	}
	return in, nil
}

// listCustomResources reads up to max objects of a live CRD at its storage version, page by page.
func listCustomResources(ctx context.Context, cl *member.Cluster, crd *apiextensionsv1.CustomResourceDefinition, max int) ([]*unstructured.Unstructured, bool, error) {
	version := storageVersion(crd)
	if version == "" {
		return nil, false, fmt.Errorf("CRD %s has no storage version", crd.Name)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	var out []*unstructured.Unstructured
	opts := metav1.ListOptions{Limit: 500}
	for {
		if left := int64(max - len(out)); left < opts.Limit {
			opts.Limit = left
		}
		var list *unstructured.UnstructuredList
		err := retryRequest(ctx, func() (err error) {
			list, err = cl.Dynamic.Resource(gvr).List(ctx, opts)
			return err
		})
		if err != nil {
			return nil, false, fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
		}
		for i := range list.Items {
			out = append(out, &list.Items[i])
		}
		opts.Continue = list.GetContinue()
		if opts.Continue == "" {
			return out, false, nil
		}
		if len(out) >= max {
			return out, true, nil
		}
	}
}
