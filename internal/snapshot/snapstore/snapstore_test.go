package snapstore

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/aws/smithy-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

func TestURLOf(t *testing.T) {
	for _, tc := range []struct {
		spec v1alpha1.SnapshotStoreSpec
		want string
	}{
		{spec: v1alpha1.SnapshotStoreSpec{}, want: "secrets://team-a"},
		{spec: v1alpha1.SnapshotStoreSpec{Provider: "S3", Bucket: "b", Prefix: "/x/y/", Region: "eu-west-1", Endpoint: "http://127.0.0.1:9000"},
			want: "s3://b/x/y?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=eu-west-1"},
		{spec: v1alpha1.SnapshotStoreSpec{Provider: "GCS", Bucket: "g"}, want: "gs://g"},
		{spec: v1alpha1.SnapshotStoreSpec{Provider: "AzureBlob", Bucket: "c", Prefix: "p"}, want: "azblob://c/p"},
		{spec: v1alpha1.SnapshotStoreSpec{Provider: "Folder", Path: "/var/backups", Prefix: "prod"}, want: "dir:///var/backups/prod"},
	} {
		st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "team-a"}, Spec: tc.spec}
		if got := URLOf(st); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.spec, got, tc.want)
		}
	}
}

func TestKeyBytes(t *testing.T) {
	raw := []byte("0123456789abcdef0123456789abcdef")
	for _, v := range [][]byte{
		raw,
		[]byte(base64.StdEncoding.EncodeToString(raw)),
		[]byte(base64.URLEncoding.EncodeToString(raw) + "\n"),
		[]byte("base64key://" + base64.URLEncoding.EncodeToString(raw)),
	} {
		got, err := keyBytes(v)
		if err != nil || string(got) != string(raw) {
			t.Errorf("%q: %q, %v", v, got, err)
		}
	}
	_, err := keyBytes([]byte("c2hvcnQ="))
	if err == nil || strings.Contains(err.Error(), "c2hvcnQ") || !strings.Contains(err.Error(), "32-byte key") {
		t.Errorf("a short key: %v (must say what is wanted, never echo the value)", err)
	}
}

func TestKeyName(t *testing.T) {
	for _, tc := range []struct {
		ref  *v1alpha1.SnapshotKeyRef
		want string
	}{
		{ref: nil, want: "the hub's default key (Secret rewind-system/rewind-snapshot-key)"},
		{ref: &v1alpha1.SnapshotKeyRef{KMS: "awskms://alias/k?region=eu-west-1&endpoint=http://x"}, want: "awskms://alias/k"},
		{ref: &v1alpha1.SnapshotKeyRef{SecretRef: &v1alpha1.SecretKeyReference{Name: "s"}}, want: `Secret team-a/s key "key"`},
	} {
		if got := KeyName("team-a", tc.ref); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.ref, got, tc.want)
		}
	}
}

type apiError struct{ code string }

func (e apiError) Error() string                 { return e.code }
func (e apiError) ErrorCode() string             { return e.code }
func (e apiError) ErrorMessage() string          { return e.code }
func (e apiError) ErrorFault() smithy.ErrorFault { return smithy.FaultClient }

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{err: fmt.Errorf("writing: %w", apiError{"NoSuchBucket"}), want: v1alpha1.ReasonBucketNotFound},
		{err: fmt.Errorf("writing: %w", apiError{"InvalidAccessKeyId"}), want: v1alpha1.ReasonAccessDenied},
		{err: &CredentialsError{Secret: "a/b", Err: errors.New("not found")}, want: v1alpha1.ReasonCredentialsNotFound},
		{err: &KeyError{Key: "k", Err: errors.New("x")}, want: v1alpha1.ReasonKeyUnavailable},
		{err: &url.Error{Op: "Put", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}, want: v1alpha1.ReasonStoreUnreachable},
		{err: fmt.Errorf("mkdir: %w", os.ErrPermission), want: v1alpha1.ReasonAccessDenied},
		{err: errors.New("something else"), want: v1alpha1.ReasonProbeFailed},
	} {
		if got := Reason(tc.err); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.err, got, tc.want)
		}
	}
}

func TestGetReady(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	store := func(name string, cond *metav1.Condition) *v1alpha1.SnapshotStore {
		st := &v1alpha1.SnapshotStore{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
		if cond != nil {
			st.Status.Conditions = []metav1.Condition{*cond}
		}
		return st
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1alpha1.SnapshotStore{}).WithObjects(
		store("ready", &metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonProbeSucceeded}),
		store("broken", &metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAccessDenied, Message: "403"}),
		store("unprobed", nil),
	).Build()
	for _, tc := range []struct {
		// name of the store; acceptUnprobed as passed.
		name           string
		acceptUnprobed bool
		// want is in the error ("" for none); notReady says it is a *NotReadyError.
		want     string
		notReady bool
	}{
		{name: "ready"},
		{name: "broken", want: "snapshot store ns/broken is not Ready (AccessDenied): 403", notReady: true},
		{name: "broken", acceptUnprobed: true, want: "is not Ready (AccessDenied)", notReady: true},
		{name: "unprobed", want: "has not been checked yet", notReady: true},
		{name: "unprobed", acceptUnprobed: true},
		{name: "missing", acceptUnprobed: true, want: `snapshot store "missing" not found in namespace ns (list them with: kubectl get snapshotstores -n ns)`},
	} {
		st, err := GetReady(t.Context(), c, "ns", tc.name, tc.acceptUnprobed)
		var nre *NotReadyError
		switch {
		case tc.want == "" && (err != nil || st == nil || st.Name != tc.name):
			t.Errorf("%s (acceptUnprobed %t): %v, want the store", tc.name, tc.acceptUnprobed, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || errors.As(err, &nre) != tc.notReady):
			t.Errorf("%s (acceptUnprobed %t): %v, want an error with %q (NotReadyError %t)", tc.name, tc.acceptUnprobed, err, tc.want, tc.notReady)
		}
	}
}
