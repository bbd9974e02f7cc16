// Package restore brings a member cluster back to a snapshot: a plan of idempotent steps
// (quiesce, CRDs, custom resources, associated resources, objects created since, resume),
// journaled so that a crashed restore resumes where it stopped. Every object is fully
// replaced from the snapshot, never merged.
//
// The package reads as the restore runs. restore.go holds what callers use (Run, Options,
// the step names) and the loop over the steps; steps.go the step interface and the table of
// steps; each step has its own file: quiesce.go, crds.go (with migrate.go, the storage
// migration), crs.go, associated.go, createdsince.go and resume.go. What several steps
// share is in one place each: entry.go (a snapshot object as a restore holds it), live.go
// (paged reads of live objects), entries.go (restoring a set of entries, owners first),
// write.go (the writes: put, create, recreate, status), operator.go (the operator's own
// objects that quiesce takes over), noop.go (whether a restore has anything to do),
// report.go and journal.go; compare.go and normalize.go say when two objects are equal.
package restore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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

// DefaultWorkingSet is Options.WorkingSet's default: 256 KiB of live objects' JSON, a few
// hundred custom resources of a usual size, held while they are rewritten.
const DefaultWorkingSet = 256 << 10

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
	// At, when set, is called at points of the restore a test acts at ("migrate <resource>":
	// a storage migration's first page is read and about to be written).
	At func(point string)
	// Parallelism bounds concurrent writes (default 16).
	Parallelism int
	// WorkingSet bounds the live objects the restore holds at once, counted as the bytes of
	// their JSON, beyond the snapshot's own content (default DefaultWorkingSet). Every step
	// pages through live objects (LIST with limit and continue) and writes what it read
	// before it reads more once it holds this much: the storage migration, which rewrites
	// every custom resource of a kind, and the comparisons of each kind with the snapshot,
	// which keep the objects to write. Besides it, a restore holds the snapshot (as its
	// JSON), the objects being written (at most Parallelism, decoded), and names and UIDs:
	// the report's lists, and the snapshot-to-live UID map. A caller that budgets memory for
	// restores (the controller's --restore-memory) counts the snapshot's bytes plus this.
	WorkingSet int64
	// OwnedKinds are searched for children created since the snapshot (default
	// snapshot.DefaultOwnedKinds).
	OwnedKinds []schema.GroupVersionResource
	// Log receives progress lines (optional).
	Log func(format string, args ...any)
}

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
	if o.WorkingSet <= 0 {
		o.WorkingSet = DefaultWorkingSet
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
	for _, name := range Steps {
		if completed[name] {
			r.rep.Steps = append(r.rep.Steps, StepReport{Name: name, Skipped: true})
			// Its report went with the run that did it: rebuilt, reading only, where a step
			// can (what was kept since the snapshot).
			if rs, ok := steps[name].(reporter); ok {
				if err := rs.report(ctx, r); err != nil {
					return r.rep, fmt.Errorf("restore step %s (done): %w", name, err)
				}
			}
			continue
		}
		t0 := time.Now()
		o.Log("restore: %s", name)
		if err := steps[name].run(ctx, r); err != nil {
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
