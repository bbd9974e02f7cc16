package restore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/rewind-dev/rewind/internal/member"
	"github.com/rewind-dev/rewind/internal/snapshot"
)

// Steps of a restore, in order.
const (
	StepQuiesce      = "Quiesce"
	StepCRDs         = "CRDs"
	StepCRs          = "CustomResources"
	StepAssociated   = "Associated"
	StepCreatedSince = "CreatedSince"
	StepResume       = "Resume"
)

// Steps lists the steps in order.
var Steps = []string{StepQuiesce, StepCRDs, StepCRs, StepAssociated, StepCreatedSince, StepResume}

// ErrStopped is returned when Options.StopAfter stopped the restore (a test failure point).
var ErrStopped = errors.New("restore stopped on request")

// ErrSnapshotUnreadable wraps an error reading Options.Entries (a corrupted payload, a failed
// read of its store): the restore stopped before it wrote anything.
var ErrSnapshotUnreadable = errors.New("reading the snapshot")

// Journal records how far a restore got. Completed steps are not run again.
type Journal interface {
	Completed(ctx context.Context) ([]string, error)
	Complete(ctx context.Context, step string) error
}

// MemoryJournal keeps the journal in memory.
type MemoryJournal struct {
	mu    sync.Mutex
	Steps []string
}

// Completed returns the completed steps.
func (j *MemoryJournal) Completed(context.Context) ([]string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.Steps...), nil
}

// Complete records a completed step.
func (j *MemoryJournal) Complete(_ context.Context, step string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.Steps = append(j.Steps, step)
	return nil
}

// Options say what to restore.
type Options struct {
	// Header and Entries are the snapshot's content. Run reads Entries once, when it starts,
	// and keeps each entry compact (see entry), as its JSON: a stream
	// (snapshot.Hub.StreamRaw) is never decoded whole. A stream reads once: give each Run its
	// own (a used one would look like an empty snapshot). snapshot.RawEntriesOf serves a
	// decoded snapshot.
	Header  snapshot.Header
	Entries iter.Seq2[snapshot.RawEntry, error]
	// Current are the manifests of the release installed now, if known: their Deployments
	// are quiesced and their webhooks neutralized too, and what they define that the snapshot
	// lacks is reported as created since the snapshot.
	Current []*unstructured.Unstructured
	// Prune deletes objects created after the snapshot; by default they are kept.
	Prune bool
	// Journal records progress (default: in memory).
	Journal Journal
	// StopAfter stops the restore with ErrStopped once this step is complete (tests).
	StopAfter string
	// Parallelism bounds concurrent writes (default 16).
	Parallelism int
	// OwnedKinds are searched for children created since the snapshot (default
	// snapshot.DefaultOwnedKinds).
	OwnedKinds []schema.GroupVersionResource
	// Log receives progress lines (optional).
	Log func(format string, args ...any)
}

// KindReport counts what happened to the objects of one kind.
type KindReport struct {
	Restored  int `json:"restored"`
	Created   int `json:"created"`
	Unchanged int `json:"unchanged"`
	Recreated int `json:"recreated"`
	Pruned    int `json:"pruned"`
	Kept      int `json:"kept"`
}

// StepReport says how long a step took.
type StepReport struct {
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration"`
	// Skipped says the journal had it done already.
	Skipped bool `json:"skipped,omitempty"`
}

