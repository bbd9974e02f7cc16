package runner

import (
	"crypto/tls"
	"encoding/base64"
	"net"
	"sync"

	"github.com/rewind-dev/rewind/internal/testbed/certs"
)

// authority issues the webhook serving certificates, one per TLS server name, on first use.
type authority struct {
	ca     *certs.CA
	mu     sync.Mutex
	issued map[string]*tls.Certificate
}

func newAuthority() (*authority, error) {
	ca, err := certs.NewCA("rewind testbed runner CA")
	if err != nil {
		return nil, err
	}
	return &authority{ca: ca, issued: map[string]*tls.Certificate{}}, nil
}

func (a *authority) bundleBase64() string { return base64.StdEncoding.EncodeToString(a.ca.PEM) }

// getCertificate returns a certificate for the name the client asks for (the webhook Service's
// DNS name, <service>.<namespace>.svc, as API servers send it).
func (a *authority) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := hello.ServerName
	if name == "" {
		name = "localhost"
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.issued[name]; ok {
		return c, nil
	}
	var dns []string
	var ips []net.IP
	if ip := net.ParseIP(name); ip != nil {
		ips = []net.IP{ip}
	} else {
		dns = []string{name}
	}
	c, _, _, err := a.ca.Issue(name, dns, ips)
	if err != nil {
		return nil, err
	}
	a.issued[name] = c
	return c, nil
}
