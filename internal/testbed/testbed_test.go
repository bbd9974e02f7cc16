//go:build !unit

package testbed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// env is the testbed shared by this package's tests: a hub and 3 members with workloads.
var env *testbed.Testbed

// childEnv, when set, makes the test binary act as the child process of TestSIGINTStopsEverything:
// it starts a testbed in the given state folder, says READY and waits to be interrupted.
const childEnv = "REWIND_TESTBED_SIGINT_CHILD"

// interruptedFile is what the child's OnInterrupt hook writes in its state folder.
const interruptedFile = "interrupt-hook-ran"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		runChild(dir)
		return
	}
	testenv.Main(m, testbed.Options{Members: 3, Workloads: true}, &env)
}

func runChild(dir string) {
	// What a test registers to stop on an interrupt (a detached testbed) runs before the exit.
	testbed.OnInterrupt(func() { _ = os.WriteFile(filepath.Join(dir, interruptedFile), nil, 0o600) })
	_, err := testbed.Start(context.Background(), testbed.Options{
		Members: 1, Workloads: true, StateDir: dir, HandleSignals: true, Log: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	fmt.Println("READY")
	select {} // the SIGINT handler stops the testbed and exits
}

func clientset(t *testing.T, c *testbed.Cluster) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestStartupTime(t *testing.T) {
	t.Logf("hub + %d members with workloads ready in %s (target: under 60s once binaries are built)", len(env.Members), env.StartupTime)
	if len(env.Members) != 3 {
		t.Fatalf("want 3 members, got %d", len(env.Members))
	}
	for _, c := range env.Clusters() {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			t.Errorf("kubeconfig of %s: %v", c.Name, err)
		}
	}
}

func TestClustersAreIsolated(t *testing.T) {
	ctx := t.Context()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.isolation.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "isolation.example.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	clients := map[string]apiextclient.Interface{}
	for _, c := range env.Clusters() {
		cs, err := apiextclient.NewForConfig(c.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		clients[c.Name] = cs
	}
	if _, err := clients["member1"].ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the CRD in member1: %v", err)
	}
	t.Cleanup(func() {
		_ = clients["member1"].ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	if _, err := clients["member1"].ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the CRD is not readable in member1: %v", err)
	}
	for _, name := range []string{"member2", "hub"} {
		_, err := clients[name].ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("CRD created in member1 must be absent from %s, got err=%v", name, err)
		}
	}
}

func TestDeploymentBecomesAvailable(t *testing.T) {
	ctx := t.Context()
	m := env.Members[0]
	cs := clientset(t, m)
	ns := testenv.Namespace(t, m.RESTConfig())
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "example.com/web:1"}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.AvailableReplicas == 2 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("deployment did not become Available with 2 replicas: %v; last status: %+v", err, last.Status)
	}
}

func TestGarbageCollectorDeletesOrphans(t *testing.T) {
	ctx := t.Context()
	m := env.Members[1]
	cs := clientset(t, m)
	ns := testenv.Namespace(t, m.RESTConfig())
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A child that names the deleted owner, and a control child whose owner is alive.
	mkChild := func(name string, uid types.UID, ownerName string) {
		child := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: ownerName, UID: uid,
			}},
		}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, child, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	live, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "live-owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mkChild("orphan", owner.UID, "owner")
	mkChild("kept", live.UID, "live-owner")
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "orphan", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the garbage collector did not delete the ConfigMap whose owner is gone: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap whose owner exists must stay: %v", err)
	}
}

// assertAllGone fails unless every recorded process, and every member of its process group,
// has exited.

