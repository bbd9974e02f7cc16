package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// DefaultTimeout bounds one delivery attempt when the destination sets none.
const DefaultTimeout = 10 * time.Second

// Target is a resolved destination: where to POST and with which token. It is never logged.
type Target struct {
	Type    string
	URL     string
	Token   string
	Timeout time.Duration
}

// String hides the URL and token.
func (t Target) String() string { return t.Type + " destination" }

// InputError is a destination that cannot be used as it is: a missing Secret or key, a URL
// that is not an absolute http(s) URL. Field names the policy field; the message says the fix.
type InputError struct {
	Reason string
	Field  string
	Msg    string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Resolve reads a destination's Secrets (in namespace ns) through r. A missing Secret or key,
// or a bad URL, is an *InputError; another error is the API server's (retried).
func Resolve(ctx context.Context, r client.Reader, ns string, i int, d *v1alpha1.NotificationDestination) (Target, error) {
	field := fmt.Sprintf("spec.destinations[%d]", i)
	u, err := secretValue(ctx, r, ns, d.URLSecretRef, field+".urlSecretRef")
	if err != nil {
		return Target{}, err
	}
	u = strings.TrimSpace(u)
	parsed, perr := url.Parse(u)
	if perr != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
		// The value is a secret: the message never quotes it.
		return Target{}, &InputError{Reason: v1alpha1.ReasonInvalidURL, Field: field + ".urlSecretRef",
			Msg: fmt.Sprintf("key %q of Secret %s/%s does not hold an absolute http:// or https:// URL; put the receiver's URL there", keyOf(d.URLSecretRef), ns, d.URLSecretRef.Name)}
	}
	t := Target{Type: d.Type, URL: u, Timeout: DefaultTimeout}
	if d.Timeout != nil && d.Timeout.Duration > 0 {
		t.Timeout = d.Timeout.Duration
	}
	if d.TokenSecretRef != nil {
		tok, err := secretValue(ctx, r, ns, *d.TokenSecretRef, field+".tokenSecretRef")
		if err != nil {
			return Target{}, err
		}
		t.Token = strings.TrimSpace(tok)
	}
	return t, nil
}

func keyOf(ref v1alpha1.SecretKeyReference) string {
	if ref.Key == "" {
		return "key"
	}
	return ref.Key
}

func secretValue(ctx context.Context, r client.Reader, ns string, ref v1alpha1.SecretKeyReference, field string) (string, error) {
	sec := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return "", &InputError{Reason: v1alpha1.ReasonNotificationSecretNotFound, Field: field + ".name",
				Msg: fmt.Sprintf("Secret %s/%s not found; create it (kubectl create secret generic %s -n %s --from-literal=%s=...) or name an existing one", ns, ref.Name, ref.Name, ns, keyOf(ref))}
		}
		return "", fmt.Errorf("reading Secret %s/%s: %w", ns, ref.Name, err)
	}
	v, ok := sec.Data[keyOf(ref)]
	if !ok || len(bytes.TrimSpace(v)) == 0 {
		keys := make([]string, 0, len(sec.Data))
		for k := range sec.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return "", &InputError{Reason: v1alpha1.ReasonNotificationSecretNotFound, Field: field + ".key",
			Msg: fmt.Sprintf("Secret %s/%s has no key %q (it has %s); name one of its keys or add the key", ns, ref.Name, keyOf(ref), strings.Join(keys, ", "))}
	}
	return string(v), nil
}

// SendError is a failed delivery attempt. Its message never holds the URL nor the token.
type SendError struct {
	// Status is the receiver's HTTP status (0: no answer).
	Status int
	// Timeout says the attempt timed out.
	Timeout bool
	msg     string
}

func (e *SendError) Error() string { return e.msg }

// Send POSTs one notification to a target with its idempotency key in the
// Idempotency-Key header. Any 2xx answer is a delivery.
func Send(ctx context.Context, hc *http.Client, t Target, key string, body []byte, contentType string) error {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return &SendError{msg: "building the request failed (check the URL)"}
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set(v1alpha1.HeaderIdempotencyKey, key)
	req.Header.Set("User-Agent", "rewind-notifications")
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// *url.Error quotes the URL (which may hold a token, as Slack's do): only its cause is
		// kept.
		var ue *url.Error
		cause := err
		if errors.As(err, &ue) {
			cause = ue.Err
		}
		timeout := errors.Is(err, context.DeadlineExceeded) || (ue != nil && ue.Timeout())
		msg := "no answer: " + describe(cause)
		if timeout {
			msg = fmt.Sprintf("no answer within %s (timeout)", t.Timeout)
		}
		return &SendError{Timeout: timeout, msg: msg}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &SendError{Status: resp.StatusCode, msg: fmt.Sprintf("the receiver answered %s", resp.Status)}
	}
	return nil
}

// Backoff is the wait after the n-th failed attempt (n >= 1): 1s, 2s, 4s, ... up to 5m.
func Backoff(n int32) time.Duration {
	d := time.Second
	for i := int32(1); i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// MaxAttempts is how many times a notification is tried before it is given up (about an
// hour of backoff).
const MaxAttempts = 16

func parseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339, s) }

// describe says why a request got no answer without quoting the address (a URL may be a
// credential; the host names the receiver).
func describe(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return "the host name does not resolve"
	case errors.As(err, &op) && op.Err != nil:
		return op.Op + ": " + describe(op.Err)
	}
	var sc *os.SyscallError
	if errors.As(err, &sc) {
		return sc.Err.Error()
	}
	return err.Error()
}
