package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestIsSecret(t *testing.T) {
	meta := func(kind string) runtime.Object {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		return l
	}
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	for _, c := range []struct {
		// obj is what a reconciler reads through the hub reader.
		obj runtime.Object
		// secret says it must bypass the cache.
		secret bool
	}{
		{&corev1.Secret{}, true},
		{&corev1.SecretList{}, true},
		{meta("SecretList"), true},
		{u, true},
		{&corev1.ConfigMap{}, false},
		{cm, false},
		{meta("ConfigMapList"), false},
		{&v1alpha1.RolloutList{}, false},
	} {
		if got := isSecret(c.obj); got != c.secret {
			t.Errorf("isSecret(%T %s) = %v, want %v", c.obj, c.obj.GetObjectKind().GroupVersionKind(), got, c.secret)
		}
	}
}
