package testbed

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/rewind-dev/rewind/internal/testbed/certs"
)

// pki holds the key material of one testbed: a CA that signs every serving certificate, the
// service-account key pair shared by the API servers, and the static admin token.
type pki struct {
	ca        *certs.CA
	adminTok  string
	dir       string
	saPubKey  string
	saPrivKey string
	tokenFile string
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	ca, err := certs.NewCA("rewind-testbed-ca")
	if err != nil {
		return nil, err
	}
	p.ca = ca
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), p.ca.PEM, 0o600); err != nil {
		return nil, err
	}

	// Service-account signing key pair (RSA, as the API server expects by default).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	p.saPrivKey = filepath.Join(dir, "sa.key")
	p.saPubKey = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saPrivKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}), 0o600); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPubKey, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o600); err != nil {
		return nil, err
	}

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.adminTok = hex.EncodeToString(tok)
	p.tokenFile = filepath.Join(dir, "tokens.csv")
	line := fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", p.adminTok)
	if err := os.WriteFile(p.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// servingCert writes a certificate for 127.0.0.1 and localhost signed by the CA and returns
// the certificate and key file paths.
func (p *pki) servingCert(name string) (certFile, keyFile string, err error) {
	_, certPEM, keyPEM, err := p.ca.Issue(name, []string{"localhost", name}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(p.dir, name+".crt")
	keyFile = filepath.Join(p.dir, name+".key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ServingCert issues a serving certificate for 127.0.0.1/localhost signed by the testbed CA,
// for servers that the testbed's API servers must call (conversion and admission webhooks).
// It returns PEM-encoded certificate and key.
func (t *Testbed) ServingCert(name string) (certPEM, keyPEM []byte, err error) {
	certFile, keyFile, err := t.pki.servingCert(name)
	if err != nil {
		return nil, nil, err
	}
	if certPEM, err = os.ReadFile(certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// caFile is the path of the PEM CA certificate.
func (p *pki) caFile() string { return filepath.Join(p.dir, "ca.crt") }

// CABundle is the PEM CA certificate that signed every serving certificate of the testbed.
func (t *Testbed) CABundle() []byte { return append([]byte(nil), t.pki.ca.PEM...) }

// proxyTLS issues an in-process fault proxy's serving certificate (for 127.0.0.1, localhost
// and name) and the roots it checks the API servers with.
func (p *pki) proxyTLS(name string) (*proxyTLS, error) {
	cert, _, _, err := p.ca.Issue(name, []string{"localhost", name}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.ca.PEM)
	return &proxyTLS{cert: *cert, roots: roots}, nil
}
