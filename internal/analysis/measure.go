package analysis

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/jsonpath"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/fault"
)

// Credentials are the data of a provider's secretRef: `token` (bearer) or `username` and
// `password` (basic). They are sent, never logged nor put in a message.
type Credentials map[string][]byte

// Measurer takes measurements.
type Measurer struct {
	// Client sends the requests (nil: a client with the default transport).
	Client *http.Client
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// ErrNoData says a query returned no sample: the measurement is Inconclusive.
var ErrNoData = errors.New("the query returned no sample")

// Measure takes one measurement of m for d. Its phase is the verdict of m's conditions on the
// result; a query that fails is an Error measurement, and permanent says whether a retry can
// fix it (a transient fault, classified by type with internal/fault, can: a refused or reset
// connection, a timeout, a 429 or a 5xx; a query the server refuses as bad data, or a 401,
// 403 or 404, cannot). An empty result is Inconclusive.
func (ms *Measurer) Measure(ctx context.Context, m *Metric, d Data, creds Credentials) (meas v1alpha1.Measurement, permanent bool) {
	var (
		result any
		err    error
	)
	q, rerr := m.Render(d)
	if rerr != nil {
		err = rerr
	}
	if rerr == nil {
		err = fault.Policy{Tries: measureTries, Ceiling: time.Second, Retriable: blip}.Do(ctx, func() error {
			var qerr error
			if p := m.Spec.Provider.Prometheus; p != nil {
				result, qerr = ms.prometheus(ctx, p, q, creds)
			} else if w := m.Spec.Provider.Web; w != nil {
				result, qerr = ms.web(ctx, w, q, creds)
			}
			return qerr
		})
	}
	meas.FinishedAt = metav1.NewTime(ms.now())
	switch {
	case errors.Is(err, ErrNoData):
		meas.Phase, meas.Message, meas.Value = v1alpha1.MetricInconclusive, err.Error(), "[]"
		return meas, false
	case err != nil:
		meas.Phase, meas.Message = v1alpha1.MetricError, truncate(err.Error(), 512)
		return meas, rerr != nil || !retriable(err)
	}
	meas.Value = truncate(format(result), 256)
	phase, err := m.Evaluate(result)
	meas.Phase = phase
	if err != nil {
		meas.Message = truncate(err.Error(), 512)
	}
	return meas, false
}

func (ms *Measurer) now() time.Time {
	if ms.Now != nil {
		return ms.Now()
	}
	return time.Now()
}

// statusError is an HTTP answer that is not a success.
type statusError struct{ code int }

func (e *statusError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.code, http.StatusText(e.code))
}

// measureTries is how many times in all a query that meets a blip (blip) is sent before it is an
// Error measurement: a blip of the way to the provider does not count toward the metric's
// consecutiveErrorLimit, and so cannot fail a gate by itself.
const measureTries = 3

// blip says whether a query's error is a fault that came at once and may be gone in a moment:
// an answer 429, 500, 502 or 503, or a refused or reset connection. Not a timeout (a 504 of a
// gateway, a request that used up the metric's timeout: it is measured again after the error
// interval), nor an error Prometheus said about the query itself (its execution failed, or its
// answer was garbled), which a strained Prometheus should not be asked again at once.
func blip(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		switch se.code {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable:
			return true
		}
		return false
	}
	var (
		pe *promv1.Error
		ne net.Error
	)
	if errors.As(err, &pe) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return false
	}
	return fault.IsTransient(err)
}

// retriable says whether a measurement error may go away by itself.
func retriable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code == http.StatusTooManyRequests || se.code >= 500
	}
	var pe *promv1.Error
	if errors.As(err, &pe) {
		switch pe.Type {
		case promv1.ErrBadData:
			return false // the query does not parse or names what does not exist
		case promv1.ErrTimeout, promv1.ErrCanceled, promv1.ErrServer:
			return true
		}
		return true // execution and bad_response: counted as errors, as Argo Rollouts does
	}
	return fault.IsTransient(err)
}

// statusRecorder keeps the status code of an answer that is not a success, which the
// Prometheus client reports as a "client error" whatever it was (a 401 as a 429).
type statusRecorder struct {
	next http.RoundTripper
	code *int
}