// Report is the outcome of a restore.
type Report struct {
	Kinds map[string]*KindReport `json:"kinds"`
	Steps []StepReport           `json:"steps"`
	// NoOp says the cluster already equalled the snapshot: nothing was written.
	NoOp bool `json:"noOp"`
	// Kept and Pruned list objects created after the snapshot.
	Kept   []string `json:"kept,omitempty"`
	Pruned []string `json:"pruned,omitempty"`
	// Recreated lists objects deleted and created again, with the reason.
	Recreated []string `json:"recreated,omitempty"`
	// Notes are other things a person should know.
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"duration"`
	mu       sync.Mutex
}

func (r *Report) kind(gvk schema.GroupVersionKind) *KindReport {
	k := gvk.GroupKind().String()
	if r.Kinds[k] == nil {
		r.Kinds[k] = &KindReport{}
	}
	return r.Kinds[k]
}

func (r *Report) count(gvk schema.GroupVersionKind, outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.kind(gvk)
	switch outcome {
	case outRestored:
		k.Restored++
	case outCreated:
		k.Created++
	case outUnchanged:
		k.Unchanged++
	case outRecreated:
		k.Recreated++
	case outPruned:
		k.Pruned++
	case outKept:
		k.Kept++
	}
}

func (r *Report) note(list *[]string, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*list = append(*list, s)
}

// Totals sums the kinds.
func (r *Report) Totals() KindReport {
	var t KindReport
	for _, k := range r.Kinds {
		t.Restored += k.Restored
		t.Created += k.Created
		t.Unchanged += k.Unchanged
		t.Recreated += k.Recreated
		t.Pruned += k.Pruned
		t.Kept += k.Kept
	}
	return t
}

const (
	outRestored  = "restored"
	outCreated   = "created"
	outUnchanged = "unchanged"
	outRecreated = "recreated"
	outPruned    = "pruned"
	outKept      = "kept"
)

// restorer carries one restore.
type restorer struct {
	o    Options
	cl   *member.Cluster
	dyn  dynamic.Interface
	meta metadata.Interface
	// cmp compares snapshot objects with live ones (with the snapshot CRDs' defaults).
	cmp *Comparer
	rep *Report

	// entries are the snapshot's objects in their compact form (Options.Entries is dropped).
	entries []*entry

	// uids maps snapshot UIDs to live UIDs as objects are found or restored.
	mu   sync.Mutex
	uids map[types.UID]types.UID

	crdGVR map[schema.GroupKind]schema.GroupVersionResource
	// crdClusterScoped holds the kinds of the snapshot's CRDs that are cluster-scoped.
	crdClusterScoped map[schema.GroupKind]bool
	// crUIDsKnown says the CR step ran in this run, so uids maps every snapshot CR.
	crUIDsKnown bool
	// held are objects the quiesce step took over (operator Deployments, webhooks); the
	// Associated step leaves them to the Resume step.
	held map[string]bool
}

// Run restores the member to the snapshot. Its writes go through the member's bulk client
// (bounded by Parallelism writers, not by a client-side rate limit).
func Run(ctx context.Context, cl *member.Cluster, o Options) (*Report, error) {
	start := time.Now()
	if o.Parallelism <= 0 {
		o.Parallelism = 16
	}
	if o.Journal == nil {
		o.Journal = &MemoryJournal{}
	}
	if o.OwnedKinds == nil {
		o.OwnedKinds = snapshot.DefaultOwnedKinds
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Entries == nil {
		o.Entries = snapshot.RawEntriesOf(nil)
	}
	// The restore holds the snapshot compact, not decoded (see entry).
	var entries []*entry
	var crds []*unstructured.Unstructured
	for e, err := range o.Entries {
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotUnreadable, err)
		}
		ce, err := newEntry(e)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSnapshotUnreadable, err)
		}
		entries = append(entries, ce)
		if e.Section == snapshot.SectionCRD {
			crd, err := ce.object()
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrSnapshotUnreadable, err)
			}
			crds = append(crds, crd)
		}
	}
	o.Entries = nil // read once
	r := &restorer{
		o: o, cl: cl, dyn: cl.Bulk, meta: cl.Metadata, entries: entries,
		rep:              &Report{Kinds: map[string]*KindReport{}},
		uids:             map[types.UID]types.UID{},
		crdGVR:           map[schema.GroupKind]schema.GroupVersionResource{},
		crdClusterScoped: map[schema.GroupKind]bool{},
		held:             map[string]bool{},
	}
	r.cmp = NewComparer(crds)
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
		gk := schema.GroupKind{Group: group, Kind: kind}
		r.crdGVR[gk] = schema.GroupVersionResource{Group: group, Version: snapshot.StorageVersion(crd), Resource: plural}
		r.crdClusterScoped[gk] = scope == "Cluster"
	}
	r.markHeld()

	done, err := o.Journal.Completed(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the restore journal: %w", err)
	}
	completed := map[string]bool{}
	for _, s := range done {
		completed[s] = true
	}
	if len(done) == 0 {
		// A fresh restore of a cluster that already equals the snapshot writes nothing.
		same, err := r.alreadyRestored(ctx)
		if err != nil {
			return nil, err
		}
		if same {
			r.rep.NoOp = true
			r.rep.Duration = time.Since(start)
			return r.rep, nil
		}
	}
	steps := map[string]func(context.Context) error{
		StepQuiesce: r.quiesce, StepCRDs: r.restoreCRDs, StepCRs: r.restoreCRs,
		StepAssociated: r.restoreAssociated, StepCreatedSince: r.createdSince, StepResume: r.resume,
	}
	for _, name := range Steps {
		if completed[name] {
			r.rep.Steps = append(r.rep.Steps, StepReport{Name: name, Skipped: true})
			continue
		}
		t0 := time.Now()
		o.Log("restore: %s", name)
		if err := steps[name](ctx); err != nil {
			return r.rep, fmt.Errorf("restore step %s: %w", name, err)
		}
		if err := o.Journal.Complete(ctx, name); err != nil {
			return r.rep, fmt.Errorf("recording restore step %s: %w", name, err)
		}
		r.rep.Steps = append(r.rep.Steps, StepReport{Name: name, Duration: time.Since(t0)})
		if o.StopAfter == name {
			return r.rep, ErrStopped
		}
	}
	sort.Strings(r.rep.Kept)
	sort.Strings(r.rep.Pruned)
	sort.Strings(r.rep.Recreated)
	r.rep.Duration = time.Since(start)
	return r.rep, nil
}

// entry is a snapshot object as a restore holds it: what identifies it, decoded, and its
// content as JSON, decoded each time a step needs it. A decoded object takes several times
// the memory of its JSON, a restore holds its whole snapshot while it runs, and a fleet's
// rollback runs many restores at once.
type entry struct {
	section   string
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	uid       types.UID
	owners    []metav1.OwnerReference
	raw       []byte
}

func newEntry(e snapshot.RawEntry) (*entry, error) {
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name            string                  `json:"name"`
			Namespace       string                  `json:"namespace"`
			UID             types.UID               `json:"uid"`
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	// Case-sensitive, as the API machinery reads objects.
	if err := utiljson.Unmarshal(e.Object, &m); err != nil {
		return nil, fmt.Errorf("snapshot entry in section %s: %w", e.Section, err)
	}
	return &entry{
		section: e.Section, gvk: schema.FromAPIVersionAndKind(m.APIVersion, m.Kind), namespace: m.Metadata.Namespace, name: m.Metadata.Name,
		uid: m.Metadata.UID, owners: m.Metadata.OwnerReferences, raw: e.Object,
	}, nil
}

// object decodes the entry: a new object each time, the caller's to change. Integers decode
// as int64, as the snapshot decoder and the API machinery decode them.
func (e *entry) object() (*unstructured.Unstructured, error) {
	var m map[string]any
	if err := utiljson.Unmarshal(e.raw, &m); err != nil {
		return nil, fmt.Errorf("snapshot entry %s: %w", e.key(), err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// key is keyOf the entry's object.
func (e *entry) key() string { return keyFor(e.gvk.GroupKind(), e.namespace, e.name) }

// nsName is nsName of the entry's object.
func (e *entry) nsName() string { return e.namespace + "/" + e.name }

// keyOf names an object for reports and the held set.
func keyOf(u *unstructured.Unstructured) string {
	return keyFor(u.GroupVersionKind().GroupKind(), u.GetNamespace(), u.GetName())
}

// keyFor is keyOf for an object of kind gk named namespace/name.
func keyFor(gk schema.GroupKind, namespace, name string) string {
	if namespace == "" {
		return gk.String() + " " + name
	}
	return gk.String() + " " + namespace + "/" + name
}

// gvrFor maps an object's kind to its resource; CR kinds come from the snapshot's CRDs.
func (r *restorer) gvrFor(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	if gvr, ok := r.crdGVR[gvk.GroupKind()]; ok {
		return gvr, !r.crdClusterScoped[gvk.GroupKind()], nil
	}
	res, err := r.cl.Resource(gvk)
	if err != nil {
		return schema.GroupVersionResource{}, false, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	return res.GVR, res.Namespaced, nil
}

func (r *restorer) resource(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvr, namespaced, err := r.gvrFor(u.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	if gvr.Version != u.GroupVersionKind().Version {
		gvr.Version = u.GroupVersionKind().Version
	}
	if namespaced {
		return r.dyn.Resource(gvr).Namespace(u.GetNamespace()), nil
	}
	return r.dyn.Resource(gvr), nil
}

// forEach runs fn on items with bounded parallelism and returns the errors joined.
func (r *restorer) forEach(ctx context.Context, n int, fn func(i int) error) error {
	sem := make(chan struct{}, r.o.Parallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Errorf("and %d more errors", len(errs)-10))
	}
	return errors.Join(errs...)
}

func (r *restorer) setUID(snapUID, liveUID types.UID) {
	if snapUID == "" {
		return
	}
	r.mu.Lock()
	r.uids[snapUID] = liveUID
	r.mu.Unlock()
}

func (r *restorer) liveUID(snapUID types.UID) (types.UID, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u, ok := r.uids[snapUID]
	return u, ok
}

// desiredFrom prepares the object to write from a snapshot entry: ownerReferences remapped
// to the live owners' UIDs. Owners that do not exist are dropped (and noted), so the garbage
// collector does not delete the restored object.
func (r *restorer) desiredFrom(ctx context.Context, e *entry) (*unstructured.Unstructured, error) {
	u, err := e.object()
	if err != nil {
		return nil, err
	}
	refs := u.GetOwnerReferences()
	if len(refs) == 0 {
		return u, nil
	}
	var out []metav1.OwnerReference
	for _, ref := range refs {
		if live, ok := r.liveUID(ref.UID); ok {
			ref.UID = live
			out = append(out, ref)
			continue
		}
		// Not restored by us: look the owner up by kind, namespace and name.
		owner := &unstructured.Unstructured{}
		owner.SetAPIVersion(ref.APIVersion)
		owner.SetKind(ref.Kind)
		owner.SetName(ref.Name)
		owner.SetNamespace(u.GetNamespace())
		ri, err := r.resource(owner)
		if err != nil {
			return nil, err
		}
		live, err := ri.Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			r.rep.note(&r.rep.Notes, fmt.Sprintf("%s: owner %s %s no longer exists; its ownerReference was dropped so the garbage collector keeps the object", keyOf(u), ref.Kind, ref.Name))
			continue
		}
		if err != nil {
			return nil, err
		}
		r.setUID(ref.UID, live.GetUID())
		ref.UID = live.GetUID()
		out = append(out, ref)
	}
	u.SetOwnerReferences(out)
	return u, nil
}

// ownerUIDsEqual compares ownerReference UIDs (Normalize ignores them).
func ownerUIDsEqual(a, b *unstructured.Unstructured) bool {
	ra, rb := a.GetOwnerReferences(), b.GetOwnerReferences()
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if ra[i].UID != rb[i].UID {
			return false
		}
	}
	return true
}

// put makes the live object equal desired: create if missing, full update (with the live
// resourceVersion, keeping the live UID) if different, then the status subresource for
// custom resources. Conflicts are retried; an immutable field leads to a recreate.
func (r *restorer) put(ctx context.Context, desired, live *unstructured.Unstructured, hasStatus bool) (string, types.UID, error) {
	ri, err := r.resource(desired)
	if err != nil {
		return "", "", err
	}
	for attempt := 0; ; attempt++ {
		if live == nil {
			created, err := r.create(ctx, ri, desired, hasStatus)
			if apierrors.IsAlreadyExists(err) && attempt < 5 {
				if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil {
					return "", "", err
				}
				continue
			}
			if err != nil {
				return "", "", err
			}
			return outCreated, created.GetUID(), nil
		}
		if r.cmp.Equal(desired, live) && ownerUIDsEqual(desired, live) {
			return outUnchanged, live.GetUID(), nil
		}
		want := desired.DeepCopy()
		want.SetUID(live.GetUID())
		want.SetResourceVersion(live.GetResourceVersion())
		keepServerAllocated(want, live)
		if live.GetDeletionTimestamp() != nil {
			// An in-flight deletion keeps every finalizer it waits on.
			want.SetFinalizers(union(want.GetFinalizers(), live.GetFinalizers()))
		}
		updated, err := ri.Update(ctx, want, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err) && attempt < 10:
			if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", "", err
			} else if apierrors.IsNotFound(err) {
				live = nil
			}
			continue
		case apierrors.IsNotFound(err) && attempt < 5:
			live = nil
			continue
		case isImmutable(err):
			uid, rerr := r.recreate(ctx, ri, desired, live, hasStatus, err)
			if rerr != nil {
				return "", "", rerr
			}
			return outRecreated, uid, nil
		case err != nil:
			return "", "", fmt.Errorf("updating %s: %w", keyOf(desired), err)
		}
		if hasStatus {
			if err := r.putStatus(ctx, ri, desired, updated); err != nil {
				if apierrors.IsConflict(err) && attempt < 10 {
					if live, err = ri.Get(ctx, desired.GetName(), metav1.GetOptions{}); err != nil {
						return "", "", err
					}
					continue
				}
				return "", "", err
			}
		}
		return outRestored, updated.GetUID(), nil
	}
}

func (r *restorer) create(ctx context.Context, ri dynamic.ResourceInterface, desired *unstructured.Unstructured, hasStatus bool) (*unstructured.Unstructured, error) {
	c := desired.DeepCopy()
	c.SetUID("")
	c.SetResourceVersion("")
	created, err := ri.Create(ctx, c, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) && c.GetNamespace() != "" {
		// The namespace itself was deleted since the snapshot: recreate it, as Velero does.
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.GetNamespace()}}}
		if _, nerr := r.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); nerr != nil && !apierrors.IsAlreadyExists(nerr) {
			return nil, fmt.Errorf("recreating namespace %s for %s: %w", c.GetNamespace(), keyOf(desired), nerr)
		}
		r.rep.note(&r.rep.Notes, fmt.Sprintf("namespace %s was recreated", c.GetNamespace()))
		created, err = ri.Create(ctx, c, metav1.CreateOptions{})
	}
	if err != nil {
		return nil, err
	}
	if hasStatus {
		if err := r.putStatus(ctx, ri, desired, created); err != nil {
			return nil, err
		}
	}
	return created, nil
}

// putStatus writes desired's status through the status subresource when it differs.
func (r *restorer) putStatus(ctx context.Context, ri dynamic.ResourceInterface, desired, live *unstructured.Unstructured) error {
	ds, dok := desired.Object["status"]
	ls, lok := live.Object["status"]
	if dok == lok && jsonEqual(ds, ls) {
		return nil
	}
	u := live.DeepCopy()
	if dok {
		u.Object["status"] = ds
	} else {
		delete(u.Object, "status")
	}
	_, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("restoring the status of %s: %w", keyOf(desired), err)
	}
	return err
}

// recreate deletes and creates an object whose update hit an immutable field.
func (r *restorer) recreate(ctx context.Context, ri dynamic.ResourceInterface, desired, live *unstructured.Unstructured, hasStatus bool, cause error) (types.UID, error) {
	orphan := metav1.DeletePropagationOrphan
	uid := live.GetUID()
	err := ri.Delete(ctx, live.GetName(), metav1.DeleteOptions{PropagationPolicy: &orphan, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("deleting %s to recreate it: %w", keyOf(desired), err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cur, err := ri.Get(ctx, live.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.GetUID() != uid) {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s was not deleted within a minute (finalizers?) so it cannot be recreated", keyOf(desired))
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	created, err := r.create(ctx, ri, desired, hasStatus)
	if err != nil {
		return "", fmt.Errorf("recreating %s: %w", keyOf(desired), err)
	}
	r.rep.note(&r.rep.Recreated, fmt.Sprintf("%s (%s)", keyOf(desired), immutableField(cause)))
	return created.GetUID(), nil
}

// isImmutable says whether an update was refused because it changes a field that can only be
// set on create. The API server words it per kind: "field is immutable" (a Deployment's
// selector), "may not change once set" (a Service's clusterIPs), "updates to statefulset spec
// for fields other than ... are forbidden".
func isImmutable(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"immutable", "may not change once set", "are forbidden"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func immutableField(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	if len(msg) > 160 {
		msg = msg[:160] + "..."
	}
	return msg
}

// keepServerAllocated copies fields the server allocated from live into want, so that an
// update does not try to change them: a Service's cluster IPs (unless the snapshot's is
// headless, which is a real difference).
func keepServerAllocated(want, live *unstructured.Unstructured) {
	gvk := want.GroupVersionKind()
	if gvk.Group == "" && gvk.Kind == "Service" {
		wip, _, _ := unstructured.NestedString(want.Object, "spec", "clusterIP")
		lip, _, _ := unstructured.NestedString(live.Object, "spec", "clusterIP")
		if wip != "None" && lip != "None" && lip != "" {
			_ = unstructured.SetNestedField(want.Object, lip, "spec", "clusterIP")
			if ips, ok, _ := unstructured.NestedStringSlice(live.Object, "spec", "clusterIPs"); ok {
				_ = unstructured.SetNestedStringSlice(want.Object, ips, "spec", "clusterIPs")
			}
		}
	}
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
