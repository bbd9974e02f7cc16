//go:build !unit

package testbed_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

func TestMemberLatency(t *testing.T) {
	const latency = 25 * time.Millisecond
	tb, err := testbed.Start(t.Context(), testbed.Options{Members: 1, MemberLatency: latency, BinDir: binDir(t), Log: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Stop() })
	m := tb.Members[0]
	if m.DirectServer == "" || m.Server == m.DirectServer {
		t.Fatalf("the member must be reached through the proxy: server %s, direct %s", m.Server, m.DirectServer)
	}
	if tb.Hub.DirectServer != "" {
		t.Errorf("the hub must be reached directly, it has a proxy in front of %s", tb.Hub.DirectServer)
	}
	kc, err := m.KubeconfigBytes()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kc), "server: "+m.Server+"\n") {
		t.Errorf("the kubeconfig must point at the proxy %s:\n%s", m.Server, kc)
	}
	// The request and its response are each delayed: at least one round trip of 2*latency.
	// The fastest of several requests on a warm connection is what the network adds. The TLS
	// handshake through the proxy checks the serving certificate against the proxy's address.
	slow := fastestVersionGET(t, m.RESTConfig())
	fast := fastestVersionGET(t, env.Members[0].RESTConfig())
	hub := fastestVersionGET(t, tb.Hub.RESTConfig())
	t.Logf("GET /version: %s through the %s proxy, %s to a member without latency, %s to the hub", slow, latency, fast, hub)
	if slow < 2*latency {
		t.Errorf("GET /version through the proxy took %s, want >= %s", slow, 2*latency)
	}
	if fast >= latency || hub >= latency {
		t.Errorf("GET /version without latency took %s (member) and %s (hub), want < %s", fast, hub, latency)
	}
	recs := tb.Processes()
	if err := tb.Stop(); err != nil {
		t.Fatal(err)
	}
	testenv.AssertAllGone(t, recs)
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(m.Server, "https://"), time.Second); err == nil {
		conn.Close()
		t.Errorf("the proxy still accepts connections on %s after Stop", m.Server)
	}
}
