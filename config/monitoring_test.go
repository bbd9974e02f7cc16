package config_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	// The manager and its reconcilers: every metric the controller registers (rewind's own,
	// controller-runtime's reconcile, work queue and leader-election metrics).
	_ "github.com/rewind-dev/rewind/internal/controller"
)

// exported returns the names of every metric the controller registers.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	reg, ok := crmetrics.Registry.(prometheus.Collector)
	if !ok {
		t.Fatalf("controller-runtime's registry is a %T, not a collector", crmetrics.Registry)
	}
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	if !names["rewind_rollout_phase"] || !names["controller_runtime_reconcile_total"] {
		t.Fatalf("the registry does not hold the controller's metrics: %v", names)
	}
	return names
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames returns the metric names a PromQL expression (or a Grafana label_values query)
// selects: identifiers that are no function, keyword, label or string.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, "{}")
	s = promRanges.ReplaceAllString(s, "[]")
	s = promGrouping.ReplaceAllString(s, "")
	if rest, ok := strings.CutPrefix(strings.TrimSpace(s), "label_values("); ok {
		s = strings.SplitN(rest, ",", 2)[0] // label_values(metric, label)
	}
	var out []string
	for _, m := range promIdent.FindAllString(s, -1) {
		if strings.HasSuffix(m, "(") || slices.Contains(promKeywords, strings.ToLower(m)) {
			continue // a function or a keyword
		}
		out = append(out, m)
	}
	return out
}

// known says whether name is an exported metric, or a series of an exported histogram.
func known(names map[string]bool, name string) bool {
	if names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

func TestMetricNamesOfAnExpression(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (namespace, rollout) (rewind_rollout_phase{phase="Failed"}) == 1`:                               {"rewind_rollout_phase"},
		`histogram_quantile(0.95, sum by (le, step) (rate(rewind_step_duration_seconds_bucket{a=~"$x"}[15m])))`: {"rewind_step_duration_seconds_bucket"},
		`a_total unless on (namespace) sum by (x) (increase(b_count[30m])) > 0`:                                 {"a_total", "b_count"},
		`label_values(rewind_rollout_phase{namespace=~"$namespace"}, rollout)`:                                  {"rewind_rollout_phase"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// promtool is the promtool `make promtool` unpacks into the cache ($REWIND_PROMETHEUS_BIN, set
// by make), else one on the PATH.
func promtool(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("REWIND_PROMETHEUS_BIN"); dir != "" {
		if p := filepath.Join(dir, "promtool"); isExecutable(p) {
			return p
		}
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not in $REWIND_PROMETHEUS_BIN (%q) nor on the PATH: it validates config/prometheus. Run `make promtool` (it unpacks Debian's prometheus package into .cache/tools, installing nothing), or run the tests with `make test`", os.Getenv("REWIND_PROMETHEUS_BIN"))
	}
	return p
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// TestPrometheusRules checks config/prometheus's alerts with promtool (syntax, and the unit
// tests of testdata/alerts_test.yaml) and that they only name metrics the controller exports.
func TestPrometheusRules(t *testing.T) {
	pt := promtool(t)
	b, err := os.ReadFile(filepath.Join("prometheus", "prometheus_rule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []struct {
					Alert string `json:"alert"`
					Expr  string `json:"expr"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.Marshal(raw["spec"]) // {groups: [...]}, a Prometheus rules file
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(pt, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	names := exported(t)
	var alerts []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			ms := metricNames(r.Expr)
			if len(ms) == 0 {
				t.Errorf("alert %s names no metric: %s", r.Alert, r.Expr)
			}
			for _, m := range ms {
				if !known(names, m) {
					t.Errorf("alert %s uses %s, which the controller does not export", r.Alert, m)
				}
			}
			if !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("alert %s has no promtool unit test in testdata/alerts_test.yaml", r.Alert)
			}
		}
	}
	for _, want := range []string{"RewindRolloutFailed", "RewindRollbackTriggered", "RewindClusterStalled", "RewindSnapshotFailing"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// TestGrafanaDashboard checks that every panel of config/grafana's dashboard queries metrics
// the controller exports, and that every rewind metric is on the dashboard.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "rewind-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string         `json:"uid"`
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is no JSON: %v", err)
	}
	names := exported(t)
	used := map[string]bool{}
	check := func(where, expr string) {
		ms := metricNames(expr)
		if len(ms) == 0 {
			t.Errorf("%s queries no metric: %s", where, expr)
		}
		for _, m := range ms {
			used[m] = true
			if !known(names, m) {
				t.Errorf("%s queries %s, which the controller does not export", where, m)
			}
		}
	}
	var walk func([]grafanaPanel)
	panels := 0
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			panels++
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				check("panel "+p.Title, q.Expr)
			}
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		check("variable "+v.Name, s)
	}
	if panels < 10 || dash.UID == "" {
		t.Errorf("the dashboard has %d panels, uid %q", panels, dash.UID)
	}
	for n := range names {
		if !strings.HasPrefix(n, "rewind_") {
			continue
		}
		if !used[n] && !used[n+"_bucket"] && !used[n+"_count"] && !used[n+"_sum"] {
			t.Errorf("no panel shows %s", n)
		}
	}
}