func (s statusRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if resp != nil {
		*s.code = resp.StatusCode
	}
	return resp, err
}

// authorize sets the request's credentials and headers.
func authorize(h http.Header, headers []v1alpha1.WebMetricHeader, creds Credentials) {
	for _, hd := range headers {
		h.Set(hd.Key, hd.Value)
	}
	if tok := creds["token"]; len(tok) > 0 {
		h.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	} else if u := creds["username"]; len(u) > 0 {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(string(u)+":"+string(creds["password"]))))
	}
}

// headerTransport adds headers and credentials to every request.
type headerTransport struct {
	next    http.RoundTripper
	headers []v1alpha1.WebMetricHeader
	creds   Credentials
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	authorize(r.Header, t.headers, t.creds)
	return t.next.RoundTrip(r)
}

func (ms *Measurer) transport() http.RoundTripper {
	if ms.Client != nil && ms.Client.Transport != nil {
		return ms.Client.Transport
	}
	return http.DefaultTransport
}

func (ms *Measurer) prometheus(ctx context.Context, p *v1alpha1.PrometheusMetric, query string, creds Credentials) (any, error) {
	timeout := 30 * time.Second
	if p.Timeout != nil && *p.Timeout > 0 {
		timeout = time.Duration(*p.Timeout) * time.Second
	}
	code := 0
	c, err := promapi.NewClient(promapi.Config{Address: p.Address,
		RoundTripper: statusRecorder{next: headerTransport{next: ms.transport(), headers: p.Headers, creds: creds}, code: &code}})
	if err != nil {
		return nil, fmt.Errorf("provider.prometheus.address: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// At the server's now (no time parameter): the gate judges what Prometheus sees now,
	// whatever the clock of the caller.
	v, _, err := promv1.NewAPI(c).Query(ctx, query, time.Time{}, promv1.WithTimeout(timeout))
	if err != nil {
		if code >= 300 && code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
			return nil, fmt.Errorf("querying %s: %w", p.Address, &statusError{code: code})
		}
		return nil, fmt.Errorf("querying %s: %w", p.Address, err)
	}
	switch v := v.(type) {
	case model.Vector:
		if len(v) == 0 {
			return nil, ErrNoData
		}
		out := make([]float64, len(v))
		for i, s := range v {
			out[i] = float64(s.Value)
		}
		return out, nil
	case *model.Scalar:
		return float64(v.Value), nil
	case *model.String:
		return v.Value, nil
	}
	return nil, fmt.Errorf("the query returned a %s: only a vector or a scalar can be evaluated", v.Type())
}

func (ms *Measurer) web(ctx context.Context, w *v1alpha1.WebMetric, url string, creds Credentials) (any, error) {
	timeout := 10 * time.Second
	if w.TimeoutSeconds > 0 {
		timeout = time.Duration(w.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("provider.web.url: %w", err)
	}
	authorize(req.Header, w.Headers, creds)
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: ms.transport()}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, &statusError{code: resp.StatusCode}
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("the answer is not JSON: %w", err)
	}
	if w.JSONPath == "" {
		return doc, nil
	}
	jp := jsonpath.New("metric")
	if err := jp.Parse(w.JSONPath); err != nil {
		return nil, fmt.Errorf("provider.web.jsonPath: %w", err)
	}
	res, err := jp.FindResults(doc)
	if err != nil {
		return nil, fmt.Errorf("provider.web.jsonPath %s: %w", w.JSONPath, err)
	}
	if len(res) == 0 || len(res[0]) == 0 {
		return nil, ErrNoData
	}
	if len(res[0]) == 1 {
		return res[0][0].Interface(), nil
	}
	out := make([]any, len(res[0]))
	for i, v := range res[0] {
		out[i] = v.Interface()
	}
	return out, nil
}

// format writes a result as text for status.
func format(v any) string {
	switch v := v.(type) {
	case float64:
		return formatFloat(v)
	case []float64:
		parts := make([]string, len(v))
		for i, f := range v {
			parts[i] = formatFloat(f)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Sprint(f)
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}
