package snapshot

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// DefaultOwnedKinds are the kinds searched for children of custom resources (by
// ownerReference UID chains).
var DefaultOwnedKinds = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "persistentvolumeclaims"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
}

// Options say what to capture.
type Options struct {
	// Operator whose state is captured.
	Operator string
	// Release and Version installed (recorded in the header).
	Release, Version string
	// Namespace is the operator's install namespace; manifest objects without a namespace
	// live there.
	Namespace string
	// Manifests are the installed release's manifests: its CRDs name the custom resources to
	// capture, and every other object is captured as an associated resource.
	Manifests []*unstructured.Unstructured
	// OwnedKinds are searched for children of the CRs (default DefaultOwnedKinds).
	OwnedKinds []schema.GroupVersionResource
	// PageSize is the LIST page size (default 500).
	PageSize int64
	// Parallelism bounds the kinds fetched at once (default 4).
	Parallelism int
	// SpoolDir holds temporary files (default os.TempDir()).
	SpoolDir string
}

// Counts counts captured objects by section.
type Counts struct {
	CRDs, CustomResources, Associated int
}

// Result describes a capture.
type Result struct {
	Header        Header
	ServerVersion string
	Counts        Counts
	// Bytes is the size of the canonical payload.
	Bytes      int64
	CapturedAt time.Time
}

// Capture streams the canonical payload of the operator's state on the cluster of cfg to w:
// a header line, then the CRDs, every custom resource (all namespaces, with status), and the
// associated resources, one entry per line, in a deterministic order. Memory does not grow
// with the number of objects: pages are streamed, and candidate children are spooled to disk.
func Capture(ctx context.Context, cfg *rest.Config, o Options, w io.Writer) (*Result, error) {
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 4
	}
	if o.OwnedKinds == nil {
		o.OwnedKinds = DefaultOwnedKinds
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS < 100 {
		cfg.QPS, cfg.Burst = 200, 400
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	sv, err := dc.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	kubeSystem, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the cluster ID (kube-system UID): %w", err)
	}
	res := &Result{
		Header: Header{Format: Format, ClusterID: string(kubeSystem.GetUID()), Operator: o.Operator,
			Release: o.Release, Version: o.Version, Namespace: o.Namespace},
		ServerVersion: sv.GitVersion,
	}
	cw := &countingWriter{w: w}
	enc := newEncoder(cw)
	if err := enc.line(res.Header); err != nil {
		return nil, err
	}
	c := &capturer{dyn: dyn, o: o, enc: enc, res: res, crUIDs: map[types.UID]struct{}{}, written: map[types.UID]struct{}{}}

	// 1. The release's CRDs, as they are live (storedVersions included).
	crds, err := c.captureCRDs(ctx)
	if err != nil {
		return nil, err
	}
	// 2. Every CR of those CRDs, while the candidate children are listed and spooled
	// concurrently (the spool does not depend on the CRs; reachability is decided after).
	spoolCtx, cancelSpool := context.WithCancel(ctx)
	defer cancelSpool()
	spoolDone := make(chan error, 1)
	var sp *spool
	go func() {
		var err error
		sp, err = c.spoolCandidates(spoolCtx)
		spoolDone <- err
	}()
	crErr := c.captureCRs(ctx, crds)
	if crErr != nil {
		cancelSpool()
	}
	spoolErr := <-spoolDone
	if sp != nil {
		defer sp.close()
	}
	if crErr != nil {
		return nil, crErr
	}
	if spoolErr != nil {
		return nil, spoolErr
	}
	// 3. Associated: the release's own objects, then the CRs' children.
	if err := c.captureManifestObjects(ctx); err != nil {
		return nil, err
	}
	if err := c.writeChildren(sp); err != nil {
		return nil, err
	}
	if err := enc.flush(); err != nil {
		return nil, err
	}
	res.Bytes = cw.n
	res.CapturedAt = time.Now().UTC()
	return res, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type capturer struct {
	dyn     dynamic.Interface
	o       Options
	enc     *encoder
	res     *Result
	crUIDs  map[types.UID]struct{}
	written map[types.UID]struct{}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (c *capturer) write(section string, obj *unstructured.Unstructured) error {
	Canonicalize(obj)
	if uid := obj.GetUID(); uid != "" {
		c.written[cloneUID(uid)] = struct{}{}
	}
	switch section {
	case SectionCRD:
		c.res.Counts.CRDs++
	case SectionCR:
		c.res.Counts.CustomResources++
	case SectionAssociated:
		c.res.Counts.Associated++
	}
	return c.enc.line(Entry{Section: section, Object: obj})
}

// crdInfo is what the capture needs of a live CRD.
type crdInfo struct {
	name string
	gvr  schema.GroupVersionResource
}

func (c *capturer) captureCRDs(ctx context.Context) ([]crdInfo, error) {
	var names []string
	for _, m := range c.o.Manifests {
		if m.GetKind() == "CustomResourceDefinition" {
			names = append(names, m.GetName())
		}
	}
	sort.Strings(names)
	var out []crdInfo
	for _, n := range names {
		crd, err := c.dyn.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // not installed: nothing of it to capture
		}
		if err != nil {
			return nil, fmt.Errorf("reading CRD %s: %w", n, err)
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		storage := StorageVersion(crd)
		if err := c.write(SectionCRD, crd); err != nil {
			return nil, err
		}
		out = append(out, crdInfo{name: n, gvr: schema.GroupVersionResource{Group: group, Version: storage, Resource: plural}})
	}
	return out, nil
}

// page is one LIST page of a kind, or the error that ended the kind.
type page struct {
	items []unstructured.Unstructured
	err   error
}

// listPages LISTs gvr in all namespaces page by page into ch (closed at the end).
func (c *capturer) listPages(ctx context.Context, gvr schema.GroupVersionResource, ch chan<- page) {
	defer close(ch)
	cont := ""
	for {
		list, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: c.o.PageSize, Continue: cont})
		if err != nil {
			select {
			case ch <- page{err: fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)}:
			case <-ctx.Done():
			}
			return
		}
		select {
		case ch <- page{items: list.Items}:
		case <-ctx.Done():
			return
		}
		cont = list.GetContinue()
		if cont == "" {
			return
		}
	}
}

