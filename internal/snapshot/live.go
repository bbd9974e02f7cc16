package snapshot

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/release"
)

// ReleaseReader reads the OperatorRelease name of hub namespace ns and its manifests; each
// caller words its own errors (the CLI names the command that lists releases).
type ReleaseReader func(ctx context.Context, ns, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error)

// OptionsFor works out what to capture for an operator on the member cl: the installed
// release (from the member's record, or relName) and its manifests, read with readRelease
// from hub namespace ns.
func OptionsFor(ctx context.Context, cl *member.Cluster, readRelease ReleaseReader, ns, operator, relName string) (Options, error) {
	rec, err := member.ReadRecord(ctx, cl.Client, operator)
	if err != nil {
		return Options{}, err
	}
	installNS := ""
	if relName == "" {
		if rec == nil {
			return Options{}, fmt.Errorf("operator %s has no installed-version record on this member: pass --release to say which release's CRDs and objects to capture", operator)
		}
		relName, installNS = rec.Release, rec.Namespace
	}
	rel, objs, err := readRelease(ctx, ns, relName)
	if err != nil {
		return Options{}, err
	}
	if installNS == "" {
		recorded := ""
		if rec != nil {
			recorded = rec.Namespace
		}
		installNS = release.InstallNamespace(operator, recorded)
	}
	return Options{Operator: operator, Release: rel.Name, Version: rel.Spec.Version, Namespace: installNS, Manifests: objs}, nil
}

// CaptureLive captures now, on the member cl that snap was taken on and the same way (its
// operator, release and namespace), what snap holds: the other side of `rewind snapshot diff
// --live` and of the dashboard's diff against the live cluster, whether the CLI or the
// controller serves it. hdr is snap's payload header. Nothing is stored.
func CaptureLive(ctx context.Context, cl *member.Cluster, readRelease ReleaseReader, snap *v1alpha1.Snapshot, hdr Header) ([]Entry, error) {
	opts, err := OptionsFor(ctx, cl, readRelease, snap.Namespace, snap.Spec.Operator, snap.Spec.Release)
	if err != nil {
		return nil, err
	}
	if hdr.Namespace != "" {
		opts.Namespace = hdr.Namespace
	}
	var buf bytes.Buffer
	if _, err := Capture(ctx, cl, opts, &buf); err != nil {
		return nil, err
	}
	_, to, err := ReadAll(&buf)
	return to, err
}
