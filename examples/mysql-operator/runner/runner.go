// Package runner runs the real sample operator on the testbed. Pods on kwok's fake nodes run
// nothing, so for each member cluster the runner watches the operator's Deployment (label
// app.kubernetes.io/name=mysql-operator) and, while it has replicas, runs that release's manager
// in this process against the member, with the Deployment's container arguments. It plays the
// kubelet for this one image.
//
// For releases that serve the CRD conversion webhook it also plays the parts a cluster's
// network and OLM would: it serves the webhook on a non-loopback address of this machine,
// publishes that address as an EndpointSlice of the webhook Service (the testbed's API servers
// route webhook Services through EndpointSlices), and injects its CA into the CRD's
// spec.conversion.webhook.clientConfig.caBundle, as OLM does.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
	"github.com/rewind-dev/rewind/internal/member"
)

// Member is one cluster the runner serves.
type Member struct {
	// Cluster is rewind's access layer to the member.
	Cluster *member.Cluster
}

// Options of Start.
type Options struct {
	// Log receives one line per operator start and stop (nil: none).
	Log io.Writer
	// Logger receives the operator managers' logs (zero: discarded).
	Logger logr.Logger
}

// Running is what the runner runs on one member.
type Running struct {
	Build operator.Build
	// Deployment is namespace/name of the operator Deployment.
	Deployment string
	Args       []string
}

// Runner runs the sample operator on every member.
type Runner struct {
	ca      *authority
	hostIP  string
	members []*memberRunner
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

const (
	operatorLabel = "app.kubernetes.io/name=mysql-operator"
	crdName       = "mysqlclusters.database.example.com"
	sliceManager  = "rewind-testbed-runner"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Start begins serving the members; Stop ends it (and every operator it runs).
func Start(ctx context.Context, members []Member, o Options) (*Runner, error) {
	ip, err := HostIP()
	if err != nil {
		return nil, err
	}
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &Runner{ca: ca, hostIP: ip, cancel: cancel}
	for _, m := range members {
		mr, err := newMemberRunner(r, m, o)
		if err != nil {
			cancel()
			r.wg.Wait()
			return nil, err
		}
		r.members = append(r.members, mr)
		r.wg.Add(1)
		go func() { defer r.wg.Done(); mr.run(ctx) }()
	}
	return r, nil
}

// Stop stops every operator and waits for them.
func (r *Runner) Stop() {
	r.cancel()
	r.wg.Wait()
}

// Current returns what runs on a member now.
func (r *Runner) Current(member string) (Running, bool) {
	for _, m := range r.members {
		if m.name == member {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.running == nil {
				return Running{}, false
			}
			return m.running.Running, true
		}
	}
	return Running{}, false
}

// HostIP is a non-loopback IPv4 address of this machine: API servers refuse loopback endpoints.
func HostIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
				continue
			}
			return n.IP.String(), nil
		}
	}
	return "", errors.New("runner: this machine has no non-loopback IPv4 address; the sample operator's conversion webhook needs one (API servers refuse loopback endpoints)")
}

type memberRunner struct {
	r       *Runner
	name    string
	cfg     *rest.Config
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	port    int
	o       Options
	kick    chan struct{}
	deploys cache.Indexer
	crds    cache.Indexer

	mu      sync.Mutex
	running *manager
	// plumbed is the resourceVersion of the CRD the webhook was last plumbed for: Deployment
	// status events are frequent, and nothing needs doing until the CRD changes.
	plumbed string
}

type manager struct {
	Running
	cancel context.CancelFunc
	done   chan struct{}
}

func newMemberRunner(r *Runner, m Member, o Options) (*memberRunner, error) {
	cfg := m.Cluster.Config()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn := m.Cluster.Dynamic
	port, err := freePort(r.hostIP)
	if err != nil {
		return nil, err
	}
	return &memberRunner{r: r, name: m.Cluster.Name, cfg: cfg, kube: kube, dyn: dyn, port: port, o: o, kick: make(chan struct{}, 1)}, nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("runner: no free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (m *memberRunner) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *memberRunner) run(ctx context.Context) {
	defer m.stopManager()
	kf := informers.NewSharedInformerFactoryWithOptions(m.kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.LabelSelector = operatorLabel
	}))
	dinf := kf.Apps().V1().Deployments().Informer()
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(m.dyn, 0, "", func(lo *metav1.ListOptions) {
		lo.FieldSelector = "metadata.name=" + crdName
	})
	cinf := df.ForResource(crdGVR).Informer()
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}
	_, _ = dinf.AddEventHandler(h)
	_, _ = cinf.AddEventHandler(h)
	m.deploys, m.crds = dinf.GetIndexer(), cinf.GetIndexer()
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	defer kf.Shutdown()
	defer df.Shutdown()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		case <-retry.C:
		}
		if !dinf.HasSynced() || !cinf.HasSynced() {
			retry.Reset(200 * time.Millisecond)
			continue
		}
		if err := m.sync(ctx); err != nil {
			fmt.Fprintf(m.o.Log, "runner %s: %v (retrying)\n", m.name, err)
			retry.Reset(time.Second)
		}
	}
}

// desired is the operator the member's Deployments ask for: the first (by namespace/name)
// Deployment with replicas whose container runs a known build.
func (m *memberRunner) desired() (Running, bool) {
	var deps []*appsv1.Deployment
	for _, o := range m.deploys.List() {
		if d, ok := o.(*appsv1.Deployment); ok && d.DeletionTimestamp == nil && ptr.Deref(d.Spec.Replicas, 1) > 0 {
			deps = append(deps, d)
		}
	}
	sort.Slice(deps, func(i, j int) bool {
		return deps[i].Namespace+"/"+deps[i].Name < deps[j].Namespace+"/"+deps[j].Name
	})
	for _, d := range deps {
		for _, c := range d.Spec.Template.Spec.Containers {
			if b, ok := operator.BuildForImage(c.Image); ok {
				return Running{Build: b, Deployment: d.Namespace + "/" + d.Name, Args: append([]string(nil), c.Args...)}, true
			}
		}
	}
	return Running{}, false
}

