package preflight

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Converter converts custom resources between the versions of a CRD as the CRD's
// spec.conversion says.
type Converter interface {
	// Convert returns obj (not changed) at version toVersion of crd.
	Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any, toVersion string) (map[string]any, error)
}

// ErrConversionNotVerified: the CRD converts through a webhook and no way to call it was given.
// Such a conversion is reported as not verified, never as safe.
var ErrConversionNotVerified = errors.New("the CRD converts through a webhook that cannot be called here")

// Conversion converts as the API server does: strategy None rewrites apiVersion; strategy
// Webhook calls Webhook (ErrConversionNotVerified when it is nil).
type Conversion struct {
	// Webhook calls a CRD's conversion webhook; nil when none can be called.
	Webhook Converter
}

// Convert implements Converter.
func (c Conversion) Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any, toVersion string) (map[string]any, error) {
	to := crd.Spec.Group + "/" + toVersion
	if apiVersion, _ := obj["apiVersion"].(string); apiVersion == to {
		return deepCopy(obj), nil
	}
	if crd.Spec.Conversion == nil || crd.Spec.Conversion.Strategy == apiextensionsv1.NoneConverter || crd.Spec.Conversion.Strategy == "" {
		out := deepCopy(obj)
		out["apiVersion"] = to
		return out, nil
	}
	if c.Webhook == nil {
		return nil, ErrConversionNotVerified
	}
	return c.Webhook.Convert(ctx, crd, obj, toVersion)
}

// WebhookClient calls a conversion webhook at URL with a ConversionReview (apiextensions.k8s.io/v1),
// as the API server does.
type WebhookClient struct {
	// URL of the webhook (https://host:port/path).
	URL string
	// Client makes the request (its transport trusts the webhook's CA); http.DefaultClient when nil.
	Client *http.Client
}

// WebhookError is a conversion the webhook refused or answered wrongly.
type WebhookError struct {
	URL    string
	Reason string
}

func (e *WebhookError) Error() string {
	return fmt.Sprintf("conversion webhook %s: %s", e.URL, e.Reason)
}

// Convert implements Converter.
func (w WebhookClient) Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any, toVersion string) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	review := apiextensionsv1.ConversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "ConversionReview"},
		Request: &apiextensionsv1.ConversionRequest{
			UID:               types.UID(uuid.NewUUID()),
			DesiredAPIVersion: crd.Spec.Group + "/" + toVersion,
			Objects:           []runtime.RawExtension{{Raw: raw}},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("conversion webhook URL %q: %w", w.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := w.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling conversion webhook %s: %w", w.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of conversion webhook %s: %w", w.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &WebhookError{URL: w.URL, Reason: fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	var answer apiextensionsv1.ConversionReview
	if err := json.Unmarshal(data, &answer); err != nil {
		return nil, &WebhookError{URL: w.URL, Reason: "the answer is not a ConversionReview: " + err.Error()}
	}
	r := answer.Response
	switch {
	case r == nil:
		return nil, &WebhookError{URL: w.URL, Reason: "the ConversionReview has no response"}
	case r.UID != review.Request.UID:
		return nil, &WebhookError{URL: w.URL, Reason: "the response's uid is not the request's"}
	case r.Result.Status != metav1.StatusSuccess:
		return nil, &WebhookError{URL: w.URL, Reason: "conversion failed: " + r.Result.Message}
	case len(r.ConvertedObjects) != 1:
		return nil, &WebhookError{URL: w.URL, Reason: fmt.Sprintf("%d converted objects for 1 sent", len(r.ConvertedObjects))}
	}
	out := &unstructured.Unstructured{}
	if err := out.UnmarshalJSON(r.ConvertedObjects[0].Raw); err != nil {
		return nil, &WebhookError{URL: w.URL, Reason: "the converted object does not decode: " + err.Error()}
	}
	if out.GetAPIVersion() != review.Request.DesiredAPIVersion {
		return nil, &WebhookError{URL: w.URL, Reason: fmt.Sprintf("converted to %s, not %s", out.GetAPIVersion(), review.Request.DesiredAPIVersion)}
	}
	return out.Object, nil
}

// ClientConfigWebhook calls the conversion webhook a CRD's spec.conversion.webhook.clientConfig
// names by URL, over TLS that trusts the clientConfig's caBundle (the system's roots when it
// has none), as the API server would. A webhook named by a Service lives in the member's
// network and is not called from outside it; a webhook that cannot be reached, or that speaks
// no ConversionReview v1: ErrConversionNotVerified, reported as not verified, never as safe.
type ClientConfigWebhook struct {
	// Timeout bounds one call (default 10s, the API server's default for conversion webhooks).
	Timeout time.Duration

	mu      sync.Mutex
	clients map[string]*http.Client
	// down holds, by URL, why a webhook could not be called: it is not called again (one
	// timeout per webhook, not one per object).
	down map[string]error
}

// Convert implements Converter.
func (w *ClientConfigWebhook) Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, obj map[string]any, toVersion string) (map[string]any, error) {
	conv := crd.Spec.Conversion
	if conv == nil || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return nil, fmt.Errorf("%w: CRD %s names no webhook clientConfig", ErrConversionNotVerified, crd.Name)
	}
	cc := conv.Webhook.ClientConfig
	if cc.URL == nil {
		where := ""
		if cc.Service != nil {
			where = fmt.Sprintf(" (Service %s/%s)", cc.Service.Namespace, cc.Service.Name)
		}
		return nil, fmt.Errorf("%w: CRD %s's webhook is a Service of the member%s, not reachable from here", ErrConversionNotVerified, crd.Name, where)
	}
	if !slices.Contains(conv.Webhook.ConversionReviewVersions, "v1") {
		return nil, fmt.Errorf("%w: CRD %s's webhook speaks ConversionReview %v, not v1", ErrConversionNotVerified, crd.Name, conv.Webhook.ConversionReviewVersions)
	}
	hc, err := w.client(cc.CABundle)
	if err != nil {
		return nil, fmt.Errorf("%w: CRD %s: %v", ErrConversionNotVerified, crd.Name, err)
	}
	w.mu.Lock()
	down := w.down[*cc.URL]
	w.mu.Unlock()
	if down != nil {
		return nil, down
	}
	out, err := WebhookClient{URL: *cc.URL, Client: hc}.Convert(ctx, crd, obj, toVersion)
	var werr *WebhookError
	switch {
	case err == nil, errors.As(err, &werr), ctx.Err() != nil:
		// Converted, or the webhook answered and refused (a finding); a context that ended
		// ends the plan.
		return out, err
	}
	// Not reached, refused the connection or the TLS handshake, timed out: not verified.
	err = fmt.Errorf("%w: %v", ErrConversionNotVerified, err)
	w.mu.Lock()
	if w.down == nil {
		w.down = map[string]error{}
	}
	w.down[*cc.URL] = err
	w.mu.Unlock()
	return nil, err
}

// client returns the HTTP client that trusts caBundle, one per bundle.
func (w *ClientConfigWebhook) client(caBundle []byte) (*http.Client, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.clients[string(caBundle)]; ok {
		return c, nil
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("the webhook's caBundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil}}
	if w.clients == nil {
		w.clients = map[string]*http.Client{}
	}
	w.clients[string(caBundle)] = c
	return c, nil
}
