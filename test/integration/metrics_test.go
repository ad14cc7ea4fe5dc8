package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestScrapeSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP sluice_s3_retries_total S3 requests retried.
# TYPE sluice_s3_retries_total counter
sluice_s3_retries_total{code="SlowDown",op="GetObject"} 3
sluice_s3_retries_total{code="reset",op="GetObject"} 2
sluice_s3_retries_total_other 100
sluice_s3_retries 7
`)
	}))
	defer srv.Close()
	sum, found, err := ScrapeSum(context.Background(), srv.URL, "sluice_s3_retries_total")
	if err != nil || !found || sum != 5 {
		t.Fatalf("ScrapeSum: %v %v %v, want 5 true nil", sum, found, err)
	}
	if _, found, _ := ScrapeSum(context.Background(), srv.URL, "nothing"); found {
		t.Fatal("found a metric that is not there")
	}
}

func TestReplicaURLFromLogs(t *testing.T) {
	for _, line := range []string{
		`time=2026-11-23T05:00:00Z level=INFO msg="replica ready" component=actuator job=a replica=1 url=http://127.0.0.1:4321`,
		`{"time":"x","level":"INFO","msg":"replica ready","job":"a","replica":1,"url":"http://127.0.0.1:4321"}`,
	} {
		m := replicaURL.FindStringSubmatch(line)
		if m == nil || m[1] != "http://127.0.0.1:4321" {
			t.Errorf("%s: got %q", line, m)
		}
		if m := replicaOfJob.FindStringSubmatch(line); m == nil || m[1] != "a" || m[2] != "http://127.0.0.1:4321" {
			t.Errorf("%s: job and url %q", line, m)
		}
	}
}

func TestScrapeLabelled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE sluice_dispatch_sends_total counter
sluice_dispatch_sends_total{job="a",outcome="ok"} 20
sluice_dispatch_sends_total{job="a",outcome="busy"} 3
sluice_dispatch_sends_total{job="ab",outcome="ok"} 7
sluice_dispatch_sends_total_other{job="a",outcome="ok"} 100
`)
	}))
	defer srv.Close()
	sum, found, err := scrapeLabelled(context.Background(), srv.URL, "sluice_dispatch_sends_total", []string{`job="a"`, `outcome="ok"`})
	if err != nil || !found || sum != 20 {
		t.Fatalf("scrapeLabelled: %v %v %v, want 20 true nil", sum, found, err)
	}
	if sum, _, _ := scrapeLabelled(context.Background(), srv.URL, "sluice_dispatch_sends_total", []string{`job="a"`}); sum != 23 {
		t.Fatalf("every outcome of job a: %v, want 23", sum)
	}
}
