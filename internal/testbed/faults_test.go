//go:build !unit

package testbed_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rewind-dev/rewind/internal/fault"
	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

// poll runs cond every 100ms until it holds, or fails the test after timeout; last says what
// was seen last.
func poll(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, seen := cond()
		last = seen
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
	}
}

// once asks for the namespace "default" once, without client-go's retries.
func once(ctx context.Context, cs kubernetes.Interface) error {
	return cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/default").MaxRetries(0).Do(ctx).Error()
}

// servingCertHash is the SHA-256 of the certificate the server at host:port presents.
func servingCertHash(t *testing.T, hostPort string, ca []byte) [32]byte {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", hostPort, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return sha256.Sum256(conn.ConnectionState().PeerCertificates[0].Raw)
}

// TestMemberFaults runs a testbed whose member is reached through the member proxy with
// latency and the HTTP layer, and injects each fault into it at run time.
func TestMemberFaults(t *testing.T) {
	const latency = 10 * time.Millisecond
	tb, err := testbed.Start(t.Context(), testbed.Options{
		Members: 1, MemberLatency: latency, MemberFaults: &testbed.Faults{HTTPProxy: true},
		BinDir: binDir(t), Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Stop() })
	m := tb.Members[0]
	fi := m.Faults()
	if fi == nil || !fi.HTTPLayer() {
		t.Fatalf("the member must have an in-process fault injector with the HTTP layer, got %v", fi)
	}
	if tb.Hub.Faults() != nil {
		t.Error("the hub must have no fault injector")
	}
	ctx := t.Context()
	cs := clientset(t, m)
	ns := "faults"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: ns}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("latency under the HTTP layer", func(t *testing.T) {
		if d := fastestVersionGET(t, m.RESTConfig()); d < 2*latency {
			t.Errorf("GET /version through the proxy took %s, want >= %s", d, 2*latency)
		}
	})

	t.Run("a reset ends a watch and a long request", func(t *testing.T) {
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		body, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/"+ns+"/configmaps").
			Param("watch", "true").Param("allowWatchBookmarks", "false").MaxRetries(0).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer body.Close()
		// The raw watch's first events (the ADDED of the existing ConfigMaps) arrive.
		if _, err := body.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		before := fi.Counts()
		fi.ResetNow()
		_, err = io.Copy(io.Discard, body)
		t.Logf("the long request after the reset: %v", err)
		if err == nil || !fault.IsTransient(err) || !(utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)) {
			t.Errorf("the long request read %v (%T) after the reset, want a connection reset", err, err)
		}
		// client-go's watch ends (its result channel closes) on the reset.
		deadline := time.After(time.Minute)
	drain:
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					break drain
				}
			case <-deadline:
				t.Fatal("the client-go watch did not end within a minute of the reset")
			}
		}
		if got := fi.Counts(); got.Resets != before.Resets+1 || got.ConnsReset <= before.ConnsReset {
			t.Errorf("counts %+v after one reset (before: %+v)", got, before)
		}
	})

	t.Run("new connections are refused during the window, then accepted", func(t *testing.T) {
		before := fi.Counts()
		fi.RefuseFor(time.Hour)
		for range 3 {
			err := once(ctx, cs)
			var st apierrors.APIStatus
			if err == nil || errors.As(err, &st) || !fault.IsTransient(err) {
				t.Fatalf("a request while refusing got %v, want a transport error", err)
			}
			t.Logf("a request while refusing: %v", err)
		}
		if got := fi.Counts(); got.ConnsRefused < before.ConnsRefused+3 {
			t.Errorf("counts %+v: want 3 more refused connections than %+v", got, before)
		}
		fi.Heal()
		if err := once(ctx, cs); err != nil {
			t.Fatalf("after Heal: %v", err)
		}
		// A refusal of a moment ends by itself.
		if err := fi.Set(testbed.Faults{HTTPProxy: true, RefuseFor: time.Second}); err != nil {
			t.Fatal(err)
		}
		fi.ResetNow()
		poll(t, time.Minute, "a request accepted after the refusal", func() (bool, string) {
			err := once(ctx, cs)
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("periodic resets", func(t *testing.T) {
		before := fi.Counts().Resets
		if err := fi.Set(testbed.Faults{HTTPProxy: true, ResetEvery: 300 * time.Millisecond, RefuseFor: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		poll(t, time.Minute, "3 periodic resets", func() (bool, string) {
			n := fi.Counts().Resets - before
			return n >= 3, fmt.Sprint(n)
		})
		fi.SetEnabled(false)
		// With the faults off, a request gets through (client-go retries the GET on a reset
		// from the last tick, if any).
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if c := tb.FaultCounts(); c.Resets < before+3 {
			t.Errorf("the testbed's counts %+v miss the member's resets", c)
		}
	})

	t.Run("HTTP faults", func(t *testing.T) {
		for _, tc := range []struct {
			code  int
			check func(error) bool
		}{
			{429, apierrors.IsTooManyRequests},
			{500, apierrors.IsInternalError},
			{503, apierrors.IsServiceUnavailable},
			{504, apierrors.IsTimeout},
		} {
			if err := fi.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, Codes: []int{tc.code}}}); err != nil {
				t.Fatal(err)
			}
			_, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/" + ns + "/configmaps/kept").MaxRetries(0).Do(ctx).Get()
			var st apierrors.APIStatus
			if !errors.As(err, &st) || int(st.Status().Code) != tc.code || !tc.check(err) || !fault.IsTransient(err) {
				t.Errorf("code %d: got %v", tc.code, err)
			}
			if secs, ok := apierrors.SuggestsClientDelay(err); tc.code == 429 && (!ok || secs != 1) {
				t.Errorf("429: suggests a delay of %ds (%v), want 1s", secs, ok)
			}
		}

		// A fraction of requests, counted exactly; the rest reach the API server.
		if err := fi.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 0.5}}); err != nil {
			t.Fatal(err)
		}
		before := fi.Counts()
		const n = 100
		failed := 0
		for range n {
			got, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/" + ns + "/configmaps/kept").MaxRetries(0).Do(ctx).Get()
			if err != nil {
				var st apierrors.APIStatus
				if !errors.As(err, &st) || !fault.IsTransient(err) {
					t.Fatalf("an injected answer: %v", err)
				}
				failed++
				continue
			}
			if c, ok := got.(*corev1.ConfigMap); !ok || c.Data["k"] != "v" {
				t.Fatalf("a forwarded GET returned %#v", got)
			}
		}
		after := fi.Counts()
		if d := after.HTTPFaults - before.HTTPFaults; d != int64(failed) {
			t.Errorf("%d requests failed, %d faults counted", failed, d)
		}
		if failed < n/5 || failed > n*4/5 {
			t.Errorf("%d of %d requests failed with a fraction of 0.5", failed, n)
		}
		t.Logf("fraction 0.5: %d of %d requests answered with a fault; member counts: %s", failed, n, after)

		// Mutating requests only: reads pass, writes get the fault.
		if err := fi.Set(testbed.Faults{HTTP: testbed.HTTPFaults{Fraction: 1, Codes: []int{503}, MutatingOnly: true}}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
			t.Errorf("a GET with mutating-only faults: %v", err)
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "refused"}}, metav1.CreateOptions{})
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("a create with mutating-only 503s: %v", err)
		}

		// Off: a real write and read pass.
		fi.SetEnabled(false)
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("faults off: %v", err)
		}
		if err := fi.Set(testbed.Faults{HTTPProxy: true}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("restart", func(t *testing.T) {
		direct := strings.TrimPrefix(m.DirectServer, "https://")
		certBefore := servingCertHash(t, direct, tb.CABundle())
		var old testbed.ProcessRecord
		for _, r := range tb.Processes() {
			if r.Name == "kube-apiserver/"+m.Name {
				old = r
			}
		}
		// A watch through the proxy, open across the restart.
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()

		done := m.BeginRestartAPIServer(ctx)
		// BeginRestartAPIServer returns once the old API server has exited.
		if testbed.Alive(old) {
			t.Errorf("the old API server (pid %d) is alive after BeginRestartAPIServer returned", old.PID)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(4 * time.Minute):
			t.Fatal("the API server was not ready again within 4 minutes")
		}
		var now testbed.ProcessRecord
		for _, r := range tb.Processes() {
			if r.Name == "kube-apiserver/"+m.Name {
				now = r
			}
		}
		if now.PID == 0 || now.PID == old.PID || !testbed.Alive(now) {
			t.Fatalf("after the restart: API server record %+v (before: %+v)", now, old)
		}
		// Same port and same serving certificate.
		if certAfter := servingCertHash(t, direct, tb.CABundle()); certAfter != certBefore {
			t.Error("the restarted API server serves another certificate")
		}
		// The watch opened before has ended.
		deadline := time.After(time.Minute)
	drain:
		for {
			select {
			case _, ok := <-w.ResultChan():
				if !ok {
					break drain
				}
			case <-deadline:
				t.Fatal("the watch through the proxy did not end with the restart")
			}
		}
		// The client made before the restart, through the proxy, works again with the same
		// data (same etcd, same prefix).
		poll(t, time.Minute, "a GET through the proxy after the restart", func() (bool, string) {
			got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return got.Data["k"] == "v", fmt.Sprint(got.Data)
		})
		// RestartAPIServer (blocking) too.
		if err := m.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		poll(t, time.Minute, "a GET through the proxy after the second restart", func() (bool, string) {
			_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "written", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		})
	})

	t.Run("stop leaves nothing", func(t *testing.T) {
		recs := tb.Processes()
		if len(recs) != 3 {
			t.Errorf("want etcd and 2 API servers, got %+v", recs)
		}
		if err := tb.Stop(); err != nil {
			t.Fatal(err)
		}
		testenv.AssertAllGone(t, recs)
		if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(m.Server, "https://"), time.Second); err == nil {
			conn.Close()
			t.Errorf("the member proxy still accepts connections on %s after Stop", m.Server)
		}
	})
}

