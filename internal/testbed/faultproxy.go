package testbed

import (
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"strconv"

	"k8s.io/client-go/rest"
)

// FaultProxy is a fault proxy in front of one cluster's API server, started by a test
// (Cluster.StartFaultProxy): for the way from a member's agent to the hub, which the member
// proxy (Options.MemberFaults) does not cover.
type FaultProxy struct {
	// Server is the proxy's URL, in place of the cluster's.
	Server string

	c *Cluster
	p *memberProxy
}

// StartFaultProxy starts a fault proxy (the member proxy's TCP and HTTP layers, in process)
// in front of the cluster's API server, injecting f from the start; Faults changes them at run
// time. The test stops it with Close.
func (c *Cluster) StartFaultProxy(f Faults) (*FaultProxy, error) {
	f.HTTPProxy = true // so that HTTP faults can be turned on at run time
	cert, _, _, err := c.tb.pki.ca.Issue(c.Name+"-fault-proxy", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, fmt.Errorf("testbed: fault proxy certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.tb.pki.ca.PEM)
	cfg := ProxyConfig{Faults: f, Routes: []ProxyRoute{{Listen: "127.0.0.1:0", Target: "127.0.0.1:" + strconv.Itoa(c.port)}}}
	p, err := startMemberProxy(cfg, []string{c.Name}, &proxyTLS{cert: *cert, roots: roots}, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("testbed: fault proxy in front of %s: %w", c.Name, err)
	}
	return &FaultProxy{Server: "https://" + p.addrs[0], c: c, p: p}, nil
}

// Faults controls the proxy's faults and counts them.
func (p *FaultProxy) Faults() *FaultInjector { return p.p.injectors[0] }

// RESTConfig is the cluster's admin configuration through the proxy.
func (p *FaultProxy) RESTConfig() *rest.Config {
	cfg := p.c.directRESTConfig()
	cfg.Host = p.Server
	return cfg
}

// Close stops the proxy and ends its connections.
func (p *FaultProxy) Close() { p.p.Close() }
