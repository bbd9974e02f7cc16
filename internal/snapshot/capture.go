package snapshot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/rewind-dev/rewind/internal/member"
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
// with the number of objects: LIST responses are decoded one object at a time as they
// arrive; CRs wait in memory only as canonical lines, in batches of about 64 KiB (a few for
// the kind being written, at most a page for a kind listed ahead of its turn); candidate
// children stream to spool files on disk; and the UIDs that UID-chain discovery needs are
// kept on disk in sorted runs (see chainIndex). What stays in memory per object is 2 bits
// per candidate child, during the last step.
func Capture(ctx context.Context, cl *member.Cluster, o Options, w io.Writer) (*Result, error) {
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 4
	}
	if o.OwnedKinds == nil {
		o.OwnedKinds = DefaultOwnedKinds
	}
	sv, err := cl.ServerVersion(ctx)
	if err != nil {
		return nil, err
	}
	clusterID, err := cl.ClusterID(ctx)
	if err != nil {
		return nil, err
	}
	res := &Result{
		Header: Header{Format: Format, ClusterID: clusterID, Operator: o.Operator,
			Release: o.Release, Version: o.Version, Namespace: o.Namespace},
		ServerVersion: sv,
	}
	cw := &countingWriter{w: w}
	enc := newEncoder(cw)
	if err := enc.line(res.Header); err != nil {
		return nil, err
	}
	c := &capturer{cl: cl, dyn: cl.Dynamic, rc: cl.Lists, o: o, enc: enc, res: res, chains: newChainIndex(o.SpoolDir, 0), written: map[types.UID]struct{}{},
		crNamespaces: map[string]struct{}{}}
	defer c.chains.close()

	// 1. The release's CRDs, as they are live (storedVersions included).
	crds, err := c.captureCRDs(ctx)
	if err != nil {
		return nil, err
	}
	// 2. Every CR of those CRDs, and the candidate children (reachability is decided after).
	sp, err := c.crsAndCandidates(ctx, crds)
	if sp != nil {
		defer sp.close()
	}
	if err != nil {
		return nil, err
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
	cl     *member.Cluster
	dyn    dynamic.Interface
	rc     rest.Interface
	o      Options
	enc    *encoder
	res    *Result
	chains *chainIndex
	// written holds the UIDs of the CRDs and manifest objects written (a few); the CRs' are
	// in chains.
	written map[types.UID]struct{}
	// crNamespaces holds the namespaces of the CRs captured.
	nsMu         sync.Mutex
	crNamespaces map[string]struct{}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// write writes one entry. The caller records its UID where dedup needs it.
func (c *capturer) write(section string, obj *unstructured.Unstructured) error {
	Canonicalize(obj)
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
	name       string
	gvr        schema.GroupVersionResource
	namespaced bool
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
		if uid := crd.GetUID(); uid != "" {
			c.written[uid] = struct{}{}
		}
		if err := c.write(SectionCRD, crd); err != nil {
			return nil, err
		}
		scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
		out = append(out, crdInfo{name: n, gvr: schema.GroupVersionResource{Group: group, Version: storage, Resource: plural}, namespaced: scope == "Namespaced"})
	}
	return out, nil
}

// batchBytes is about the most canonical lines a batch holds.
const batchBytes = 64 << 10

// batch is what a lister made of consecutive CRs of one kind (about batchBytes; a LIST page
// makes several): their canonical lines, with their UID keys; or the error that ended the
// kind. Objects are decoded one at a time as the LIST response arrives, and handed over in
// batches, so what waits in memory does not depend on the page size or on the size of the
// objects (a decoded page takes several times its JSON size).
type batch struct {
	buf bytes.Buffer
	enc *json.Encoder
	n   int // lines in buf
	// keys: the UIDs of the objects.
	keys []uidKey
	err  error
}

var batchPool = sync.Pool{New: func() any {
	b := &batch{}
	b.enc = newLineEncoder(&b.buf)
	return b
}}

func getBatch() *batch { return batchPool.Get().(*batch) }

func putBatch(b *batch) {
	b.buf.Reset()
	b.n, b.keys = 0, b.keys[:0]
	batchPool.Put(b)
}

