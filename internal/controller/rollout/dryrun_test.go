package rollout

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/preflight"
)

func TestSummarize(t *testing.T) {
	p := preflight.MemberPlan{
		ClusterPlan: preflight.ClusterPlan{Objects: 6, Bytes: 4096, CRDs: []preflight.CRDPlan{{Name: "gizmos.x", Findings: []preflight.Finding{
			{CRD: "gizmos.x", Check: preflight.CheckEnumNarrowed, Severity: preflight.SeverityError, Path: ".spec.mode", Message: "enum narrowed"},
			{CRD: "gizmos.x", Check: preflight.CheckFieldAdded, Severity: preflight.SeverityInfo, Path: ".spec.new", Message: "added"},
			{CRD: "gizmos.x", Check: preflight.CheckObjectRefused, Severity: preflight.SeverityError, Object: "a/slow", Path: ".spec.mode", Message: "refused"},
			{CRD: "gizmos.x", Check: preflight.CheckFieldLost, Severity: preflight.SeverityWarning, Object: "a/slow", Path: ".spec.old", Message: "lost"},
			{CRD: "gizmos.x", Check: preflight.CheckFieldChanged, Severity: preflight.SeverityInfo, Object: "a/slow", Path: ".spec.d", Message: "added by a default"},
			{CRD: "gizmos.x", Check: preflight.CheckConversionNotVerified, Severity: preflight.SeverityWarning, Object: "a/slow", Message: "not verified"},
		}}}},
		Changes: []preflight.ObjectChange{
			{Kind: "Deployment", Name: "op", Action: preflight.ActionUpdate},
			{Kind: "Secret", Name: "s", Action: preflight.ActionCreate},
			{Kind: "ConfigMap", Name: "c", Action: preflight.ActionUnchanged, Refused: "denied by a webhook"},
		},
		Snapshot: preflight.EstimateCapture(4096, &preflight.Measurement{Snapshot: "s1", Bytes: 8192, Duration: time.Second}),
	}
	s := Summarize("member1", "canary", "Upgrade", p, nil)
	if s.Creates != 1 || s.Updates != 1 || s.Unchanged != 1 || s.CRDFindings != 2 || s.RefusedObjects != 2 || s.RoundTripFindings != 2 ||
		s.Errors != 3 || s.Warnings != 2 || s.CustomResources != 6 || s.Bytes != 4096 {
		t.Errorf("summary %+v", s)
	}
	if !strings.HasPrefix(s.SnapshotEstimate, "about 500ms at 8.0 KiB/s (snapshot s1") {
		t.Errorf("estimate %q", s.SnapshotEstimate)
	}
	// Errors first, then warnings, at most planFindingsLimit.
	if len(s.Findings) != planFindingsLimit || !strings.HasPrefix(s.Findings[0], "error ") || !strings.HasPrefix(s.Findings[3], "warning ") ||
		!strings.Contains(strings.Join(s.Findings, "\n"), "ApplyRefused") {
		t.Errorf("findings %q", s.Findings)
	}

	s = Summarize("member2", "rest", "Upgrade", preflight.MemberPlan{}, errors.New("connection refused"))
	if s.Error != "connection refused" || s.Errors != 0 || s.SnapshotEstimate != "" {
		t.Errorf("an unreadable cluster: %+v", s)
	}
	s = Summarize("member3", "rest", "Upgrade", preflight.MemberPlan{Snapshot: preflight.EstimateCapture(10, nil)}, nil)
	if !strings.HasPrefix(s.SnapshotEstimate, "no measurement yet") {
		t.Errorf("no measurement: %q", s.SnapshotEstimate)
	}
}
