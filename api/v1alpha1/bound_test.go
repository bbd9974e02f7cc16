package v1alpha1_test

import (
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// TestBound: unset, a push member is bound to every namespace and a pull member to none;
// set, both are bound to the namespaces listed only.
func TestBound(t *testing.T) {
	push := &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePush}}
	pull := &v1alpha1.MemberCluster{Spec: v1alpha1.MemberClusterSpec{Mode: v1alpha1.ModePull}}
	if !push.Bound("team-a") || pull.Bound("team-a") {
		t.Errorf("unset: push bound %v (want true), pull bound %v (want false)", push.Bound("team-a"), pull.Bound("team-a"))
	}
	for _, mc := range []*v1alpha1.MemberCluster{push, pull} {
		mc.Spec.BoundNamespaces = []string{"team-a"}
		if !mc.Bound("team-a") || mc.Bound("team-b") {
			t.Errorf("%s bound to team-a only: team-a %v, team-b %v", mc.Spec.Mode, mc.Bound("team-a"), mc.Bound("team-b"))
		}
	}
}