// entry canonicalizes obj and adds its line, encoded as encoder.line does.
func (b *batch) entry(section string, obj *unstructured.Unstructured) error {
	Canonicalize(obj)
	if err := b.enc.Encode(Entry{Section: section, Object: obj}); err != nil {
		return err
	}
	b.n++
	return nil
}

// listBatches LISTs gvr in all namespaces, hands each object to item to add it to the
// current batch, and sends the batches to ch (closed at the end). It never waits for the
// consumer while a LIST response is open (the API server would time the request out): a
// batch the consumer does not take at once waits until the page has been read, and is
// handed over before the next request. So the kind being consumed holds a few batches, and
// a kind waiting for its turn at most a page of canonical lines.
func (c *capturer) listBatches(ctx context.Context, gvr schema.GroupVersionResource, ch chan<- *batch, item func(*unstructured.Unstructured, *batch) error) {
	defer close(ch)
	var pending []*batch // complete batches not handed over yet, oldest first
	b := getBatch()
	defer func() { putBatch(b) }()
	// offer hands over pending batches as long as the consumer takes them without waiting.
	offer := func() {
		for len(pending) > 0 {
			select {
			case ch <- pending[0]:
				pending[0] = nil
				pending = pending[1:]
			default:
				return
			}
		}
	}
	// flush hands over every pending batch, waiting for the consumer.
	flush := func() bool {
		for i, p := range pending {
			select {
			case ch <- p:
				pending[i] = nil
			case <-ctx.Done():
				return false
			}
		}
		pending = pending[:0]
		return true
	}
	cont := ""
	for {
		next, err := c.listPage(ctx, gvr, cont, func(u *unstructured.Unstructured) error {
			if err := item(u, b); err != nil {
				return err
			}
			if b.buf.Len() >= batchBytes {
				pending = append(pending, b)
				b = getBatch()
				offer()
			}
			return nil
		})
		if err != nil {
			select {
			case ch <- &batch{err: fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)}:
			case <-ctx.Done():
			}
			return
		}
		if b.n > 0 {
			pending = append(pending, b)
			b = getBatch()
		}
		if !flush() {
			return
		}
		if cont = next; cont == "" {
			return
		}
	}
}

// listAll LISTs gvr in all namespaces page by page and hands each object to item.
func (c *capturer) listAll(ctx context.Context, gvr schema.GroupVersionResource, item func(*unstructured.Unstructured) error) error {
	if err := EachObject(ctx, c.rc, gvr, c.o.PageSize, item); err != nil {
		return fmt.Errorf("listing %s: %w", gvr.GroupResource(), err)
	}
	return nil
}

// listPage reads one page of gvr (the request the dynamic client's List sends), decoding its
// objects as they arrive, and returns the continue token.
func (c *capturer) listPage(ctx context.Context, gvr schema.GroupVersionResource, cont string, item func(*unstructured.Unstructured) error) (string, error) {
	return listPage(ctx, c.rc, gvr, "", c.o.PageSize, cont, item)
}

// listPage reads one page of gvr in namespace ("": all namespaces).
func listPage(ctx context.Context, rc rest.Interface, gvr schema.GroupVersionResource, namespace string, pageSize int64, cont string, item func(*unstructured.Unstructured) error) (string, error) {
	path := []string{"api"}
	if gvr.Group != "" {
		path = []string{"apis", gvr.Group}
	}
	path = append(path, gvr.Version)
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	path = append(path, gvr.Resource)
	req := rc.Get().AbsPath(path...).Param("limit", strconv.FormatInt(pageSize, 10))
	if cont != "" {
		req = req.Param("continue", cont)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return "", err
	}
	defer body.Close()
	return decodeList(body, item)
}

// EachObject LISTs gvr in all namespaces through rc (a member's Lists client), pageSize
// objects a request, and hands each object to item as it is decoded: no page is held in
// memory. An error from item ends the listing and is returned as is.
func EachObject(ctx context.Context, rc rest.Interface, gvr schema.GroupVersionResource, pageSize int64, item func(*unstructured.Unstructured) error) error {
	return EachObjectIn(ctx, rc, gvr, "", pageSize, item)
}

