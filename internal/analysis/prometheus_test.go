//go:build !unit

package analysis

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/testbed/promtest"
)

// Measurements against a real Prometheus scraping a target whose error ratio the test sets:
// a low ratio succeeds, a high one fails, a series that is not there is Inconclusive, a query
// Prometheus refuses is a permanent error, and an unreachable Prometheus a retriable one.
func TestMeasureAgainstRealPrometheus(t *testing.T) {
	prom := promtest.Start(t)
	prom.Set(`app_error_ratio{cluster="member1"}`, 0.01)
	prom.WaitValue(`app_error_ratio{cluster="member1"}`, 0.01)
	d := Data{Cluster: Cluster{Name: "member1", Labels: map[string]string{"region": "eu"}}, Namespace: "ops", Revision: 2}
	metric := func(address, query string) *Metric {
		ms, err := Compile([]v1alpha1.Metric{{Name: "errors", SuccessCondition: "result[0] < 0.05", FailureCondition: "result[0] >= 0.05",
			Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: address, Query: query, Timeout: ptr[int64](5)}}}})
		if err != nil {
			t.Fatal(err)
		}
		return ms[0]
	}
	ms := &Measurer{}
	q := `app_error_ratio{cluster="{{.Cluster.Name}}"}`

	m, perm := ms.Measure(t.Context(), metric(prom.URL, q), d, nil)
	if m.Phase != v1alpha1.MetricSuccessful || m.Value != "[0.01]" || perm {
		t.Errorf("low error ratio: %+v (permanent %v), want Successful with [0.01]", m, perm)
	}
	prom.Set(`app_error_ratio{cluster="member1"}`, 0.5)
	prom.WaitValue(`app_error_ratio{cluster="member1"}`, 0.5)
	if m, _ := ms.Measure(t.Context(), metric(prom.URL, q), d, nil); m.Phase != v1alpha1.MetricFailed || m.Value != "[0.5]" {
		t.Errorf("high error ratio: %+v, want Failed with [0.5]", m)
	}
	if m, _ := ms.Measure(t.Context(), metric(prom.URL, `app_error_ratio{cluster="nowhere"}`), d, nil); m.Phase != v1alpha1.MetricInconclusive {
		t.Errorf("no sample: %+v, want Inconclusive", m)
	}
	if m, perm := ms.Measure(t.Context(), metric(prom.URL, `sum(rate(app_error_ratio[1m]) by`), d, nil); m.Phase != v1alpha1.MetricError || !perm {
		t.Errorf("a query Prometheus refuses: %+v (permanent %v), want a permanent Error", m, perm)
	}
	if m, perm := ms.Measure(t.Context(), metric("http://127.0.0.1:"+strconv.Itoa(promtest.FreePort(t)), q), d, nil); m.Phase != v1alpha1.MetricError || perm {
		t.Errorf("unreachable Prometheus: %+v (permanent %v), want a retriable Error", m, perm)
	}
}

// A query that meets a blip of the way to Prometheus (an answer 503, a connection reset) is
// sent again in place: the measurement is taken, not an Error counted toward
// consecutiveErrorLimit (before, each blip was one, and four in a row failed the gate). A
// Prometheus that keeps failing is still an Error, retriable.
func TestMeasureRidesOutABlip(t *testing.T) {
	prom := promtest.Start(t)
	prom.Set(`app_error_ratio{cluster="member1"}`, 0.01)
	prom.WaitValue(`app_error_ratio{cluster="member1"}`, 0.01)
	target, err := url.Parse(prom.URL)
	if err != nil {
		t.Fatal(err)
	}
	var failing, failed atomic.Int32 // how many requests are still to fail; how many did
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Add(-1) < 0 {
			rp.ServeHTTP(w, r)
			return
		}
		if failed.Add(1)%2 == 0 {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = c.Close()
				return
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ms, err := Compile([]v1alpha1.Metric{{Name: "errors", SuccessCondition: "result[0] < 0.05",
		Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: `app_error_ratio{cluster="{{.Cluster.Name}}"}`, Timeout: ptr[int64](5)}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := Data{Cluster: Cluster{Name: "member1"}}

	failing.Store(2)
	m, perm := (&Measurer{}).Measure(t.Context(), ms[0], d, nil)
	if m.Phase != v1alpha1.MetricSuccessful || m.Value != "[0.01]" || perm || failed.Load() != 2 {
		t.Errorf("after a 503 and a reset: %+v (permanent %v, %d requests failed), want Successful with [0.01]", m, perm, failed.Load())
	}
	failing.Store(1000)
	if m, perm := (&Measurer{}).Measure(t.Context(), ms[0], d, nil); m.Phase != v1alpha1.MetricError || perm {
		t.Errorf("a Prometheus that keeps failing: %+v (permanent %v), want a retriable Error", m, perm)
	}
}

// Credentials from the Secret go in the Authorization header, headers as given; a 401 is a
// permanent error, a 503 a retriable one; the web provider reads a value by jsonPath.
func TestWebProviderAndCredentials(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	var gotAuth, gotHeader atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
		gotHeader.Store(r.Header.Get("X-Scope-OrgID"))
		if c := int(status.Load()); c != http.StatusOK {
			w.WriteHeader(c)
			return
		}
		_, _ = w.Write([]byte(`{"data":{"cluster":"` + strings.TrimPrefix(r.URL.Path, "/") + `","errorRate":0.02}}`))
	}))
	defer srv.Close()
	ms, err := Compile([]v1alpha1.Metric{{Name: "web", SuccessCondition: "result < 0.05", Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{
		URL: srv.URL + "/{{.Cluster.Name}}", JSONPath: "{$.data.errorRate}", Headers: []v1alpha1.WebMetricHeader{{Key: "X-Scope-OrgID", Value: "team-a"}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	d := Data{Cluster: Cluster{Name: "member1"}}
	m, _ := (&Measurer{}).Measure(t.Context(), ms[0], d, Credentials{"token": []byte("s3cret")})
	if m.Phase != v1alpha1.MetricSuccessful || m.Value != "0.02" {
		t.Errorf("web: %+v, want Successful with 0.02", m)
	}
	if gotAuth.Load() != "Bearer s3cret" || gotHeader.Load() != "team-a" {
		t.Errorf("Authorization %q, X-Scope-OrgID %q", gotAuth.Load(), gotHeader.Load())
	}
	if strings.Contains(m.Message+m.Value, "s3cret") {
		t.Errorf("the token is in the measurement: %+v", m)
	}
	status.Store(http.StatusUnauthorized)
	if m, perm := (&Measurer{}).Measure(t.Context(), ms[0], d, nil); m.Phase != v1alpha1.MetricError || !perm {
		t.Errorf("401: %+v (permanent %v), want a permanent Error", m, perm)
	}
	status.Store(http.StatusServiceUnavailable)
	if m, perm := (&Measurer{}).Measure(t.Context(), ms[0], d, nil); m.Phase != v1alpha1.MetricError || perm {
		t.Errorf("503: %+v (permanent %v), want a retriable Error", m, perm)
	}
}
