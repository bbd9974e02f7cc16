package target

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/snapshot/snapstore"
)

// A pull member's snapshots go to the Rollout's SnapshotStore straight from its agent: the
// relay copies the SnapshotStore the target names (spec.snapshotStore) into the member's hub
// namespace, named as the member's snapshots are (prefixed with the Rollout's namespace), with
// copies of the Secrets it references (its credentials; a keyRef's Secret and KMS
// credentials), and the Ready condition the hub's probe gave the original (the hub does not
// probe copies). The agent resolves the copy in its namespace, writes each payload to the
// store itself, encrypted, and reads it back for a restore: no payload passes through the
// hub. A store whose keyRef is unset (the hub's default key) wraps a pull member's payloads
// with the member's own key, in its hub namespace, as its snapshots in hub Secrets are.

// +kubebuilder:rbac:groups=rewind.dev,resources=snapshotstores,verbs=create;update

// storeCopy is the copy of SnapshotStore src in pull member namespace ns: its spec, with the
// Secrets it references renamed as their copies are.
func storeCopy(src *v1alpha1.SnapshotStore, ns string) *v1alpha1.SnapshotStore {
	cp := &v1alpha1.SnapshotStore{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: MemberSnapshotName(src.Namespace, src.Name), Labels: map[string]string{
			v1alpha1.LabelSourceNamespace: src.Namespace, v1alpha1.LabelSourceName: src.Name,
		}},
		Spec: *src.Spec.DeepCopy(),
	}
	for _, name := range secretRefs(cp) {
		*name = MemberSnapshotName(src.Namespace, *name)
	}
	return cp
}

// secretRefs are the names of the Secrets (of its namespace) a SnapshotStore references: its
// credentials, and its keyRef's Secret and KMS credentials.
func secretRefs(st *v1alpha1.SnapshotStore) []*string {
	var out []*string
	if r := st.Spec.CredentialsSecretRef; r != nil {
		out = append(out, &r.Name)
	}
	if k := st.Spec.KeyRef; k != nil {
		if k.SecretRef != nil {
			out = append(out, &k.SecretRef.Name)
		}
		if k.CredentialsSecretRef != nil {
			out = append(out, &k.CredentialsSecretRef.Name)
		}
	}
	return out
}

// storeSecrets are the names of the Secrets a SnapshotStore references, each once.
func storeSecrets(st *v1alpha1.SnapshotStore) []string {
	var out []string
	for _, name := range secretRefs(st) {
		out = append(out, *name)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// copiedStoreStatus is the status a store's copy shows: its source's, but for the key ID when
// the source uses the hub's default key (the member wraps with its own).
func copiedStoreStatus(src, cp *v1alpha1.SnapshotStore) v1alpha1.SnapshotStoreStatus {
	st := *src.Status.DeepCopy()
	st.ObservedGeneration = cp.Generation
	st.URL = snapstore.URLOf(cp)
	if cp.Spec.KeyRef == nil {
		st.KeyID = ""
	}
	return st
}

// copyStore keeps the copy of t's SnapshotStore in pull member namespace ns equal to its
// source (spec, labels, Ready condition; from the cache). withSecrets copies its Secrets too
// (read from the API server): when the copy is made or its spec changes, and with each new
// revision's inputs, so that rotated credentials reach the member with the next change.
func (r *Reconciler) copyStore(ctx context.Context, t *v1alpha1.RolloutTarget, ns string, withSecrets bool) error {
	if t.Spec.SnapshotStore == "" {
		return nil
	}
	src := &v1alpha1.SnapshotStore{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Spec.SnapshotStore}, src); err != nil {
		// Missing: the agent's snapshot step waits for it, naming it (as a push target does).
		return client.IgnoreNotFound(err)
	}
	want := storeCopy(src, ns)
	have := &v1alpha1.SnapshotStore{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.copyStoreSecrets(ctx, t, src, ns); err != nil {
			return err
		}
		if err := r.Client.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return nil // the cache had not seen it: its status follows on the next pass
		} else if err != nil {
			return fmt.Errorf("copying snapshot store %s/%s to pull member namespace %s: %w", src.Namespace, src.Name, ns, err)
		}
		have = want
	case err != nil:
		return err
	case have.Labels[v1alpha1.LabelSourceNamespace] != src.Namespace || have.Labels[v1alpha1.LabelSourceName] != src.Name:
		return reconcile.TerminalError(fmt.Errorf("snapshot store %s/%s cannot be copied to pull member namespace %s: a SnapshotStore %s not copied from it is there; remove it",
			src.Namespace, src.Name, ns, want.Name))
	case !equality.Semantic.DeepEqual(have.Spec, want.Spec):
		if err := r.copyStoreSecrets(ctx, t, src, ns); err != nil {
			return err
		}
		have.Spec = want.Spec
		if err := r.Client.Update(ctx, have); err != nil {
			return fmt.Errorf("updating the copy %s/%s of snapshot store %s/%s: %w", ns, have.Name, src.Namespace, src.Name, err)
		}
	case withSecrets:
		if err := r.copyStoreSecrets(ctx, t, src, ns); err != nil {
			return err
		}
	}
	status := copiedStoreStatus(src, have)
	if equality.Semantic.DeepEqual(have.Status, status) {
		return nil
	}
	have.Status = status
	if err := r.Client.Status().Update(ctx, have); err != nil {
		return fmt.Errorf("copying the status of snapshot store %s/%s to %s/%s: %w", src.Namespace, src.Name, ns, have.Name, err)
	}
	return nil
}