// TestCLIUpWithMemberFaults starts a detached testbed with faults: the member proxy runs in
// its own process with the HTTP layer, injects both kinds of faults, and goes with `down`.
func TestCLIUpWithMemberFaults(t *testing.T) {
	rewind := buildRewind(t)
	dir := filepath.Join(t.TempDir(), "state")
	up := exec.Command(rewind, "testbed", "up", "--members", "1", "--workloads=false",
		"--member-reset-every", "2s", "--member-refuse-for", "500ms",
		"--member-http-faults", "0.5", "--member-http-fault-codes", "429,503", "--member-http-faults-mutating-only",
		"--state-dir", dir, "--bin-dir", binDir(t))
	testenv.StopStateOnInterrupt(t, dir) // registered first: up may be interrupted half way
	out, err := up.CombinedOutput()
	if err != nil {
		t.Fatalf("rewind testbed up: %v\n%s", err, out)
	}
	st, err := testbed.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	// etcd, 2 API servers and the member proxy.
	if len(st.Processes) != 4 {
		t.Fatalf("want 4 processes, got %+v", st.Processes)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Clusters[1].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Reads pass (client-go retries a GET cut by a reset).
	poll(t, time.Minute, "a GET through the detached proxy", func() (bool, string) {
		_, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	// Half of the writes get a 429 or a 503 Status.
	var statuses []int32
	for i := 0; len(statuses) == 0 && i < 40; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "default"}}
		err := cs.CoreV1().RESTClient().Post().AbsPath("/api/v1/namespaces/default/configmaps").Body(cm).MaxRetries(0).Do(ctx).Error()
		var s apierrors.APIStatus
		if errors.As(err, &s) {
			statuses = append(statuses, s.Status().Code)
		}
	}
	if len(statuses) == 0 || (statuses[0] != 429 && statuses[0] != 503) {
		t.Errorf("no write was answered with a 429 or a 503 (statuses: %v)", statuses)
	}
	downOut, err := exec.Command(rewind, "testbed", "down", "--state-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("rewind testbed down: %v\n%s", err, downOut)
	}
	testenv.AssertAllGone(t, st.Processes)
}
