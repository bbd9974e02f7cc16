package testbed

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// injectedBy ends the message of every injected status, so that a log line says where it
// came from.
const injectedBy = "(injected by the testbed's fault proxy)"

// proxyTLS is what the HTTP proxy needs: its serving certificate (for 127.0.0.1) and the CA
// that signed the API servers' certificates.
type proxyTLS struct {
	cert  tls.Certificate
	roots *x509.CertPool
}

// loadProxyTLS reads PEM files (as `rewind testbed proxy` gets them).
func loadProxyTLS(certFile, keyFile, caFile string) (*proxyTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("proxy serving certificate: %w", err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("proxy CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("proxy CA %s holds no PEM certificate", caFile)
	}
	return &proxyTLS{cert: cert, roots: roots}, nil
}

// httpFaultProxy terminates TLS on a loopback port and forwards each request to a member's
// API server, except those its FaultInjector answers with an error status. Watches and
// other long responses are streamed (every write flushed at once); the client's
// Authorization header is forwarded as is.
type httpFaultProxy struct {
	faults *FaultInjector
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	srv    *http.Server
	addr   string
	done   chan struct{}
}

// startHTTPFaultProxy serves on a new loopback port and forwards to the API server at target
// (host:port, HTTPS).
func startHTTPFaultProxy(faults *FaultInjector, target string, t *proxyTLS, logw io.Writer) (*httpFaultProxy, error) {
	u := &url.URL{Scheme: "https", Host: target}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       &tls.Config{RootCAs: t.roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	logger := log.New(logw, "fault-proxy "+faults.name+": ", log.LstdFlags)
	h := &httpFaultProxy{faults: faults, tr: tr, done: make(chan struct{})}
	h.rp = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(u) },
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      logger,
		ErrorHandler:  h.upstreamError,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h.addr = l.Addr().String()
	h.srv = &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{t.cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          logger,
	}
	go func() {
		defer close(h.done)
		// ServeTLS speaks HTTP/2 as the API server does (client-go multiplexes every request
		// to a member on one connection, so a reset cuts them all at once).
		if err := h.srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("serving: %v", err)
		}
	}()
	return h, nil
}

// ServeHTTP answers a fault or forwards the request.
func (h *httpFaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, faults, ok := h.faults.httpFault(r)
	switch {
	case ok && faults.LoseAnswers:
		if !isWatch(r) {
			// Sent on and acted on; the answer goes nowhere.
			h.rp.ServeHTTP(httptest.NewRecorder(), r)
		}
		panic(http.ErrAbortHandler) // resets the stream: the client sees no answer
	case ok:
		writeStatus(w, faultStatus(code, r.Method, faults.retryAfterSeconds()))
	default:
		h.rp.ServeHTTP(w, r)
	}
}

// upstreamError answers a request the API server could not be asked (it is down or
// restarting) as a gateway does: 503 ServiceUnavailable. A request the client gave up on
// gets nothing.
func (h *httpFaultProxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	writeStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("the fault proxy could not reach the API server of %s: %v", h.faults.name, err)).Status())
}

// close stops serving, ends every connection and waits until the server has returned.
func (h *httpFaultProxy) close() {
	_ = h.srv.Close()
	<-h.done
	h.tr.CloseIdleConnections()
}

// faultStatus is the status the API server (or client-go, for an unexpected response) gives
// for code.
func faultStatus(code int, verb string, retryAfterSeconds int) metav1.Status {
	var err *apierrors.StatusError
	switch code {
	case http.StatusTooManyRequests:
		err = apierrors.NewTooManyRequests("Too many requests, please try again later "+injectedBy+".", retryAfterSeconds)
	case http.StatusInternalServerError:
		err = apierrors.NewInternalError(errors.New("etcdserver: request timed out " + injectedBy))
	case http.StatusServiceUnavailable:
		err = apierrors.NewServiceUnavailable("the API server is shutting down or not ready " + injectedBy)
	case http.StatusGatewayTimeout:
		err = apierrors.NewTimeoutError("request did not complete within the allotted timeout "+injectedBy, 0)
	default:
		err = apierrors.NewGenericServerResponse(code, verb, schema.GroupResource{}, "", "the server failed "+injectedBy, 0, true)
	}
	return err.Status()
}

// writeStatus writes st as the API server does: JSON, its code, and Retry-After when it has
// one.
func writeStatus(w http.ResponseWriter, st metav1.Status) {
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	st.Status = metav1.StatusFailure
	b, err := json.Marshal(st)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, private")
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(b)
}

// isWatch says whether r asks for a watch (?watch=true or 1, or a legacy /watch/ path), which
// never ends by itself.
func isWatch(r *http.Request) bool {
	if w, err := strconv.ParseBool(r.URL.Query().Get("watch")); err == nil && w {
		return true
	}
	seg := strings.Split(r.URL.Path, "/") // "", "api", "v1", "watch", ... or "", "apis", group, version, "watch", ...
	return (len(seg) > 3 && seg[1] == "api" && seg[3] == "watch") || (len(seg) > 4 && seg[1] == "apis" && seg[4] == "watch")
}
