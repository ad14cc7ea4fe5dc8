package observability

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// demoJob is the id of the job `sluice demo` runs.
const demoJob = "demo"

// promVersion is the Prometheus release .ci/prometheus/build.sh builds.
const promVersion = "v0.316.0"

// promBinDir is where promtool and prometheus are looked for: build.sh's
// default, or $SLUICE_PROMETHEUS/<version>.
func promBinDir() string {
	base := os.Getenv("SLUICE_PROMETHEUS")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache", "sluice", "prometheus")
	}
	return filepath.Join(base, promVersion)
}

// promTool returns the path of a Prometheus binary; without it the test
// skips, or fails in CI (where .ci/deps.sh builds it).
func promTool(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(promBinDir(), name)
	if _, err := os.Stat(p); err != nil {
		msg := fmt.Sprintf("%s not built: run `bash .ci/prometheus/build.sh` (once, cached in ~/.cache/sluice/prometheus): %v", name, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func runTool(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The alert rules load in Prometheus (promtool check rules) and each
// alert fires on the recorded series meant to fire it and stays quiet on
// the others (promtool test rules: rules_test.yml).
func TestAlertRules(t *testing.T) {
	promtool := promTool(t, "promtool")
	out := runTool(t, promtool, "check", "rules", "alerts.yml")
	if !strings.Contains(out, "4 rules found") {
		t.Errorf("promtool check rules: want 4 rules found:\n%s", out)
	}
	runTool(t, promtool, "test", "rules", "rules_test.yml")
	// Each alert has a firing and a quiet case: an exp_alerts list that is
	// empty and one that is not, by alert name.
	raw, err := os.ReadFile("rules_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(string(rules), -1) {
		name := m[1]
		quiet := regexp.MustCompile(`alertname: ` + name + `\n\s+exp_alerts: \[\]`).Match(raw)
		firing := regexp.MustCompile(`alertname: ` + name + `\n\s+exp_alerts:\n\s+- exp_labels:`).Match(raw)
		if !quiet || !firing {
			t.Errorf("alert %s: quiet case %v, firing case %v in rules_test.yml; want both", name, quiet, firing)
		}
	}
}

// freePort finds a free loopback port (another process may take it
// before it is used: rare enough here).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer two goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a process the test started; done is closed once it exited,
// with err its exit.
type proc struct {
	out  *syncBuffer
	done chan struct{}
	err  error
}

// start runs a process until t ends, stopped with SIGINT (a demo stops
// its replicas on it).
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	p := &proc{out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", filepath.Base(name), p.out)
		}
	})
	return p
}

// promQuery is the series an instant query returns.
func promQuery(ctx context.Context, base, q string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, fmt.Errorf("query %s: %s: %w", q, resp.Status, err)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, r.Error)
	}
	return len(r.Data.Result), nil
}

// ruleHealth reads the rules' health from Prometheus: every rule's name,
// health and last error, and whether each was evaluated.
func ruleHealth(ctx context.Context, base string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name           string    `json:"name"`
					Health         string    `json:"health"`
					LastError      string    `json:"lastError"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	h := map[string]string{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			s := rule.Health
			if rule.LastError != "" {
				s += ": " + rule.LastError
			}
			if rule.LastEvaluation.Year() < 2000 {
				s = "not evaluated"
			}
			h[rule.Name] = s
		}
	}
	return h, nil
}

// A real Prometheus, loading alerts.yml, scrapes a running `sluice demo`
// as docs/operations.md says to (honor_labels: the job id is the `job`
// label), and while the job runs every query of the dashboard returns at
// least one series, every Sluice series the alerts read exists, and every
// alert rule evaluates without error.
func TestDashboardQueriesOnDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs a demo")
	}
	prom := promTool(t, "prometheus")
	_, panels := loadDashboard(t)
	qs, err := dashboardQueries(panels)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	sluice := filepath.Join(dir, "sluice")
	build := exec.CommandContext(ctx, "go", "build", "-o", sluice, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sluice: %v\n%s", err, out)
	}

	metricsPort, promPort := freePort(t), freePort(t)
	rules, err := filepath.Abs("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:%d"]
`, rules, metricsPort)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", promPort)
	promProc := start(t, prom, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort))
	waitReady(ctx, t, base, promProc)

	// Long enough for a few rate windows: 6 epochs of 2000 samples at 60ms
	// a step of 32, half a minute at least; 20 corrupt samples for the
	// failed-samples series.
	demo := start(t, sluice, "demo", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort),
		"--epochs", "6", "--step-time", "60ms", "--corrupt", "20", "--log-level", "warn")

	// The dashboard's queries as Grafana sends them with the demo's job
	// picked: a series that lost its job label to the scrape job's
	// (honor_labels unset) matches none.
	expand := strings.NewReplacer(`$job`, demoJob, `$__rate_interval`, `5s`)
	pending := map[string]string{}
	for _, q := range qs {
		pending[q.Panel+" "+q.RefID] = expand.Replace(q.Expr)
	}
	// The $job variable's label_values(METRIC, job), as PromQL.
	pending["the job variable"] = `group by (job) (sluice_controller_job_tasks{job="` + demoJob + `"})`
	alertsRaw, err := os.ReadFile("alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sluiceMetric.FindAllString(string(alertsRaw), -1) {
		pending["alerts.yml reads "+name] = fmt.Sprintf(`count by (job) ({__name__=%q, job=%q})`, name, demoJob)
	}
	var health map[string]string
	healthy := false
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 || !healthy {
		select {
		case <-demo.done:
			var left []string
			for k, q := range pending {
				left = append(left, k+": "+q)
			}
			slices.Sort(left)
			t.Fatalf("the demo ended (%v) with %d queries never answering a series:\n%s\nrules: %v\ndemo output:\n%s",
				demo.err, len(left), strings.Join(left, "\n"), health, demo.out)
		case <-ctx.Done():
			t.Fatalf("timed out with %d queries left", len(pending))
		case <-tick.C:
		}
		for k, q := range pending {
			n, err := promQuery(ctx, base, q)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			if n > 0 {
				delete(pending, k)
			}
		}
		if health, err = ruleHealth(ctx, base); err != nil {
			t.Fatal(err)
		}
		healthy = len(health) == 4
		for name, h := range health {
			if h != "ok" {
				healthy = false
				if strings.HasPrefix(h, "err") {
					t.Fatalf("alert %s: %s", name, h)
				}
			}
		}
	}
	t.Logf("%d dashboard queries and the alerts' series answered while the demo ran; rules: %v", len(qs), health)
	select { // the demo ends by itself; its verdict is part of the run
	case <-demo.done:
		if demo.err != nil {
			t.Errorf("sluice demo: %v\n%s", demo.err, demo.out)
		}
	case <-ctx.Done():
		t.Errorf("the demo did not end in time")
	}
}

func waitReady(ctx context.Context, t *testing.T, base string, p *proc) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("prometheus exited: %v", p.err)
		case <-ctx.Done():
			t.Fatal(errors.Join(ctx.Err(), err))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