func same(a Running, b *manager) bool {
	return b != nil && a.Build == b.Build && a.Deployment == b.Deployment && strings.Join(a.Args, "\x00") == strings.Join(b.Args, "\x00")
}

func (m *memberRunner) sync(ctx context.Context) error {
	want, ok := m.desired()
	m.mu.Lock()
	cur := m.running
	m.mu.Unlock()
	if !ok || !same(want, cur) {
		if cur != nil {
			m.stopManager()
		}
		if ok {
			if err := m.startManager(ctx, want); err != nil {
				return err
			}
		}
	}
	if ok && want.Build.ServesConversion {
		return m.plumbWebhook(ctx)
	}
	return nil
}

func (m *memberRunner) startManager(ctx context.Context, want Running) error {
	o := operator.Options{Build: want.Build, WebhookHost: m.r.hostIP, SkipNameValidation: true,
		Logger: m.o.Logger.WithValues("member", m.name, "operator", want.Build.Version)}
	if err := o.ParseArgs(want.Args); err != nil {
		return err
	}
	// The webhook listens where the EndpointSlice points, whatever port the pod would use.
	o.WebhookPort = m.port
	o.GetCertificate = m.r.ca.getCertificate
	mgr, err := operator.NewManager(m.cfg, o)
	if err != nil {
		return fmt.Errorf("starting mysql-operator %s: %w", want.Build.Version, err)
	}
	m.plumbed = "" // a new webhook server: plumb again
	mctx, cancel := context.WithCancel(ctx)
	run := &manager{Running: want, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		if err := mgr.Start(mctx); err != nil {
			fmt.Fprintf(m.o.Log, "runner %s: mysql-operator %s stopped: %v\n", m.name, want.Build.Version, err)
		}
	}()
	m.mu.Lock()
	m.running = run
	m.mu.Unlock()
	extra := ""
	if len(want.Args) > 0 {
		extra = " " + strings.Join(want.Args, " ")
	}
	fmt.Fprintf(m.o.Log, "runner %s: started mysql-operator %s (Deployment %s%s)\n", m.name, want.Build.Version, want.Deployment, extra)
	return nil
}

func (m *memberRunner) stopManager() {
	m.mu.Lock()
	cur := m.running
	m.running = nil
	m.mu.Unlock()
	if cur == nil {
		return
	}
	cur.cancel()
	<-cur.done
	fmt.Fprintf(m.o.Log, "runner %s: stopped mysql-operator %s\n", m.name, cur.Build.Version)
}

// plumbWebhook makes the CRD's conversion webhook Service reach this process: an EndpointSlice
// of the Service with this machine's address and the member's port, and the runner's CA in the
// CRD's caBundle.
func (m *memberRunner) plumbWebhook(ctx context.Context) error {
	obj, ok, err := m.crds.GetByKey(crdName)
	if err != nil || !ok {
		return err // no CRD yet: nothing converts
	}
	crd := obj.(*unstructured.Unstructured)
	if crd.GetResourceVersion() == m.plumbed {
		return nil
	}
	if s, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "strategy"); s != "Webhook" {
		return nil
	}
	svcNS, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service", "namespace")
	svcName, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service", "name")
	if svcName == "" {
		return nil
	}
	port := int64(443)
	if p, ok, _ := unstructured.NestedInt64(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service", "port"); ok {
		port = p
	}
	// The CA first: an endpoint that the API server cannot trust only produces TLS errors.
	bundle, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
	if bundle != m.r.ca.bundleBase64() {
		patch := fmt.Sprintf(`{"spec":{"conversion":{"webhook":{"clientConfig":{"caBundle":%q}}}}}`, m.r.ca.bundleBase64())
		if _, err := m.dyn.Resource(crdGVR).Patch(ctx, crdName, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: sliceManager}); err != nil {
			return fmt.Errorf("injecting the CA into CRD %s: %w", crdName, err)
		}
	}
	svc, err := m.kube.CoreV1().Services(svcNS).Get(ctx, svcName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("conversion webhook Service %s/%s: %w", svcNS, svcName, err)
	}
	portName := ""
	for _, p := range svc.Spec.Ports {
		if int64(p.Port) == port {
			portName = p.Name
		}
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName + "-testbed", Namespace: svcNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: svcName, discoveryv1.LabelManagedBy: sliceManager}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{m.r.hostIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(int32(m.port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	cur, err := m.kube.DiscoveryV1().EndpointSlices(svcNS).Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := m.kube.DiscoveryV1().EndpointSlices(svcNS).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("EndpointSlice %s/%s: %w", svcNS, slice.Name, err)
		}
	case err != nil:
		return err
	case equality.Semantic.DeepEqual(cur.Labels, slice.Labels) && cur.AddressType == slice.AddressType &&
		equality.Semantic.DeepEqual(cur.Endpoints, slice.Endpoints) && equality.Semantic.DeepEqual(cur.Ports, slice.Ports):
		// Already in place.
	default:
		cur.Labels, cur.AddressType, cur.Endpoints, cur.Ports = slice.Labels, slice.AddressType, slice.Endpoints, slice.Ports
		if _, err := m.kube.DiscoveryV1().EndpointSlices(svcNS).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("EndpointSlice %s/%s: %w", svcNS, slice.Name, err)
		}
	}
	m.plumbed = crd.GetResourceVersion()
	return nil
}
