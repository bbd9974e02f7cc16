package testbed

import (
	"fmt"
	"io"
	"strconv"
)

// FaultProxy is a fault proxy in front of one cluster's API server, started by a test
// (Cluster.StartFaultProxy): for the way from a member's agent to the hub, which the member
// proxy (Options.MemberFaults) does not cover.
type FaultProxy struct {
	// Server is the proxy's URL, in place of the cluster's.
	Server string

	p *memberProxy
}

// StartFaultProxy starts a fault proxy (the member proxy's TCP and HTTP layers, in process)
// in front of the cluster's API server, injecting f from the start; Faults changes them at run
// time. The test stops it with Close.
func (c *Cluster) StartFaultProxy(f Faults) (*FaultProxy, error) {
	f.HTTPProxy = true // so that HTTP faults can be turned on at run time
	tlsCfg, err := c.tb.pki.proxyTLS(c.Name + "-fault-proxy")
	if err != nil {
		return nil, fmt.Errorf("testbed: fault proxy certificate: %w", err)
	}
	cfg := ProxyConfig{Faults: f, Routes: []ProxyRoute{{Listen: "127.0.0.1:0", Target: "127.0.0.1:" + strconv.Itoa(c.port)}}}
	p, err := startMemberProxy(cfg, []string{c.Name}, tlsCfg, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("testbed: fault proxy in front of %s: %w", c.Name, err)
	}
	return &FaultProxy{Server: "https://" + p.addrs[0], p: p}, nil
}

// Faults controls the proxy's faults and counts them.
func (p *FaultProxy) Faults() *FaultInjector { return p.p.injectors[0] }

// Close stops the proxy and ends its connections.
func (p *FaultProxy) Close() { p.p.Close() }
