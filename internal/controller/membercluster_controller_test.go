//go:build !unit

package controller

import (
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// A member's clients are held while it is registered and dropped once its MemberCluster is
// deleted, so that members that come and go do not pile up connections and discovery.
func TestMemberClientsAreDroppedWithTheirMember(t *testing.T) {
	c := testenv.HubClient(t, env.Hub.RESTConfig())
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	ctx := t.Context()
	registerMember(t, c, ns)
	members := &member.Cache{Hub: c}
	r := &MemberClusterReconciler{Client: c, Members: members}
	req := ctrl.Request{NamespacedName: client.ObjectKey{Name: env.Members[0].Name}}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := members.Len(); n != 1 {
		t.Fatalf("after checking the member, %d members have clients; want 1", n)
	}
	mc := &v1alpha1.MemberCluster{}
	if err := c.Get(ctx, req.NamespacedName, mc); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if n := members.Len(); n != 0 {
		t.Errorf("after the member was deleted, %d members still have clients; want 0", n)
	}
}