// EachObjectIn is EachObject in one namespace ("": all namespaces).
func EachObjectIn(ctx context.Context, rc rest.Interface, gvr schema.GroupVersionResource, namespace string, pageSize int64, item func(*unstructured.Unstructured) error) error {
	cont := ""
	for {
		next, err := listPage(ctx, rc, gvr, namespace, pageSize, cont, item)
		if err != nil {
			return err
		}
		if cont = next; cont == "" {
			return nil
		}
	}
}

// decodeList decodes a JSON list as the dynamic client does (integers kept as int64; an
// object with neither kind nor apiVersion gets those of the list), but one object at a time,
// handing each to item in order, and returns the list's continue token. Only a list whose
// objects need its kind before the kind is read (never sent by an API server) is held whole.
func decodeList(r io.Reader, item func(*unstructured.Unstructured) error) (string, error) {
	dec := json.NewDecoder(r)
	t, err := dec.Token()
	if err == io.EOF {
		return "", errors.New("empty response")
	}
	if err != nil {
		return "", err
	}
	if t != json.Delim('{') {
		return "", errors.New("the list is not a JSON object")
	}
	var apiVersion, kind, cont string
	var sawKind, sawAPIVersion bool
	var held []*unstructured.Unstructured // objects waiting for the list's kind, in order
	var raw json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch t {
		case "apiVersion", "kind", "metadata":
			var v any
			if err := dec.Decode(&v); err != nil {
				return "", err
			}
			switch t {
			case "apiVersion":
				apiVersion, _ = v.(string)
				sawAPIVersion = true
			case "kind":
				kind, _ = v.(string)
				sawKind = true
			default:
				m, _ := v.(map[string]any)
				cont, _ = m["continue"].(string)
			}
			continue
		case "items":
		default:
			if err := dec.Decode(&raw); err != nil {
				return "", err
			}
			continue
		}
		if t, err = dec.Token(); err != nil {
			return "", err
		}
		if t == nil { // "items": null
			continue
		}
		if t != json.Delim('[') {
			return "", errors.New("the list's items are not an array")
		}
		for dec.More() {
			if err := dec.Decode(&raw); err != nil {
				return "", err
			}
			m := map[string]any{}
			if err := utiljson.Unmarshal(raw, &m); err != nil {
				return "", err
			}
			u := &unstructured.Unstructured{Object: m}
			if held != nil || (u.GetKind() == "" && u.GetAPIVersion() == "" && !(sawKind && sawAPIVersion)) {
				held = append(held, u)
				continue
			}
			if u.GetKind() == "" && u.GetAPIVersion() == "" {
				u.SetKind(strings.TrimSuffix(kind, "List"))
				u.SetAPIVersion(apiVersion)
			}
			if err := item(u); err != nil {
				return "", err
			}
		}
		if _, err := dec.Token(); err != nil { // ']'
			return "", err
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("data after the list")
	}
	if kind == "" {
		return "", errors.New("the list has no kind")
	}
	for _, u := range held {
		if u.GetKind() == "" && u.GetAPIVersion() == "" {
			u.SetKind(strings.TrimSuffix(kind, "List"))
			u.SetAPIVersion(apiVersion)
		}
		if err := item(u); err != nil {
			return "", err
		}
	}
	return cont, nil
}

