package release

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestCheckReady(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	src := &v1alpha1.ReleaseSource{Git: &v1alpha1.GitSource{URL: "https://git.example.com/op.git"}}
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
	}
	cases := []struct {
		name string
		spec v1alpha1.OperatorReleaseSpec
		st   v1alpha1.OperatorReleaseStatus
		// notReady: a NotReadyError is expected, stalled as said, its text holding says.
		notReady, stalled bool
		says              string
	}{
		{name: "uploaded, being created", spec: v1alpha1.OperatorReleaseSpec{Digest: digest}},
		{name: "uploaded, ready", spec: v1alpha1.OperatorReleaseSpec{Digest: digest},
			st: v1alpha1.OperatorReleaseStatus{Conditions: []metav1.Condition{cond("Ready", "True", "Stored", "")}}},
		{name: "uploaded, artifact missing", spec: v1alpha1.OperatorReleaseSpec{Digest: digest},
			st:       v1alpha1.OperatorReleaseStatus{Conditions: []metav1.Condition{cond("Ready", "False", "ArtifactMissing", "upload it"), cond("Stalled", "True", "ArtifactMissing", "upload it")}},
			notReady: true, stalled: true, says: "ArtifactMissing: upload it"},
		{name: "source, not reconciled", spec: v1alpha1.OperatorReleaseSpec{Source: src}, notReady: true, says: "has not fetched and rendered"},
		{name: "source, fetching", spec: v1alpha1.OperatorReleaseSpec{Source: src},
			st:       v1alpha1.OperatorReleaseStatus{Conditions: []metav1.Condition{cond("Reconciling", "True", "Fetching", "fetching x")}},
			notReady: true, says: "has not fetched"},
		{name: "source, failed", spec: v1alpha1.OperatorReleaseSpec{Source: src},
			st:       v1alpha1.OperatorReleaseStatus{Conditions: []metav1.Condition{cond("Ready", "False", "TagMoved", "tag moved"), cond("Stalled", "True", "TagMoved", "tag moved")}},
			notReady: true, stalled: true, says: "TagMoved: tag moved"},
		{name: "source, ready", spec: v1alpha1.OperatorReleaseSpec{Source: src},
			st: v1alpha1.OperatorReleaseStatus{Digest: digest, Conditions: []metav1.Condition{cond("Ready", "True", "Stored", "")}}},
		{name: "source, ready without digest", spec: v1alpha1.OperatorReleaseSpec{Source: src},
			st:       v1alpha1.OperatorReleaseStatus{Conditions: []metav1.Condition{cond("Ready", "True", "Stored", "")}},
			notReady: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rel := &v1alpha1.OperatorRelease{Spec: tc.spec, Status: tc.st}
			rel.Namespace, rel.Name = "team-a", "op-v1"
			err := CheckReady(rel)
			if !tc.notReady {
				if err != nil {
					t.Fatalf("CheckReady = %v, want nil", err)
				}
				return
			}
			var nr *NotReadyError
			if !errors.As(err, &nr) || !IsNotReady(err) {
				t.Fatalf("CheckReady = %v, want a NotReadyError", err)
			}
			if nr.Stalled != tc.stalled || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "team-a/op-v1") {
				t.Errorf("CheckReady = %q (stalled %v), want stalled %v and %q", err, nr.Stalled, tc.stalled, tc.says)
			}
		})
	}
}

func TestManifestDigest(t *testing.T) {
	rel := &v1alpha1.OperatorRelease{}
	rel.Status.Digest = "sha256:status"
	if got := ManifestDigest(rel); got != "sha256:status" {
		t.Errorf("ManifestDigest = %s, want status.digest", got)
	}
	rel.Spec.Digest = "sha256:spec"
	if got := ManifestDigest(rel); got != "sha256:spec" {
		t.Errorf("ManifestDigest = %s, want spec.digest first", got)
	}
}
