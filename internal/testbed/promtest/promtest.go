// Package promtest starts a real Prometheus server for tests: the prometheus binary that
// `make promtool` unpacks from Debian's package into the cache (REWIND_PROMETHEUS_BIN), with
// its own data folder, on a free port, scraping an HTTP target the test serves and whose
// metric values it sets. The server is stopped by its process id when the test ends.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/freeport"
)

// Server is a running Prometheus and the target it scrapes.
type Server struct {
	// URL of the Prometheus HTTP API, e.g. http://127.0.0.1:34567.
	URL string
	t   testing.TB
	mu  sync.Mutex
	// samples are the target's exposition lines by series ("name{labels}").
	samples map[string]float64
	cmd     *exec.Cmd
	done    chan struct{}
}

// Binary finds prometheus: $REWIND_PROMETHEUS_BIN, the repository's cache, then the PATH.
func Binary(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("REWIND_PROMETHEUS_BIN"); dir != "" {
		if p := filepath.Join(dir, "prometheus"); executable(p) {
			return p
		}
	}
	if root, err := testbed.RepoRoot(); err == nil {
		ms, _ := filepath.Glob(filepath.Join(root, ".cache", "tools", "prometheus-*", "prometheus"))
		for _, p := range ms {
			if executable(p) {
				return p
			}
		}
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus is not in $REWIND_PROMETHEUS_BIN (%q), .cache/tools nor on the PATH: run `make promtool` (it unpacks Debian's prometheus package into .cache/tools, installing nothing)", os.Getenv("REWIND_PROMETHEUS_BIN"))
	}
	return p
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Start starts a Prometheus that scrapes the test's target every second. It is stopped, by
// its process id, when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, samples: map[string]float64{}, done: make(chan struct{})}
	target := httptest.NewServer(http.HandlerFunc(s.serveMetrics))
	t.Cleanup(target.Close)
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n- job_name: app\n  static_configs:\n  - targets: [%q]\n",
		strings.TrimPrefix(target.URL, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	s.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary(t), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	// Its own process group, killed with the test binary if that dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus: %v", err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); log.Close(); close(s.done) }()
	t.Cleanup(s.Stop)
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-s.done:
			return false, fmt.Errorf("prometheus exited")
		default:
		}
		resp, err := http.Get(s.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
		t.Fatalf("prometheus did not become ready: %v\n%s", err, b)
	}
	return s
}

// Stop stops the server (SIGTERM to its process group, SIGKILL after 10s) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
	}
}

// FreePort returns a TCP port nothing listens on now (package freeport).
func FreePort(t testing.TB) int {
	t.Helper()
	ps, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

// Set sets a gauge series of the target, e.g. Set(`app_error_ratio{cluster="member1"}`, 0.01).
func (s *Server) Set(series string, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples[series] = v
}

// Delete removes a series from the target.
func (s *Server) Delete(series string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.samples, series)
}

func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	lines := make([]string, 0, len(s.samples))
	for k, v := range s.samples {
		lines = append(lines, fmt.Sprintf("%s %g", k, v))
	}
	s.mu.Unlock()
	sort.Strings(lines)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// WaitValue waits until an instant query returns want as its first sample (scrapes come
// every second), so a test knows Prometheus sees a value it set.
func (s *Server) WaitValue(query string, want float64) {
	s.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(s.URL + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			last = err.Error()
			return false, nil
		}
		if len(body.Data.Result) == 0 {
			last = "no sample"
			return false, nil
		}
		last = fmt.Sprint(body.Data.Result[0].Value[1])
		return last == fmt.Sprint(want) || last == fmt.Sprintf("%g", want), nil
	})
	if err != nil {
		s.t.Fatalf("prometheus never answered %s = %g: last %s", query, want, last)
	}
}

// WaitEmpty waits until an instant query returns no sample (a series deleted goes stale at
// the next scrape).
func (s *Server) WaitEmpty(query string) {
	s.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(s.URL + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return false, nil
		}
		return len(body.Data.Result) == 0, nil
	})
	if err != nil {
		s.t.Fatalf("prometheus still has samples for %s", query)
	}
}
