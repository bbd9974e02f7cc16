// Package fault tells a fault of the world (a reset connection, a timeout, a throttled
// request, an API server restarting or an etcd leader change) from a failure of what rewind
// asked for (a refused write, a missing object, a denied permission). A fault is retried in
// place with backoff and jitter; it is never a verdict on a release.
//
// Errors are classified by their types only (apimachinery's API statuses, net.Error and the
// syscall errors it wraps, *url.Error and its cause, context errors, x/net/http2's stream and
// GOAWAY errors), never by their text.
package fault

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"golang.org/x/net/http2"
	"google.golang.org/api/googleapi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// IsTransient says whether err is a fault that a retry of the same request may get past:
//   - an API status of 429 (throttled, with or without Retry-After), 500 (an internal error:
//     "etcdserver: leader changed", a webhook that timed out or could not be called), 502, 503
//     or 504 (a server timeout, or a gateway in front of the API server);
//   - a transport error: a connection refused, reset or aborted, a broken pipe, an unexpected
//     end of file, a network or host unreachable, a timeout (dial, TLS handshake, response
//     headers, client timeout), a DNS lookup that failed, an HTTP/2 GOAWAY or stream reset;
//   - the same statuses answered by a snapshot store's or a KMS's cloud service (the AWS, Google
//     and Azure SDKs' response errors, wrapped by gocloud.dev), and the AWS SDK's throttling
//     and request-timeout error codes (cloudStatus);
//   - a request whose own deadline passed (context.DeadlineExceeded), for the caller decides
//     separately whether its own context ended.
//
// Not transient: any other API status (400, 401, 403, 404, 409, 410, 422: the server
// answered, and the same request gets the same answer), context.Canceled, and a TLS or
// certificate error that only a change of configuration fixes (an unknown authority, a name
// the certificate does not cover, a server that does not speak TLS).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return transientCode(status.Status().Code)
	}
	if code, ok := cloudStatus(err); ok {
		return code
	}
	if isConfigTLS(err) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrHandlerTimeout) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var (
		netErr    net.Error
		opErr     *net.OpError
		dnsErr    *net.DNSError
		goAway    http2.GoAwayError
		streamErr http2.StreamError
		connErr   http2.ConnectionError
		urlErr    *url.Error
	)
	switch {
	case errors.As(err, &netErr) && netErr.Timeout(),
		errors.As(err, &opErr), errors.As(err, &dnsErr),
		errors.As(err, &goAway), errors.As(err, &streamErr), errors.As(err, &connErr):
		return true
	case errors.As(err, &urlErr):
		// The request got no HTTP answer: the transport failed (a connection lost mid-request
		// surfaces as an unexported error of net/http's HTTP/2 transport). Configuration errors
		// were ruled out above.
		return true
	}
	return false
}

// cloudStatus classifies an answer of a snapshot store's or a KMS's service, told by the types of
// the cloud SDKs that gocloud.dev's drivers wrap (each a wrapped cause of a *gcerr.Error): the
// AWS SDK's API error codes for throttling and request timeouts (an S3 SlowDown, a KMS
// ThrottlingException, answered 400 or 503: aws/retry's own tables), and the HTTP status of an
// AWS, Google or Azure answer of 400 or more, and the gRPC status of a Google Cloud KMS. ok is
// false when err holds none of these.
func cloudStatus(err error) (transient, ok bool) {
	var api smithy.APIError
	if errors.As(err, &api) {
		code := api.ErrorCode()
		_, throttled := retry.DefaultThrottleErrorCodes[code]
		_, timedOut := retry.DefaultRetryableErrorCodes[code]
		if throttled || timedOut {
			return true, true
		}
	}
	var (
		aws    interface{ HTTPStatusCode() int } // smithy-go's (and the AWS SDK's) ResponseError
		google *googleapi.Error
		azure  *azcore.ResponseError
	)
	// Below 400 is no refusal: 0 is no answer (the AWS SDK's ResponseError of a request never
	// answered: a reset), a 2xx one whose body was cut or could not be read; the transport's
	// error inside it decides.
	code := 0
	switch {
	case errors.As(err, &aws):
		code = aws.HTTPStatusCode()
	case errors.As(err, &google):
		code = google.Code
	case errors.As(err, &azure):
		code = azure.StatusCode
	}
	if code >= 400 {
		return transientCode(int32(code)), true
	}
	// Google Cloud KMS (gocloud.dev's gcpkms) speaks gRPC.
	var grpc interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpc) {
		switch grpc.GRPCStatus().Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Internal, codes.Aborted:
			return true, true
		case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied, codes.FailedPrecondition,
			codes.OutOfRange, codes.Unimplemented, codes.Unauthenticated, codes.Canceled:
			return false, true
		}
	}
	return false, false
}

