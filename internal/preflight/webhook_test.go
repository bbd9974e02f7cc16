package preflight

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/rewind-dev/rewind/examples/mysql-operator/operator"
)

// The release's webhook, named by URL with a caBundle, is called over TLS as the API server
// would call it; every webhook that cannot be called (a Service, a CA that does not sign its
// certificate, nothing listening, no v1 reviews) is reported not verified, never safe.
func TestClientConfigWebhook(t *testing.T) {
	_, v2, v3 := mysqlCRDs(t)
	good := httptest.NewTLSServer(operator.ConversionHandler())
	defer good.Close()
	lossy := httptest.NewTLSServer(lossyWebhook(t))
	defer lossy.Close()
	gone := httptest.NewTLSServer(operator.ConversionHandler())
	goneURL, goneCA := gone.URL, caOf(gone)
	gone.Close()

	withClient := func(cc apiextensionsv1.WebhookClientConfig, reviews ...string) *apiextensionsv1.CustomResourceDefinition {
		crd := v3.DeepCopy()
		if len(reviews) == 0 {
			reviews = []string{"v1"}
		}
		crd.Spec.Conversion.Webhook = &apiextensionsv1.WebhookConversion{ConversionReviewVersions: reviews, ClientConfig: &cc}
		return crd
	}
	url := func(s string) *string { return &s }
	cases := []struct {
		name string
		crd  *apiextensionsv1.CustomResourceDefinition
		want []string
		// why is in the error of a direct call.
		why string
	}{
		{name: "the operator's webhook: exact", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(good.URL + "/convert"), CABundle: caOf(good)})},
		{name: "a webhook that drops spec.config on the way back", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(lossy.URL + "/convert"), CABundle: caOf(lossy)}),
			want: []string{"warning FieldLost shop/orders .spec.config"}},
		{name: "a Service of the member", crd: v3,
			want: []string{"warning ConversionNotVerified shop/orders "}, why: "Service mysql-operator/mysql-operator-webhook"},
		{name: "a caBundle that does not sign the webhook's certificate", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(lossy.URL), CABundle: otherCA(t)}),
			want: []string{"warning ConversionNotVerified shop/orders "}, why: "certificate"},
		{name: "nothing listening", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(goneURL), CABundle: goneCA}),
			want: []string{"warning ConversionNotVerified shop/orders "}, why: "calling conversion webhook"},
		{name: "a caBundle that is not PEM", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(good.URL), CABundle: []byte("nope")}),
			want: []string{"warning ConversionNotVerified shop/orders "}, why: "no PEM certificate"},
		{name: "no ConversionReview v1", crd: withClient(apiextensionsv1.WebhookClientConfig{URL: url(good.URL), CABundle: caOf(good)}, "v1beta1"),
			want: []string{"warning ConversionNotVerified shop/orders "}, why: "not v1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conv := Conversion{Webhook: &ClientConfigWebhook{}}
			got, err := RoundTrip(context.Background(), v2, tc.crd, mysqlObjects(t, "v1beta1"), conv)
			if err != nil {
				t.Fatal(err)
			}
			if g := objectKeys(got); strings.Join(g, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("findings:\n%s\nwant:\n%s", findingLines(got), strings.Join(tc.want, "\n"))
			}
			if tc.why == "" {
				return
			}
			_, err = conv.Convert(context.Background(), tc.crd, mysqlObjects(t, "v1beta1")[0].Object, "v1")
			if err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), ErrConversionNotVerified.Error()) {
				t.Errorf("a direct call: %v, want ErrConversionNotVerified saying %q", err, tc.why)
			}
		})
	}
}

// otherCA is the PEM of a CA of its own, which signs no test server's certificate (they all
// share httptest's).
func otherCA(t *testing.T) []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the webhook's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// caOf is the PEM of the test server's certificate (self-signed: its own CA).
func caOf(s *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

// A webhook that cannot be reached is tried once, not once per object: a plan of thousands of
// objects does not wait a timeout for each.
func TestClientConfigWebhookDownIsCalledOnce(t *testing.T) {
	_, v2, v3 := mysqlCRDs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close() // no TLS handshake
		}
	}()
	crd := v3.DeepCopy()
	u := "https://" + ln.Addr().String() + "/convert"
	crd.Spec.Conversion.Webhook.ClientConfig = &apiextensionsv1.WebhookClientConfig{URL: &u, CABundle: otherCA(t)}
	got, err := RoundTrip(context.Background(), v2, crd, mysqlObjects(t, "v1beta1"), Conversion{Webhook: &ClientConfigWebhook{}})
	if err != nil {
		t.Fatal(err)
	}
	if g := objectKeys(got); strings.Join(g, ",") != "warning ConversionNotVerified shop/orders " || !strings.Contains(got[0].Message, "2 objects") {
		t.Errorf("findings:\n%s", findingLines(got))
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("the webhook that hung up was called %d times for 2 objects, want once", n)
	}
}