// orderedLists lists every gvr concurrently (at most Parallelism at once, each with one page
// buffered) and hands the pages to fn kind by kind, in the given order.
func (c *capturer) orderedLists(ctx context.Context, gvrs []schema.GroupVersionResource, fn func(schema.GroupVersionResource, []unstructured.Unstructured) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chans := make([]chan page, len(gvrs))
	for i := range chans {
		chans[i] = make(chan page, 1)
	}
	sem := make(chan struct{}, c.o.Parallelism)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	go func() {
		for i, gvr := range gvrs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				c.listPages(ctx, gvr, chans[i])
			}()
		}
	}()
	for i, gvr := range gvrs {
		for p := range chans[i] {
			if p.err != nil {
				return p.err
			}
			if err := fn(gvr, p.items); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *capturer) captureCRs(ctx context.Context, crds []crdInfo) error {
	gvrs := make([]schema.GroupVersionResource, 0, len(crds))
	for _, crd := range crds {
		gvrs = append(gvrs, crd.gvr)
	}
	return c.orderedLists(ctx, gvrs, func(_ schema.GroupVersionResource, items []unstructured.Unstructured) error {
		for i := range items {
			c.crUIDs[cloneUID(items[i].GetUID())] = struct{}{}
			if err := c.write(SectionCR, &items[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// captureManifestObjects captures the live copy of every non-CRD object the release defines.
func (c *capturer) captureManifestObjects(ctx context.Context) error {
	type ref struct {
		gvr schema.GroupVersionResource
		ns  string
		u   *unstructured.Unstructured
	}
	var refs []ref
	for _, m := range c.o.Manifests {
		if m.GetKind() == "CustomResourceDefinition" {
			continue
		}
		gvr, namespaced, err := c.resourceFor(m.GroupVersionKind())
		if err != nil {
			return err
		}
		ns := ""
		if namespaced {
			ns = m.GetNamespace()
			if ns == "" {
				ns = c.o.Namespace
			}
		}
		refs = append(refs, ref{gvr: gvr, ns: ns, u: m})
	}
	sort.Slice(refs, func(i, j int) bool {
		a, b := refs[i], refs[j]
		if a.gvr.Group != b.gvr.Group {
			return a.gvr.Group < b.gvr.Group
		}
		if a.u.GetKind() != b.u.GetKind() {
			return a.u.GetKind() < b.u.GetKind()
		}
		if a.ns != b.ns {
			return a.ns < b.ns
		}
		return a.u.GetName() < b.u.GetName()
	})
	for _, r := range refs {
		live, err := c.dyn.Resource(r.gvr).Namespace(r.ns).Get(ctx, r.u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s %s/%s: %w", r.u.GetKind(), r.ns, r.u.GetName(), err)
		}
		if _, dup := c.written[live.GetUID()]; dup {
			continue
		}
		if err := c.write(SectionAssociated, live); err != nil {
			return err
		}
	}
	return nil
}

// resourceFor maps the common kinds of operator manifests to their resources; others are
// found by the plural-of-kind convention.
func (c *capturer) resourceFor(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool, error) {
	known := map[schema.GroupKind]struct {
		res        string
		namespaced bool
	}{
		{Kind: "Namespace"}:                                              {"namespaces", false},
		{Kind: "ServiceAccount"}:                                         {"serviceaccounts", true},
		{Kind: "Service"}:                                                {"services", true},
		{Kind: "ConfigMap"}:                                              {"configmaps", true},
		{Kind: "Secret"}:                                                 {"secrets", true},
		{Kind: "PersistentVolumeClaim"}:                                  {"persistentvolumeclaims", true},
		{Group: "apps", Kind: "Deployment"}:                              {"deployments", true},
		{Group: "apps", Kind: "StatefulSet"}:                             {"statefulsets", true},
		{Group: "apps", Kind: "DaemonSet"}:                               {"daemonsets", true},
		{Group: "batch", Kind: "Job"}:                                    {"jobs", true},
		{Group: "rbac.authorization.k8s.io", Kind: "Role"}:               {"roles", true},
		{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        {"rolebindings", true},
		{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        {"clusterroles", false},
		{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: {"clusterrolebindings", false},
		{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}: {"validatingwebhookconfigurations", false},
		{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:   {"mutatingwebhookconfigurations", false},
		{Group: "policy", Kind: "PodDisruptionBudget"}:                                  {"poddisruptionbudgets", true},
		{Group: "coordination.k8s.io", Kind: "Lease"}:                                   {"leases", true},
		{Group: "networking.k8s.io", Kind: "NetworkPolicy"}:                             {"networkpolicies", true},
		{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                             {"priorityclasses", false},
	}
	if k, ok := known[gvk.GroupKind()]; ok {
		return gvk.GroupVersion().WithResource(k.res), k.namespaced, nil
	}
	return schema.GroupVersionResource{}, false, fmt.Errorf("snapshot: the release defines a %s, which rewind does not know how to capture yet", gvk)
}

// spooled is the index entry of a candidate child in the spool file.
type spooled struct {
	uid    types.UID
	owners []types.UID
}

// spool holds the candidate children (objects of the owned kinds that have an owner) in a
// temporary file in LIST order; only their UIDs and owner UIDs stay in memory.
type spool struct {
	f     *os.File
	index []spooled
}

func (s *spool) close() {
	s.f.Close()
	os.Remove(s.f.Name())
}

// spoolCandidates lists the owned kinds and spools every object that has an ownerReference.
func (c *capturer) spoolCandidates(ctx context.Context) (*spool, error) {
	f, err := os.CreateTemp(c.o.SpoolDir, "rewind-snapshot-spool-")
	if err != nil {
		return nil, err
	}
	sp := &spool{f: f}
	bw := bufio.NewWriterSize(f, 256<<10)
	err = c.orderedLists(ctx, c.o.OwnedKinds, func(gvr schema.GroupVersionResource, items []unstructured.Unstructured) error {
		for i := range items {
			refs := items[i].GetOwnerReferences()
			if len(refs) == 0 {
				continue
			}
			e := spooled{uid: cloneUID(items[i].GetUID())}
			for _, r := range refs {
				e.owners = append(e.owners, cloneUID(r.UID))
			}
			b, err := json.Marshal(items[i].Object)
			if err != nil {
				return err
			}
			if _, err := bw.Write(append(b, '\n')); err != nil {
				return err
			}
			sp.index = append(sp.index, e)
		}
		return nil
	})
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// writeChildren writes every spooled object reachable from a CR through ownerReference UIDs.
func (c *capturer) writeChildren(sp *spool) error {
	if sp == nil || len(c.crUIDs) == 0 {
		return nil
	}
	index := sp.index
	// Reachability: an object is captured when one of its owners is a CR or a captured object.
	reach := map[types.UID]bool{}
	for changed := true; changed; {
		changed = false
		for _, e := range index {
			if reach[e.uid] {
				continue
			}
			for _, o := range e.owners {
				if _, isCR := c.crUIDs[o]; isCR || reach[o] {
					reach[e.uid] = true
					changed = true
					break
				}
			}
		}
	}
	if len(reach) == 0 {
		return nil
	}
	if _, err := sp.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	sc := bufio.NewScanner(sp.f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for i := 0; sc.Scan(); i++ {
		if !reach[index[i].uid] {
			continue
		}
		if _, dup := c.written[index[i].uid]; dup {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := utiljson.Unmarshal(sc.Bytes(), &obj.Object); err != nil {
			return fmt.Errorf("reading the spool: %w", err)
		}
		if err := c.write(SectionAssociated, obj); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the spool: %w", err)
	}
	return nil
}

// IsSecret says whether an entry is a core Secret (its values are never shown).
func IsSecret(u *unstructured.Unstructured) bool {
	return u.GetAPIVersion() == "v1" && u.GetKind() == "Secret"
}

// cloneUID copies a UID so that keeping it does not keep the decoded page it came from (a
// decoder may hand out strings that share one large buffer).
func cloneUID(u types.UID) types.UID { return types.UID(strings.Clone(string(u))) }

// StorageVersion returns the version a CRD stores its objects at ("" if none is marked).
func StorageVersion(crd *unstructured.Unstructured) string {
	vs, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range vs {
		m, _ := v.(map[string]any)
		if s, _ := m["storage"].(bool); s {
			n, _ := m["name"].(string)
			return n
		}
	}
	return ""
}
