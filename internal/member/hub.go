package member

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// SecretError says the kubeconfig Secret of a member is missing or unusable; only a person can
// fix it.
type SecretError struct {
	Reason  string
	Message string
}

func (e *SecretError) Error() string { return e.Message }

// ConfigFor reads the kubeconfig Secret of mc from the hub and returns a client configuration
// for the member. A missing Secret or key, or an unparsable kubeconfig, is a *SecretError.
func ConfigFor(ctx context.Context, hub client.Reader, mc *v1alpha1.MemberCluster) (*rest.Config, error) {
	if mc.Spec.Mode == v1alpha1.ModePull {
		return nil, &SecretError{Reason: v1alpha1.ReasonPullMode, Message: fmt.Sprintf(
			"member %s is in mode Pull: the hub holds no credential for it; its agent (rewind agent) does its work in the member",
			mc.Name)}
	}
	ref := mc.Spec.KubeconfigSecretRef
	secret := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &SecretError{Reason: v1alpha1.ReasonSecretNotFound, Message: fmt.Sprintf(
				"kubeconfig Secret %s/%s not found: create it (rewind clusters add %s --kubeconfig FILE) or fix spec.kubeconfigSecretRef",
				ref.Namespace, ref.Name, mc.Name)}
		}
		if apierrors.IsForbidden(err) {
			// Name the Secret, what is missing and the fix; the API server's message names the
			// controller's identity.
			return nil, &SecretError{Reason: v1alpha1.ReasonSecretForbidden, Message: fmt.Sprintf(
				"the controller may not read the kubeconfig Secret %s/%s: %v; keep member kubeconfigs in rewind-system, or grant get on secrets in %s to the controller",
				ref.Namespace, ref.Name, err, ref.Namespace)}
		}
		return nil, fmt.Errorf("reading kubeconfig Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	cfg, err := RESTConfigFromSecret(secret, ref.Key)
	if err != nil {
		return nil, &SecretError{Reason: v1alpha1.ReasonKubeconfigInvalid, Message: fmt.Sprintf(
			"kubeconfig Secret %s/%s is unusable: %v", ref.Namespace, ref.Name, err)}
	}
	return cfg, nil
}
