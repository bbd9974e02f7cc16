package history

import (
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestDescribe(t *testing.T) {
	rev := func(n int32, rel, outcome string, auto bool) v1alpha1.Revision {
		return v1alpha1.Revision{Revision: n, Release: rel, Outcome: outcome, Automatic: auto}
	}
	type want struct{ action, shown string }
	cases := []struct {
		// name says what happened.
		name string
		// history is the Rollout's status.history.
		history []v1alpha1.Revision
		// want is each entry's Action() and Shown.
		want []want
	}{
		{"first install", []v1alpha1.Revision{rev(1, "a", "Succeeded", false)},
			[]want{{"upgrade", "Succeeded"}}},
		{"a person rolls a successful release back",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "b", "Succeeded", false), rev(3, "a", "Succeeded", false)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "Succeeded, then rolled back by a person"}, {"rollback by a person", "RolledBack"}}},
		{"a person rolls back a release still rolling out",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "b", "Superseded", false), rev(3, "a", "InProgress", false)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "RolledBack by a person"}, {"rollback by a person", "RollingBack"}}},
		{"the policy rolls a failed gate back",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "bad", "RolledBack", false), rev(3, "a", "Succeeded", true)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "RolledBack by the policy"}, {"rollback by the policy", "RolledBack"}}},
		{"a retry of the failed release is an upgrade",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "bad", "RolledBack", false), rev(3, "a", "Succeeded", true), rev(4, "bad", "InProgress", false)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "RolledBack by the policy"}, {"rollback by the policy", "RolledBack"}, {"upgrade", "InProgress"}}},
		{"a person's rollback that failed",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "b", "Succeeded", false), rev(3, "a", "Failed", false)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "Succeeded, then rolled back by a person"}, {"rollback by a person", "RollbackFailed"}}},
		{"a new release after a rollback is an upgrade",
			[]v1alpha1.Revision{rev(1, "a", "Succeeded", false), rev(2, "b", "Succeeded", false), rev(3, "a", "Succeeded", false), rev(4, "c", "Succeeded", false)},
			[]want{{"upgrade", "Succeeded"}, {"upgrade", "Succeeded, then rolled back by a person"}, {"rollback by a person", "RolledBack"}, {"upgrade", "Succeeded"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Describe(tc.history)
			if len(got) != len(tc.want) {
				t.Fatalf("%d entries, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				if got[i].Action() != w.action || got[i].Shown != w.shown {
					t.Errorf("revision %d: %q %q, want %q %q", got[i].Revision.Revision, got[i].Action(), got[i].Shown, w.action, w.shown)
				}
				if got[i].Kind == KindRollback && got[i].Shown == OutcomeSucceeded {
					t.Errorf("revision %d: a rollback shown as Succeeded", got[i].Revision.Revision)
				}
			}
		})
	}
}
