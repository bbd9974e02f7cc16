package join

import (
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
)

func TestValidateName(t *testing.T) {
	cases := []struct {
		name string
		// message must appear in the error; empty: valid.
		message string
	}{
		{"edge-berlin-7", ""},
		{strings.Repeat("a", 49), ""},
		{strings.Repeat("a", 50), "at most 49"},
		{"edge.berlin", "DNS label"},
		{"Edge", "DNS label"},
		{"", "DNS label"},
	}
	for _, tc := range cases {
		err := ValidateName(tc.name)
		if (tc.message == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.message)) {
			t.Errorf("ValidateName(%q) = %v, want %q", tc.name, err, tc.message)
		}
	}
}

func TestRenewAt(t *testing.T) {
	issued := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := Credential{IssuedAt: issued, ExpiresAt: issued.Add(10 * time.Hour)}
	if got, want := c.RenewAt(), issued.Add(8*time.Hour); !got.Equal(want) {
		t.Fatalf("RenewAt %s, want %s", got, want)
	}
}

// TestRulesNeverReachBeyondTheMember: no rule of the agent or the bootstrap token names
// another namespace's objects or a wildcard, and the tokens they may request are the agent's
// alone.
func TestRulesNeverReachBeyondTheMember(t *testing.T) {
	for name, rules := range map[string][]rbacv1.PolicyRule{"agent": AgentRules(), "bootstrap": BootstrapRules(), "membercluster": MemberClusterRules("edge-1")} {
		for _, r := range rules {
			for _, s := range append(append(append([]string{}, r.Verbs...), r.Resources...), r.APIGroups...) {
				if s == "*" {
					t.Errorf("%s rule %+v has a wildcard", name, r)
				}
			}
			for _, res := range r.Resources {
				if (res == "serviceaccounts/token" || res == "memberclusters" || res == "memberclusters/status") && len(r.ResourceNames) != 1 {
					t.Errorf("%s rule %+v on %s must name its one object", name, r, res)
				}
				if res == "serviceaccounts/token" && r.ResourceNames[0] != AgentServiceAccount {
					t.Errorf("%s rule %+v requests tokens of %s", name, r, r.ResourceNames[0])
				}
			}
		}
	}
}
