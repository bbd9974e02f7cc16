package restore

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rewind-dev/rewind/internal/apply"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// crdsStep brings every CRD back to the snapshot, including its storage version: the
// snapshot's storage version becomes the storage version again (newer versions stay served),
// every CR is rewritten so it is stored at that version, status.storedVersions is trimmed,
// and then the snapshot's definition is applied exactly. A CRD is never deleted.
type crdsStep struct{}

func (crdsStep) run(ctx context.Context, r *restorer) error {
	for _, e := range r.entries {
		if e.section != snapshot.SectionCRD {
			continue
		}
		snap, err := e.object()
		if err != nil {
			return err
		}
		if err := r.restoreCRD(ctx, snap); err != nil {
			return fmt.Errorf("CRD %s: %w", e.name, err)
		}
	}
	// Conversion webhook servers kept up for the migration can now be quiesced.
	convServers, err := r.conversionServers(ctx)
	if err != nil {
		return err
	}
	for _, u := range r.operatorObjects() {
		if isDeployment(u.GroupVersionKind()) {
			if convServers[nsName(u)] {
				continue // the snapshot's own CRDs still convert through it
			}
			if err := r.scaleToZero(ctx, u.GetNamespace(), u.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreCRD brings one CRD back to snap. Each part is idempotent, so that the step run
// again after it was cut anywhere ends as if it had run once: the storage version already
// switched is waited for again (cheap), the migration rewrites every object again (a no-op
// for those already stored at the version), and the trim and the definition are written as
// they are wanted.
func (r *restorer) restoreCRD(ctx context.Context, snap *unstructured.Unstructured) error {
	ri := r.dyn.Resource(crdGVR)
	live, err := r.get(ctx, ri, snap.GetName())
	if apierrors.IsNotFound(err) {
		c := snap.DeepCopy()
		c.SetUID("")
		c.SetResourceVersion("")
		delete(c.Object, "status")
		err := r.try(ctx, func() error {
			_, err := ri.Create(ctx, c, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) { // AlreadyExists: an earlier try's answer was lost
			return fmt.Errorf("creating it: %w", err)
		}
		r.rep.count(snap.GroupVersionKind(), outCreated)
		return r.waitEstablished(ctx, snap.GetName())
	}
	if err != nil {
		return fmt.Errorf("reading it: %w", err)
	}
	if crdEqual(snap, live) {
		r.rep.count(snap.GroupVersionKind(), outUnchanged)
		return nil
	}
	group, _, _ := unstructured.NestedString(snap.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(snap.Object, "spec", "names", "kind")
	plural, _, _ := unstructured.NestedString(snap.Object, "spec", "names", "plural")
	want := snapshot.StorageVersion(snap)
	wantStored, _, _ := unstructured.NestedStringSlice(snap.Object, "status", "storedVersions")
	liveStored, _, _ := unstructured.NestedStringSlice(live.Object, "status", "storedVersions")

	if snapshot.StorageVersion(live) != want || !reflect.DeepEqual(liveStored, wantStored) {
		// 1. The snapshot's storage version stores again; newer versions stay served.
		if snapshot.StorageVersion(live) != want {
			err := r.updateCRD(ctx, snap.GetName(), false, func(cur *unstructured.Unstructured) {
				versions, _, _ := unstructured.NestedSlice(cur.Object, "spec", "versions")
				found := false
				for _, v := range versions {
					m := v.(map[string]any)
					m["storage"] = m["name"] == want
					if m["name"] == want {
						m["served"] = true
						found = true
					}
				}
				if !found {
					for _, v := range mustSlice(snap, "spec", "versions") {
						m := v.(map[string]any)
						if m["name"] == want {
							c := deepCopyMap(m)
							c["storage"], c["served"] = true, true
							versions = append(versions, c)
						}
					}
				}
				_ = unstructured.SetNestedSlice(cur.Object, versions, "spec", "versions")
			})
			if err != nil {
				return fmt.Errorf("making %s the storage version again: %w", want, err)
			}
		}
		if err := r.waitStorageVersion(ctx, group, want, plural, kind); err != nil {
			return err
		}
		// 2. Storage migration: read and write back every CR so it is stored at `want`.
		if err := r.migrate(ctx, schema.GroupVersionResource{Group: group, Version: want, Resource: plural}, schema.GroupVersionKind{Group: group, Version: want, Kind: kind}); err != nil {
			return err
		}
		// 3. Trim status.storedVersions to the snapshot's.
		err := r.updateCRD(ctx, snap.GetName(), true, func(cur *unstructured.Unstructured) {
			_ = unstructured.SetNestedStringSlice(cur.Object, wantStored, "status", "storedVersions")
		})
		if err != nil {
			return fmt.Errorf("trimming status.storedVersions to %v: %w", wantStored, err)
		}
	}
	// 4. The snapshot's definition, exactly.
	err = r.updateCRD(ctx, snap.GetName(), false, func(cur *unstructured.Unstructured) {
		w := snap.DeepCopy()
		w.SetUID(cur.GetUID())
		w.SetResourceVersion(cur.GetResourceVersion())
		w.Object["status"] = cur.Object["status"]
		cur.Object = w.Object
	})
	if err != nil {
		return fmt.Errorf("applying the snapshot's definition: %w", err)
	}
	r.rep.count(snap.GroupVersionKind(), outRestored)
	r.cl.ResetMapper()
	return r.waitEstablished(ctx, snap.GetName())
}

// updateCRD reads a CRD, changes it with change and writes it back (its status subresource
// when status is set), riding out faults, and again from a fresh read on a conflict.
func (r *restorer) updateCRD(ctx context.Context, name string, status bool, change func(cur *unstructured.Unstructured)) error {
	ri := r.dyn.Resource(crdGVR)
	for attempt := 0; attempt <= maxConflicts; attempt++ {
		cur, err := r.get(ctx, ri, name)
		if err != nil {
			return err
		}
		change(cur)
		err = r.try(ctx, func() error {
			if status {
				_, err := ri.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
				return err
			}
			_, err := ri.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("CRD %s kept changing while it was restored", name)
}

func mustSlice(u *unstructured.Unstructured, fields ...string) []any {
	s, _, _ := unstructured.NestedSlice(u.Object, fields...)
	return s
}

func deepCopyMap(m map[string]any) map[string]any {
	return (&unstructured.Unstructured{Object: m}).DeepCopy().Object
}

// storageVersionHash is the hash discovery publishes for a resource's storage version.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

// waitStorageVersion waits until discovery publishes version as the storage version of the
// resource, i.e. the API server writes new objects at it. Discovery is asked again while it
// fails (a group version not served yet, a fault) until the wait ends.
func (r *restorer) waitStorageVersion(ctx context.Context, group, version, plural, kind string) error {
	want := storageVersionHash(group, version, kind)
	dc := r.cl.LiveDiscovery()
	var last string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(group + "/" + version)
		if lastErr = err; err != nil {
			return false, nil
		}
		for _, res := range list.APIResources {
			if res.Name == plural {
				last = res.StorageVersionHash
				return res.StorageVersionHash == want, nil
			}
		}
		return false, nil
	})
	if err != nil {
		if lastErr != nil {
			return fmt.Errorf("the API server did not switch the storage version of %s to %s: discovery: %w", plural, version, lastErr)
		}
		return fmt.Errorf("the API server did not switch the storage version of %s to %s (hash %s, want %s): %w", plural, version, last, want, err)
	}
	return nil
}

func (r *restorer) waitEstablished(ctx context.Context, name string) error {
	crd := &unstructured.Unstructured{}
	crd.SetName(name)
	return apply.WaitEstablished(ctx, r.cl.Client, []*unstructured.Unstructured{crd}, time.Minute)
}