func TestStopLeavesNoProcess(t *testing.T) {
	tb, err := testbed.Start(t.Context(), testbed.Options{Members: 1, Workloads: true, BinDir: binDir(t), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	recs := tb.Processes()
	// etcd, 2 API servers, and controller-manager, scheduler and kwok for the member.
	if len(recs) != 6 {
		t.Fatalf("want 6 processes, got %d: %+v", len(recs), recs)
	}
	for _, r := range recs {
		if !testbed.Alive(r) {
			t.Fatalf("process %s (pid %d) is not running before Stop", r.Name, r.PID)
		}
	}
	if err := tb.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.AssertAllGone(t, recs)
	if _, err := os.Stat(tb.StateDir); !os.IsNotExist(err) {
		t.Errorf("Stop must remove the temporary state folder %s (err=%v)", tb.StateDir, err)
	}
}

// TestSIGINTStopsEverything: a testbed started with HandleSignals stops every process it
// started when the test binary is interrupted, after running what tests registered with
// OnInterrupt (the detached testbeds they started), and the binary exits with 130.
func TestSIGINTStopsEverything(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, testbed.BinDirEnv+"="+binDir(t))
	cmd.Stderr = testWriter{t}
	t.Cleanup(func() { _, _ = testbed.StopState(dir) })
	testenv.StartReady(t, cmd)
	st, err := testbed.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) != 6 {
		t.Fatalf("want 6 processes in the state file, got %d", len(st.Processes))
	}
	testenv.Interrupt(t, cmd, syscall.SIGINT, 130, st.Processes)
	if _, err := os.Stat(filepath.Join(dir, interruptedFile)); err != nil {
		t.Errorf("the child's OnInterrupt hook did not run before it exited: %v", err)
	}
}

func TestCLIUpDownLeavesNoProcess(t *testing.T) {
	rewind := buildRewind(t)
	dir := filepath.Join(t.TempDir(), "state")
	const latency = 25 * time.Millisecond
	up := exec.Command(rewind, "testbed", "up", "--members", "3", "--member-latency", latency.String(), "--state-dir", dir, "--bin-dir", binDir(t))
	testenv.StopStateOnInterrupt(t, dir) // registered first: up may be interrupted half way
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("rewind testbed up: %v\n%s", err, out)
	}
	t.Logf("rewind testbed up:\n%s", out)
	st, err := testbed.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	// etcd, 4 API servers, 3 helpers for each of 3 members, and the member proxy.
	if len(st.Processes) != 15 || len(st.Clusters) != 4 {
		t.Fatalf("want 15 processes and 4 clusters, got %d and %d", len(st.Processes), len(st.Clusters))
	}
	for _, r := range st.Processes {
		if !testbed.Alive(r) {
			t.Fatalf("%s (pid %d) is not running after up", r.Name, r.PID)
		}
	}
	// The proxy outlives `up`: the members' kubeconfigs reach them with the latency.
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Clusters[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if d := fastestVersionGET(t, cfg); d < 2*latency {
		t.Errorf("GET /version through %s took %s, want >= %s", st.Clusters[1].Kubeconfig, d, 2*latency)
	}
	statusOut, err := exec.Command(rewind, "testbed", "status", "--state-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("rewind testbed status: %v\n%s", err, statusOut)
	}
	t.Logf("rewind testbed status:\n%s", statusOut)
	if got := strings.Count(string(statusOut), " yes "); got != 4 {
		t.Errorf("status should show 4 ready clusters, got %d:\n%s", got, statusOut)
	}
	jsonOut, err := exec.Command(rewind, "testbed", "status", "--state-dir", dir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("rewind testbed status -o json: %v\n%s", err, jsonOut)
	}
	var status struct {
		Clusters []struct {
			Name string `json:"name"`
			testbed.Memory
		} `json:"clusters"`
		Processes []struct {
			Name string `json:"name"`
			testbed.Memory
		} `json:"processes"`
		Total testbed.Memory `json:"total"`
	}
	if err := json.Unmarshal(jsonOut, &status); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, jsonOut)
	}
	var sum testbed.Memory
	for _, p := range status.Processes {
		if p.RSS <= 0 || p.Anon <= 0 || p.Anon > p.RSS {
			t.Errorf("process %s memory: %+v", p.Name, p.Memory)
		}
		sum.RSS += p.RSS
		sum.Anon += p.Anon
	}
	for _, c := range status.Clusters {
		// Every cluster runs at least an API server, which holds tens of MiB.
		if c.RSS < 16<<20 || c.Anon < 16<<20 {
			t.Errorf("cluster %s memory: %+v", c.Name, c.Memory)
		}
	}
	if status.Total != sum {
		t.Errorf("total memory %+v is not the sum of the processes' %+v", status.Total, sum)
	}
	downOut, err := exec.Command(rewind, "testbed", "down", "--state-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("rewind testbed down: %v\n%s", err, downOut)
	}
	testenv.AssertAllGone(t, st.Processes)
}
