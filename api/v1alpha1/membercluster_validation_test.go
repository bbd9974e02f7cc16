//go:build !unit

package v1alpha1_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestMemberClusterModeValidation: a push member needs its kubeconfig Secret, a pull member
// must not have one, the mode defaults to Push and cannot change, and a pull member's name
// fits in its hub namespace's name.
func TestMemberClusterModeValidation(t *testing.T) {
	c := hub(t)
	ctx := t.Context()
	ref := v1alpha1.SecretKeyRef{Namespace: "rewind-system", Name: "kc"}
	cases := []struct {
		name string
		// mc is created.
		mc v1alpha1.MemberCluster
		// message must appear in the rejection; empty: accepted.
		message string
		// mode is the mode stored, when accepted.
		mode string
	}{
		{name: "push by default", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "mode-default"},
			Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: ref}}, mode: v1alpha1.ModePush},
		{name: "pull without kubeconfig", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "mode-pull"},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}, mode: v1alpha1.ModePull},
		{name: "push without kubeconfig", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "mode-push-nokc"},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePush}}, message: "spec.kubeconfigSecretRef is required in mode Push"},
		{name: "pull with kubeconfig", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "mode-pull-kc"},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull, KubeconfigSecretRef: ref}}, message: "spec.kubeconfigSecretRef must be unset in mode Pull"},
		{name: "unknown mode", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "mode-other"},
			Spec: v1alpha1.MemberClusterSpec{Mode: "Both"}}, message: "spec.mode"},
		{name: "pull member name too long", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("a", 50)},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}, message: "rewind-member-NAME"},
		{name: "pull member name with a dot", mc: v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "edge.site-1"},
			Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}, message: "no dots"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mc := tc.mc.DeepCopy()
			err := c.Create(ctx, mc)
			if err == nil {
				t.Cleanup(func() { _ = c.Delete(ctx, mc) })
			}
			if tc.message != "" {
				if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.message) {
					t.Fatalf("want Invalid naming %q, got %v", tc.message, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := &v1alpha1.MemberCluster{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(mc), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.Mode != tc.mode {
				t.Fatalf("mode %q stored, want %q", got.Spec.Mode, tc.mode)
			}
			// The mode cannot change.
			other := v1alpha1.ModePull
			if tc.mode == v1alpha1.ModePull {
				other = v1alpha1.ModePush
				got.Spec.KubeconfigSecretRef = ref
			} else {
				got.Spec.KubeconfigSecretRef = v1alpha1.SecretKeyRef{}
			}
			got.Spec.Mode = other
			if err := c.Update(ctx, got); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.mode cannot change") {
				t.Fatalf("changing the mode to %s: want Invalid naming spec.mode, got %v", other, err)
			}
		})
	}
}