// copyStoreSecrets copies the Secrets store src references into pull member namespace ns,
// or updates their copies when their data changed, for target t.
func (r *Reconciler) copyStoreSecrets(ctx context.Context, t *v1alpha1.RolloutTarget, src *v1alpha1.SnapshotStore, ns string) error {
	return r.copySecrets(ctx, t, src.Namespace, storeSecrets(src), ns, "snapshot store "+src.Name)
}

// revisionSecrets reads each Secret the relay copies to pull members (credentials: a store's,
// a metric gate's) once per revision of a Rollout, for all its members: the copies of one
// revision get the Secret as it was when the first of them was made, and a Secret changed
// since reaches every member with the next revision (as it always did: credentials follow with
// each revision). Before, each member of a wave read each Secret from the API server again.
// It keeps one read per Secret, the latest revision's; a failed read is not kept.
type revisionSecrets struct {
	mu sync.Mutex
	m  map[types.NamespacedName]revisionSecret
}

type revisionSecret struct {
	// revision is the Rollout revision it was read for: "namespace/rollout@revision".
	revision string
	secret   *corev1.Secret // nil: not found
}

// get returns Secret key as read for t's revision (NotFound when it was missing then).
// Callers must not modify it.
func (c *revisionSecrets) get(ctx context.Context, rd client.Reader, key types.NamespacedName, t *v1alpha1.RolloutTarget) (*corev1.Secret, error) {
	rev := fmt.Sprintf("%s/%s@%d", t.Namespace, t.Spec.Rollout, t.Spec.Revision)
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && e.revision == rev {
		if e.secret == nil {
			return nil, apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
		}
		return e.secret, nil
	}
	s := &corev1.Secret{}
	err := rd.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		s = nil
	case err != nil:
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[types.NamespacedName]revisionSecret{}
	}
	c.m[key] = revisionSecret{revision: rev, secret: s}
	c.mu.Unlock()
	if s == nil {
		return nil, err
	}
	return s, nil
}

// copySecrets copies the Secrets names of namespace from, which of (a snapshot store, a
// target's metric gates) references, into pull member namespace ns, named by
// MemberSnapshotName, or updates their copies when their data changed. A Secret that is
// missing is not copied: the agent's step names its copy as missing (and the hub's probe of a
// store names the original).
func (r *Reconciler) copySecrets(ctx context.Context, t *v1alpha1.RolloutTarget, from string, names []string, ns, of string) error {
	for _, name := range names {
		s, err := r.credentials.get(ctx, r.Hub, client.ObjectKey{Namespace: from, Name: name}, t)
		if apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return fmt.Errorf("reading Secret %s/%s of %s to copy for a pull member: %w", from, name, of, err)
		}
		want := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: MemberSnapshotName(from, name), Labels: map[string]string{
				v1alpha1.LabelSourceNamespace: from, v1alpha1.LabelSourceName: name,
				"app.kubernetes.io/managed-by": "rewind",
			}},
			Type: s.Type, Data: maps.Clone(s.Data), // s is shared (revisionSecrets); a write decodes into its object
		}
		have := &corev1.Secret{}
		err = r.Hub.Get(ctx, client.ObjectKeyFromObject(want), have)
		switch {
		case apierrors.IsNotFound(err):
			if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("copying Secret %s/%s of %s to %s: %w", from, name, of, ns, err)
			}
		case err != nil:
			return err
		case have.Labels[v1alpha1.LabelSourceNamespace] != from || have.Labels[v1alpha1.LabelSourceName] != name:
			return reconcile.TerminalError(fmt.Errorf("Secret %s/%s of %s cannot be copied to pull member namespace %s: a Secret %s not copied from it is there; remove it",
				from, name, of, ns, want.Name))
		case !maps.EqualFunc(have.Data, s.Data, bytes.Equal):
			base := have.DeepCopy()
			have.Data = maps.Clone(s.Data)
			if err := r.Client.Patch(ctx, have, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
				return fmt.Errorf("updating the copy of Secret %s/%s of %s in %s: %w", from, name, of, ns, err)
			}
		}
	}
	return nil
}

// storeUsers maps a SnapshotStore (not a copy) to the targets of its namespace that name it
// and have a copy in their pull member's namespace.
func (r *Reconciler) storeUsers(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[v1alpha1.LabelSourceNamespace] != "" {
		return nil
	}
	var list v1alpha1.RolloutTargetList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing the targets of a snapshot store", "store", client.ObjectKeyFromObject(o))
		return nil
	}
	var out []reconcile.Request
	for _, t := range list.Items {
		if t.Spec.SnapshotStore == o.GetName() && controllerutil.ContainsFinalizer(&t, FinalizerMemberCopy) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return out
}
