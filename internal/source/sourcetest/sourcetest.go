// Package sourcetest starts real release sources for tests, in process and on loopback: an OCI
// registry (go-containerregistry's) that charts are pushed to with the Helm SDK's OCI client
// and bundle images with go-containerregistry, a Helm chart repository over HTTPS (index.yaml
// and .tgz made with the Helm SDK), and Git repositories served over smart HTTP by git
// http-backend. Every server speaks TLS with its own CA (CA gives it as PEM, for the ca.crt
// of a credentials Secret) and can require basic auth or a bearer token.
//
// Only tests import it.
package sourcetest

import (
	"crypto/subtle"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Auth is what a server requires; the zero value requires nothing.
type Auth struct {
	// Username and Password for basic auth.
	Username, Password string
	// Token is accepted as a bearer token.
	Token string
}

func (a Auth) none() bool { return a.Username == "" && a.Token == "" }

// wrap answers 401 (with a Basic challenge) to a request without the credentials of a.
func (a Auth) wrap(h http.Handler) http.Handler {
	if a.none() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); ok && a.Username != "" &&
			subtle.ConstantTimeCompare([]byte(user), []byte(a.Username)) == 1 && subtle.ConstantTimeCompare([]byte(pass), []byte(a.Password)) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && a.Token != "" &&
			subtle.ConstantTimeCompare([]byte(tok), []byte(a.Token)) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="rewind-test"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

// server is an httptest TLS server and the PEM of its CA.
type server struct {
	srv *httptest.Server
	ca  []byte
}

func startTLS(t testing.TB, h http.Handler) server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// Clients that do not trust the CA are part of the tests: no log line for each.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cert := srv.Certificate()
	return server{srv: srv, ca: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}
}

// CA is the PEM certificate that signs the server's (the ca.crt of a credentials Secret).
func (s server) CA() []byte { return s.ca }

// URL is https://127.0.0.1:PORT.
func (s server) URL() string { return s.srv.URL }

// Host is 127.0.0.1:PORT.
func (s server) Host() string {
	return strings.TrimPrefix(strings.TrimPrefix(s.srv.URL, "https://"), "http://")
}

// Client is an HTTP client that trusts the server (and sends no credentials).
func (s server) Client() *http.Client { return s.srv.Client() }

// Pool is a certificate pool with the server's CA.
func (s server) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(s.srv.Certificate())
	return pool
}