// orderedLists lists every gvr concurrently (at most Parallelism at once): each lister makes
// batches of its objects with item (see listBatches). consume gets the batches kind by kind,
// in the given order; a batch is reused after.
func (c *capturer) orderedLists(ctx context.Context, gvrs []schema.GroupVersionResource, item func(*unstructured.Unstructured, *batch) error, consume func(*batch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chans := make([]chan *batch, len(gvrs))
	for i := range chans {
		chans[i] = make(chan *batch, 1)
	}
	sem := make(chan struct{}, c.o.Parallelism)
	// The launcher is counted in wg before the Wait can start, and it adds each lister while
	// it is counted itself: so the Wait, on any return, waits for every lister launched.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for i, gvr := range gvrs {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			if ctx.Err() != nil { // both were ready: the select chose at random
				<-sem
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				c.listBatches(ctx, gvr, chans[i], item)
			})
		}
	})
	for i := range gvrs {
		for b := range chans[i] {
			if b.err != nil {
				return b.err
			}
			err := consume(b)
			putBatch(b)
			if err != nil {
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
	item := func(obj *unstructured.Unstructured, b *batch) error {
		b.keys = append(b.keys, c.chains.keys.key(obj.GetUID()))
		c.nsMu.Lock()
		c.crNamespaces[obj.GetNamespace()] = struct{}{}
		c.nsMu.Unlock()
		return b.entry(SectionCR, obj)
	}
	return c.orderedLists(ctx, gvrs, item, func(b *batch) error {
		for _, k := range b.keys {
			if err := c.chains.addCR(k); err != nil {
				return err
			}
		}
		c.res.Counts.CustomResources += b.n
		return c.enc.raw(b.buf.Bytes())
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
	defined := member.DefinedKinds(c.o.Manifests)
	for _, m := range c.o.Manifests {
		if m.GetKind() == "CustomResourceDefinition" {
			continue
		}
		res, err := c.cl.Resource(m.GroupVersionKind())
		if _, own := defined[m.GroupVersionKind().GroupKind()]; own && member.IsNotServed(err) {
			continue // a custom resource of a CRD the release installs, not installed yet
		}
		if err != nil {
			return fmt.Errorf("snapshot: %s %s of the release: %w", m.GetKind(), m.GetName(), err)
		}
		gvr := res.GVR
		ns := ""
		if res.Namespaced {
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
	// Read them all first, so that which are CRs (already written) is found in one pass over
	// the CR UIDs; they are as many as the release's manifests, which are in memory anyway.
	var lives []*unstructured.Unstructured
	var uids []types.UID
	for _, r := range refs {
		live, err := c.dyn.Resource(r.gvr).Namespace(r.ns).Get(ctx, r.u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s %s/%s: %w", r.u.GetKind(), r.ns, r.u.GetName(), err)
		}
		lives = append(lives, live)
		uids = append(uids, live.GetUID())
	}
	isCR, err := c.chains.areCRs(uids)
	if err != nil {
		return err
	}
	for i, live := range lives {
		uid := live.GetUID()
		if uid != "" {
			if _, dup := c.written[uid]; dup || isCR[i] {
				continue
			}
			c.written[uid] = struct{}{}
		}
		if err := c.write(SectionAssociated, live); err != nil {
			return err
		}
	}
	return nil
}

// spool holds the candidate children (objects of the owned kinds that have an owner) in
// temporary files, one per owned kind, in LIST order, each object as the canonical line it
// would be written as; their UIDs and owner UIDs go to the capture's chainIndex.
type spool struct {
	files []*os.File // by owned kind
}

func (s *spool) close() {
	for _, f := range s.files {
		if f != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}
}

// maxSpoolNamespaces bounds the namespaces the owned kinds are listed in one by one; with CRs
// in more, they are listed in all namespaces at once.
const maxSpoolNamespaces = 8

// crsAndCandidates captures the CRs and spools the candidate children. The children of a
// namespaced CR live in its namespace (an ownerReference does not cross namespaces), and so do
// theirs: when every CRD and every owned kind is namespaced, the CRs are captured first and
// the owned kinds are read only in the namespaces that hold CRs (none at all without CRs), so
// that a capture does not read every Secret of the cluster. Otherwise the owned kinds are
// read in all namespaces, while the CRs are captured.
func (c *capturer) crsAndCandidates(ctx context.Context, crds []crdInfo) (*spool, error) {
	if c.namespacedOnly(crds) {
		if err := c.captureCRs(ctx, crds); err != nil {
			return nil, err
		}
		if len(c.crNamespaces) == 0 {
			return nil, nil // no CR, no child
		}
		var namespaces []string
		if len(c.crNamespaces) <= maxSpoolNamespaces {
			namespaces = slices.Sorted(maps.Keys(c.crNamespaces))
		}
		return c.spoolCandidates(ctx, namespaces)
	}
	spoolCtx, cancelSpool := context.WithCancel(ctx)
	defer cancelSpool()
	spoolDone := make(chan error, 1)
	var sp *spool
	go func() {
		var err error
		sp, err = c.spoolCandidates(spoolCtx, nil)
		spoolDone <- err
	}()
	crErr := c.captureCRs(ctx, crds)
	if crErr != nil {
		cancelSpool()
	}
	spoolErr := <-spoolDone
	if crErr != nil {
		return sp, crErr
	}
	return sp, spoolErr
}

// namespacedOnly says whether every CRD and every owned kind is namespaced.
func (c *capturer) namespacedOnly(crds []crdInfo) bool {
	for _, crd := range crds {
		if !crd.namespaced {
			return false
		}
	}
	m := c.cl.Mapper()
	for _, gvr := range c.o.OwnedKinds {
		gvk, err := m.KindFor(gvr)
		if err != nil {
			return false
		}
		mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
			return false
		}
	}
	return true
}

// spoolCandidates lists the owned kinds (at most Parallelism at once) in namespaces (nil: in
// all namespaces at once) and spools every object that has an ownerReference. Each kind
// streams into its own file, so nothing waits in memory for another kind; its namespaces are
// listed in order, so the file holds the kind's objects in the order one LIST of all
// namespaces gives.
func (c *capturer) spoolCandidates(ctx context.Context, namespaces []string) (*spool, error) {
	sp := &spool{files: make([]*os.File, len(c.o.OwnedKinds))}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.o.Parallelism)
	for i, gvr := range c.o.OwnedKinds {
		g.Go(func() error {
			f, err := os.CreateTemp(c.o.SpoolDir, "rewind-snapshot-spool-")
			if err != nil {
				return err
			}
			sp.files[i] = f
			bw := bufio.NewWriterSize(f, 64<<10)
			enc := newLineEncoder(bw)
			var owners []uidKey
			spoolOne := func(obj *unstructured.Unstructured) error {
				refs := obj.GetOwnerReferences()
				if len(refs) == 0 {
					return nil
				}
				owners = owners[:0]
				for _, r := range refs {
					owners = append(owners, c.chains.keys.key(r.UID))
				}
				k := c.chains.keys.key(obj.GetUID())
				Canonicalize(obj)
				if err := enc.Encode(Entry{Section: SectionAssociated, Object: obj}); err != nil {
					return err
				}
				return c.chains.addCandidate(i, k, owners)
			}
			if namespaces == nil {
				err = c.listAll(gctx, gvr, spoolOne)
			}
			for _, ns := range namespaces {
				if err = EachObjectIn(gctx, c.rc, gvr, ns, c.o.PageSize, spoolOne); err != nil {
					err = fmt.Errorf("listing %s in %s: %w", gvr.GroupResource(), ns, err)
					break
				}
			}
			if err != nil {
				return err
			}
			return bw.Flush()
		})
	}
	if err := g.Wait(); err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

// writeChildren writes every spooled object reachable from a CR through ownerReference UIDs
// (once, and not if already written), in spool order: kind by kind, in LIST order.
func (c *capturer) writeChildren(sp *spool) error {
	if sp == nil {
		return nil
	}
	write, err := c.chains.children(c.written)
	if err != nil {
		return err
	}
	some := false
	for _, w := range write {
		some = some || w != 0
	}
	if !some {
		return nil
	}
	buf := make([]byte, 0, 64<<10)
	i := uint32(0) // candidate number in spool order
	for kind, f := range sp.files {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(buf, 64<<20)
		n := uint32(0)
		for ; sc.Scan(); i, n = i+1, n+1 {
			if n >= c.chains.kindCount(kind) {
				return errors.New("reading the spool: more lines than candidates")
			}
			if !write.has(i) {
				continue
			}
			// The line is the canonical entry already.
			c.res.Counts.Associated++
			if err := c.enc.raw(sc.Bytes()); err != nil {
				return err
			}
			if err := c.enc.raw(newline); err != nil {
				return err
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("reading the spool: %w", err)
		}
		if n != c.chains.kindCount(kind) {
			return errors.New("reading the spool: fewer lines than candidates")
		}
	}
	return nil
}

var newline = []byte{'\n'}

// IsSecret says whether an entry is a core Secret (its values are never shown).
func IsSecret(u *unstructured.Unstructured) bool {
	return u.GetAPIVersion() == "v1" && u.GetKind() == "Secret"
}

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
