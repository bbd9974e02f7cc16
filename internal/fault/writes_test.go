package fault_test

import (
	"context"
	"net"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/rewind-dev/rewind/internal/fault"
)

// lostAnswer is the error of a write whose answer a reset lost.
var lostAnswer = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

// writesLosing is a client whose next write is done (when done) and answered with lostAnswer,
// or, for a PUT the transport sent again, answered with the conflict of its second try.
func writesLosing(t *testing.T, done bool, objs ...client.Object) (client.Client, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	lose := true
	c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if !lose {
				return c.Create(ctx, obj, opts...)
			}
			lose = false
			if done {
				if err := c.Create(ctx, obj, opts...); err != nil {
					return err
				}
			}
			return lostAnswer
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if !lose {
				return c.Update(ctx, obj, opts...)
			}
			lose = false
			if !done {
				return lostAnswer
			}
			sent := obj.DeepCopyObject().(client.Object)
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			return c.Update(ctx, sent, opts...) // the second try, with the resourceVersion the first replaced
		},
	})
	return fault.KnowsItsWrites(c), base
}

func secret(labels map[string]string, data string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", Labels: labels}, Data: map[string][]byte{"k": []byte(data)}}
}

func TestKnowsItsWritesCreate(t *testing.T) {
	ctx := t.Context()
	// Done, its answer lost: the object as sent (an empty map of labels is none), read back.
	c, base := writesLosing(t, true)
	s := secret(map[string]string{}, "v")
	if err := c.Create(ctx, s); err != nil {
		t.Fatalf("a create done whose answer was lost: %v", err)
	}
	if s.ResourceVersion == "" {
		t.Fatalf("the object is not what the server holds: resourceVersion %q", s.ResourceVersion)
	}
	// Not done: created again.
	c, base = writesLosing(t, false)
	if err := c.Create(ctx, secret(nil, "v")); err != nil {
		t.Fatalf("a create not done: %v", err)
	}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s"}, &corev1.Secret{}); err != nil {
		t.Fatalf("a create not done was not sent again: %v", err)
	}
	// Someone else's object there: AlreadyExists, as the create would have been answered; also
	// when theirs holds everything this one sent and more.
	c, _ = writesLosing(t, false, secret(nil, "theirs"))
	if err := c.Create(ctx, secret(nil, "mine")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a create meeting someone else's object: %v, want AlreadyExists", err)
	}
	theirs := secret(map[string]string{"by": "them"}, "v")
	theirs.Data["more"] = []byte("theirs")
	c, _ = writesLosing(t, false, theirs)
	if err := c.Create(ctx, secret(nil, "v")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a create meeting someone else's object that holds all it sent and more: %v, want AlreadyExists", err)
	}
	// Without a fault, an object there is AlreadyExists, even one exactly as sent: the wrapper
	// only reads after a fault.
	_, base = writesLosing(t, false, secret(nil, "v"))
	if err := fault.KnowsItsWrites(base).Create(ctx, secret(nil, "v")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("a create with no fault meeting the same object: %v, want AlreadyExists", err)
	}
	// A create by generateName cannot be recognised: its fault stands.
	c, _ = writesLosing(t, true)
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", GenerateName: "s-"}}); !fault.IsTransient(err) {
		t.Fatalf("a create by generateName whose answer was lost: %v, want its fault", err)
	}
}

func TestKnowsItsWritesUpdate(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		done    bool
		mutate  func(*corev1.Secret)
		wantErr func(error) bool
	}{
		{"done, its second try refused", true, func(s *corev1.Secret) { s.Labels = map[string]string{"env": "prod"} }, nil},
		{"a label removed, done", true, func(s *corev1.Secret) { delete(s.Labels, "old") }, nil},
		{"not done", false, func(s *corev1.Secret) { s.Data["k"] = []byte("new") }, fault.IsTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, base := writesLosing(t, tc.done, secret(map[string]string{"old": "x"}, "v"))
			s := &corev1.Secret{}
			if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s"}, s); err != nil {
				t.Fatal(err)
			}
			tc.mutate(s)
			err := c.Update(ctx, s)
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("an update not done: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("an update done whose answer was lost: %v", err)
			}
		})
	}
	// Someone else's change met, no fault: the conflict stands. Their change removed what this
	// update keeps (label old): the object is not as this update leaves it.
	_, base := writesLosing(t, false, secret(map[string]string{"old": "x"}, "v"))
	c := fault.KnowsItsWrites(base)
	s := &corev1.Secret{}
	if err := base.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "s"}, s); err != nil {
		t.Fatal(err)
	}
	theirs := s.DeepCopy()
	theirs.Labels = nil
	if err := base.Update(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, s); !apierrors.IsConflict(err) {
		t.Fatalf("an update meeting someone else's change: %v, want its conflict", err)
	}
}
