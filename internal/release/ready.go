package release

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// ManifestDigest is the digest of rel's rendered manifests, under which they are stored:
// spec.digest of an uploaded release, or else status.digest, which the controller records once
// it has fetched and rendered a release from spec.source. It is empty while that has not
// happened. Every reader of a release's manifest digest goes through it.
func ManifestDigest(rel *v1alpha1.OperatorRelease) string {
	if rel.Spec.Digest != "" {
		return rel.Spec.Digest
	}
	return rel.Status.Digest
}

// ChartOf is the Helm chart rel was rendered from (spec.chart of an uploaded release, else
// status.chart), or nil.
func ChartOf(rel *v1alpha1.OperatorRelease) *v1alpha1.ChartInfo {
	if rel.Spec.Chart != nil {
		return rel.Spec.Chart
	}
	return rel.Status.Chart
}

// BundleOf is the OLM bundle rel was converted from (spec.bundle of an uploaded release, else
// status.bundle), or nil.
func BundleOf(rel *v1alpha1.OperatorRelease) *v1alpha1.BundleInfo {
	if rel.Spec.Bundle != nil {
		return rel.Spec.Bundle
	}
	return rel.Status.Bundle
}

// FormatOf is what rel's manifests were made from (spec.format, else status.format).
func FormatOf(rel *v1alpha1.OperatorRelease) string {
	if rel.Spec.Format != "" {
		return rel.Spec.Format
	}
	return rel.Status.Format
}

// NotReadyError says a release exists but its manifests cannot be used yet: a release from
// spec.source that the controller has not fetched and rendered yet (or failed to), or an
// uploaded release whose manifests are not stored. Load, Cache.Load and Manifests return it;
// a caller waits for the release as for one not created yet (errors.As, or IsNotReady).
type NotReadyError struct {
	Namespace, Name string
	// Reason and Message are those of the release's Ready condition (empty until the
	// controller has written one).
	Reason, Message string
	// Stalled is the release's Stalled condition: fetching, verifying or rendering failed
	// (the message says what and how to fix it). The controller retries failures that can go
	// away by themselves (unreachable, unauthorized, not found); the others need a new release.
	Stalled bool
}

func (e *NotReadyError) Error() string {
	switch {
	case e.Stalled:
		return fmt.Sprintf("release %s/%s is not ready: %s: %s", e.Namespace, e.Name, e.Reason, e.Message)
	case e.Message != "":
		return fmt.Sprintf("release %s/%s is not ready yet: %s", e.Namespace, e.Name, e.Message)
	}
	return fmt.Sprintf("release %s/%s is not ready yet: the controller has not fetched and rendered its spec.source (see kubectl get operatorrelease %s -n %s)", e.Namespace, e.Name, e.Name, e.Namespace)
}

// IsNotReady reports whether err is (or wraps) a *NotReadyError.
func IsNotReady(err error) bool {
	var nr *NotReadyError
	return errors.As(err, &nr)
}

// CheckReady returns a *NotReadyError when rel's manifests cannot be read yet: no manifest
// digest (a release from spec.source not rendered yet), or a Ready condition that is not True.
// An uploaded release without conditions (being created by rewind release create) is ready
// when its manifests are stored, which reading them checks.
func CheckReady(rel *v1alpha1.OperatorRelease) error {
	ready := meta.FindStatusCondition(rel.Status.Conditions, v1alpha1.ConditionReady)
	if ManifestDigest(rel) != "" && (ready == nil && rel.Spec.Source == nil || ready != nil && ready.Status == "True") {
		return nil
	}
	e := &NotReadyError{Namespace: rel.Namespace, Name: rel.Name,
		Stalled: meta.IsStatusConditionTrue(rel.Status.Conditions, v1alpha1.ConditionStalled)}
	if ready != nil {
		e.Reason, e.Message = ready.Reason, ready.Message
	}
	return e
}