// transientCode says whether an HTTP status code is worth a retry of the same request.
func transientCode(code int32) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// isConfigTLS says whether err is a TLS or certificate error that a retry cannot fix.
func isConfigTLS(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		invalid          x509.CertificateInvalidError
		hostname         x509.HostnameError
		verification     *tls.CertificateVerificationError
		header           tls.RecordHeaderError
		roots            x509.SystemRootsError
	)
	return errors.As(err, &unknownAuthority) || errors.As(err, &invalid) || errors.As(err, &hostname) ||
		errors.As(err, &verification) || errors.As(err, &header) || errors.As(err, &roots)
}

// IsConflict says whether err is an optimistic-lock conflict (409 Conflict): the object
// changed since it was read; read it again and retry.
func IsConflict(err error) bool { return apierrors.IsConflict(err) }

// Backoff is the delay before try n (n >= 1) of a request that met a fault: exponential from
// base, capped at max, with up to 25% of jitter either side so that a fleet of targets that
// met the same blip do not retry in step.
func Backoff(n int, base, ceiling time.Duration) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return max0(d + jitter)
}

func max0(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// Policy says how a call is tried again in place when it meets a fault. The zero Policy
// tries through transient faults (IsTransient) until ctx ends, 200 ms apart at first.
type Policy struct {
	// Tries is how many tries in all (<= 0: no limit).
	Tries int
	// Window, when positive, bounds the tries by time: none starts after Window has passed
	// since the first try (the wait before the last is cut to end there).
	Window time.Duration
	// Base and Ceiling are the jittered exponential backoff between tries (Backoff); zero or
	// less means 200 ms and 5 s.
	Base, Ceiling time.Duration
	// Retriable says which errors are tried again; nil means IsTransient.
	Retriable func(error) bool
}

// Do runs fn until it succeeds, fails with an error p does not try again, or p's tries,
// window or ctx are over, sleeping p's backoff between tries. It returns fn's last error.
func (p Policy) Do(ctx context.Context, fn func() error) error {
	retriable := p.Retriable
	if retriable == nil {
		retriable = IsTransient
	}
	base, ceiling := p.Base, p.Ceiling
	if base <= 0 {
		base = 200 * time.Millisecond
	}
	if ceiling <= 0 {
		ceiling = 5 * time.Second
	}
	deadline := time.Now().Add(p.Window)
	for n := 1; ; n++ {
		err := fn()
		if err == nil || !retriable(err) || (p.Tries > 0 && n >= p.Tries) {
			return err
		}
		wait := Backoff(n, base, ceiling)
		if p.Window > 0 {
			if !time.Now().Before(deadline) {
				return err
			}
			wait = min(wait, time.Until(deadline))
		}
		if !Sleep(ctx, wait) {
			return err
		}
	}
}

// Retry runs fn until it succeeds, fails with an error that is not transient, ctx ends, or
// steps tries were made (steps <= 0: until ctx ends), sleeping a jittered exponential backoff
// between tries. It is for short in-place retries of one request inside a step (a write of a
// restore); a step that still meets a fault returns it, and the step is retried as a whole.
// It returns fn's last error.
func Retry(ctx context.Context, steps int, fn func() error) error {
	return Policy{Tries: steps}.Do(ctx, fn)
}

// RetryFor is Retry bounded by time rather than tries: fn is tried again through faults until
// window has passed since its first try (or ctx ends), each try under ctx. It is for a check
// that must not hold its worker long (a store's probe), while each try may take its time.
func RetryFor(ctx context.Context, window time.Duration, fn func() error) error {
	if window <= 0 {
		return fn() // no window: one try (a Policy without a Window has no bound)
	}
	return Policy{Window: window, Ceiling: 2 * time.Second}.Do(ctx, fn)
}

// Sleep waits for d, or until ctx ends (false).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RetryLogged is Retry that says in the log of ctx (controller-runtime's) at each fault the
// request met, naming it by what (it is tried again unless its tries or ctx are over): for a process that has nothing to do before the
// other side answers (an agent waiting for its hub or its own cluster), whose operator must see
// why it waits.
func RetryLogged(ctx context.Context, steps int, what string, fn func() error) error {
	return Retry(ctx, steps, func() error {
		err := fn()
		if IsTransient(err) {
			log.FromContext(ctx).Info("a request met a fault", "request", what, "error", err.Error())
		}
		return err
	})
}

// CreateTries is how many times a create that may be sent again is sent in all when it meets
// a fault (Retry). A member's client does not send a POST again after a transport error (it may
// have been done, its answer lost); a caller for whom "it exists" is as good as "it was created"
// does, with this many tries.
const CreateTries = 6

// Within runs fn with a context that ends after budget, and waits for it no longer than that
// (and a moment, withinGrace, for its own error): not every call stops with its context (a
// REST mapper's discovery takes none), and a member that does not answer must not hold the
// caller past its budget. A call left behind when the
// budget ends finishes on its own (its requests are retried a bounded number of times); its
// result is dropped. Past the budget the error says what was not done within it (what: "read",
// "planned"), with fn's own error when fn returned one; it wraps context.DeadlineExceeded (a
// fault: IsTransient). When ctx itself ends first, ctx's error is returned. budget <= 0: no
// budget, fn runs with ctx.
func Within[T any](ctx context.Context, budget time.Duration, what string, fn func(context.Context) (T, error)) (T, error) {
	if budget <= 0 {
		return fn(ctx)
	}
	bctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(bctx)
		done <- result{v, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-bctx.Done():
		// A call that stops with its context gets a moment to say why.
		t := time.NewTimer(withinGrace)
		defer t.Stop()
		select {
		case res = <-done:
		case <-t.C:
			if err := ctx.Err(); err != nil {
				return res.v, err
			}
			return res.v, &BudgetError{Budget: budget, What: what}
		}
	}
	if res.err != nil && bctx.Err() != nil && ctx.Err() == nil {
		return res.v, &BudgetError{Budget: budget, What: what, Err: res.err}
	}
	return res.v, res.err
}

// withinGrace is how long Within waits, past the budget, for a call that stops with its
// context to return its own error.
const withinGrace = 250 * time.Millisecond

// BudgetError is a call Within stopped waiting for at its budget.
type BudgetError struct {
	Budget time.Duration
	// What was not done: "read", "planned".
	What string
	// Err is the call's own error, when it returned one as its context ended.
	Err error
}

func (e *BudgetError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("not %s within %s: %v", e.What, e.Budget, e.Err)
	}
	return fmt.Sprintf("not %s within %s", e.What, e.Budget)
}

// Unwrap is context.DeadlineExceeded and the call's own error.
func (e *BudgetError) Unwrap() []error {
	if e.Err != nil {
		return []error{context.DeadlineExceeded, e.Err}
	}
	return []error{context.DeadlineExceeded}
}
