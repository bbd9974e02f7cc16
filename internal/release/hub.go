package release

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
)

// ArtifactKind labels the stored manifests of releases.
const ArtifactKind = "release-manifests"

// CreateResult says what Create did.
type CreateResult string

// Create results.
const (
	Created   CreateResult = "created"
	Unchanged CreateResult = "unchanged"
)

// Stored says where canonical manifests are stored in the hub and what they hold.
type Stored struct {
	// Ref is where the manifests are.
	Ref artifact.Ref
	// CRDs the manifests ship.
	CRDs []v1alpha1.CRDInfo
	// Objects is the number of manifests.
	Objects int32
}

// Store stores canonical manifests content-addressed in namespace (never twice; when writing
// fails midway, nothing of them is left behind) and says what they hold. Both ways a release
// comes to be use it: rewind release create (Create) and the OperatorRelease controller.
func Store(ctx context.Context, c client.Client, namespace string, canonical []byte) (*Stored, error) {
	stored, err := Describe(namespace, canonical)
	if err != nil {
		return nil, err
	}
	if _, err := artifact.Put(ctx, c, namespace, ArtifactKind, canonical); err != nil {
		return nil, err
	}
	return stored, nil
}

// Describe says what canonical manifests stored in namespace hold, without reading or writing
// the store (for manifests just read from it).
func Describe(namespace string, canonical []byte) (*Stored, error) {
	objs, err := Parse(canonical)
	if err != nil {
		return nil, err
	}
	return &Stored{Ref: artifact.RefOf(namespace, canonical), CRDs: CRDInventory(objs), Objects: int32(len(objs))}, nil
}

// SetReady records s in status: CRD inventory, counts, artifact location and digest, and the
// Ready condition (True, Stored) for generation; a Stalled condition is removed.
func (s *Stored) SetReady(status *v1alpha1.OperatorReleaseStatus, generation int64) {
	status.CRDs, status.Objects, status.Bytes = s.CRDs, s.Objects, s.Ref.Size
	status.Artifact, status.Digest = s.Ref.String(), s.Ref.Digest
	status.ObservedGeneration = generation
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonStored,
		Message: fmt.Sprintf("%d manifests stored at %s", s.Objects, s.Ref), ObservedGeneration: generation,
	})
	meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionStalled)
	meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionReconciling)
}

// Create stores the canonical manifests content-addressed in the release's hub namespace
// (never twice) and creates the OperatorRelease with its status (CRD inventory, counts,
// artifact location). Creating the same release again is a no-op; a different release under
// an existing name is an error, because releases are immutable. rel is an uploaded release
// (spec.digest and spec.format set, no spec.source).
func Create(ctx context.Context, c client.Client, rel *v1alpha1.OperatorRelease, canonical []byte) (CreateResult, error) {
	if got := Digest(canonical); got != rel.Spec.Digest {
		return "", fmt.Errorf("release %s: spec.digest %s does not match the manifests (%s)", rel.Name, rel.Spec.Digest, got)
	}
	renderInput := rel.Status.RenderInput // see StoreRenderInput
	stored, err := Store(ctx, c, rel.Namespace, canonical)
	if err != nil {
		return "", err
	}
	existing := &v1alpha1.OperatorRelease{}
	err = c.Get(ctx, client.ObjectKeyFromObject(rel), existing)
	result := Unchanged
	switch {
	case apierrors.IsNotFound(err):
		if err := c.Create(ctx, rel); err != nil {
			return "", fmt.Errorf("creating OperatorRelease %s/%s: %w", rel.Namespace, rel.Name, err)
		}
		existing = rel
		result = Created
	case err != nil:
		return "", err
	default:
		if !equality.Semantic.DeepEqual(existing.Spec, rel.Spec) {
			return "", fmt.Errorf("OperatorRelease %s/%s already exists with a different spec (version %s, digest %s; this one: version %s, digest %s): releases are immutable, create this one under a new name",
				rel.Namespace, rel.Name, existing.Spec.Version, ManifestDigest(existing), rel.Spec.Version, rel.Spec.Digest)
		}
	}
	want := existing.Status.DeepCopy()
	stored.SetReady(want, existing.Generation)
	want.Format, want.Chart, want.Bundle = existing.Spec.Format, existing.Spec.Chart, existing.Spec.Bundle
	if renderInput != "" {
		want.RenderInput = renderInput
	}
	if !equality.Semantic.DeepEqual(*want, existing.Status) {
		base := existing.DeepCopy()
		existing.Status = *want
		if err := c.Status().Patch(ctx, existing, client.MergeFrom(base)); err != nil {
			return "", fmt.Errorf("setting the status of OperatorRelease %s/%s: %w", rel.Namespace, rel.Name, err)
		}
		*rel = *existing
	}
	return result, nil
}

// Load reads an OperatorRelease and its manifests (verified against the digest). A release
// whose manifests cannot be read yet is a *NotReadyError (see CheckReady).
func Load(ctx context.Context, c client.Reader, namespace, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	rel := &v1alpha1.OperatorRelease{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, rel); err != nil {
		return nil, nil, getError(namespace, name, err)
	}
	objs, err := Manifests(ctx, c, rel)
	return rel, objs, err
}

// getError words a failed read of an OperatorRelease; a missing one as the CLI words a missing
// hub object (apierrors.IsNotFound still holds).
func getError(namespace, name string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("release %q not found in namespace %s (list them with: kubectl get operatorreleases -n %s): %w", name, namespace, namespace, err)
	}
	return fmt.Errorf("reading release %s/%s: %w", namespace, name, err)
}

// Manifests reads the stored manifests of rel, verified against its digest (ManifestDigest).
// A release whose manifests cannot be read yet is a *NotReadyError (see CheckReady).
func Manifests(ctx context.Context, c client.Reader, rel *v1alpha1.OperatorRelease) ([]*unstructured.Unstructured, error) {
	if err := CheckReady(rel); err != nil {
		return nil, err
	}
	b, err := artifact.Get(ctx, c, rel.Namespace, ManifestDigest(rel))
	if err != nil {
		return nil, fmt.Errorf("manifests of release %s: %w", rel.Name, err)
	}
	return Parse(b)
}
