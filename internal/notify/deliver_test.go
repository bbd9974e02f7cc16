package notify

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A failed delivery's error never quotes the URL (a Slack webhook's URL is its credential)
// nor the token; it says whether the receiver answered, and a timeout is one.
func TestSendErrorsHideTheURL(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang/T0KEN":
			select {
			case <-r.Context().Done():
			case <-block:
			}
		case "/fail/T0KEN":
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	defer close(block)
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	for _, tc := range []struct {
		// url to send to; wantStatus, wantTimeout what the error must say.
		url         string
		wantStatus  int
		wantTimeout bool
		wantText    string
	}{
		{srv.URL + "/fail/T0KEN", http.StatusBadGateway, false, "the receiver answered 502"},
		{srv.URL + "/hang/T0KEN", 0, true, "no answer within 200ms (timeout)"},
		{closedURL + "/x/T0KEN", 0, false, "connection refused"},
	} {
		err := Send(t.Context(), http.DefaultClient, Target{URL: tc.url, Token: "s3cret", Timeout: 200 * time.Millisecond}, "k", []byte("{}"), "application/json")
		se, ok := err.(*SendError)
		if !ok {
			t.Fatalf("%s: %T %v, want a *SendError", tc.url, err, err)
		}
		if se.Status != tc.wantStatus || se.Timeout != tc.wantTimeout || !strings.Contains(se.Error(), tc.wantText) {
			t.Errorf("%+v (%s), want status %d timeout %v and %q", se, se, tc.wantStatus, tc.wantTimeout, tc.wantText)
		}
		if strings.Contains(se.Error(), "T0KEN") || strings.Contains(se.Error(), "127.0.0.1") || strings.Contains(se.Error(), "s3cret") {
			t.Errorf("the error quotes the URL or the token: %s", se)
		}
	}
	if err := Send(t.Context(), http.DefaultClient, Target{URL: srv.URL + "/ok", Timeout: time.Second}, "k", []byte("{}"), "application/json"); err != nil {
		t.Errorf("a 200 is a delivery: %v", err)
	}
}
