package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ScrapeSum fetches a Prometheus text page and sums every series of metric
// (all label sets). found is false when the page has no such series.
func ScrapeSum(ctx context.Context, url, metric string) (sum float64, found bool, err error) {
	return scrapeLabelled(ctx, url, metric, nil)
}

// replicaURL finds the replica URLs the local actuator logs ("replica
// ready ... url=http://..." in text, "url":"http://..." in JSON), and
// replicaOfJob each one's job too (logged before the URL).
var (
	replicaURL   = regexp.MustCompile(`replica ready.*?\burl"?[=:]"?(http://[0-9.:]+)`)
	replicaOfJob = regexp.MustCompile(`replica ready.*?\bjob"?[=:]"?([A-Za-z0-9_-]+).*?\burl"?[=:]"?(http://[0-9.:]+)`)
)

// ReplicaScraper follows the replicas the controllers start (from their
// logs) and keeps, per replica, the highest value of a counter it scraped
// from the replica's /metrics, so that the counts of replicas that have
// exited since still add up.
type ReplicaScraper struct {
	metric string
	job    string   // only this job's replicas; "" for all
	labels []string // only series with these labels; none for all
	logs   []*Process
	mu     sync.Mutex
	max    map[string]float64 // replica URL -> highest value seen
	found  map[string]bool
	stop   context.CancelFunc
	done   chan struct{}
}

// ScrapeReplicas scrapes every replica that a process in logs started,
// every 200ms, until Stop.
func ScrapeReplicas(metric string, logs ...*Process) *ReplicaScraper {
	return ScrapeJobReplicas("", metric, nil, logs...)
}

// ScrapeJobReplicas scrapes the replicas of job (every job's for "") that
// a process in logs started, summing the series of metric that carry every
// one of labels (each `name="value"`), every 200ms until Stop.
func ScrapeJobReplicas(job, metric string, labels []string, logs ...*Process) *ReplicaScraper {
	ctx, cancel := context.WithCancel(context.Background())
	s := &ReplicaScraper{metric: metric, job: job, labels: labels, logs: logs,
		max: map[string]float64{}, found: map[string]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			s.scrape(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *ReplicaScraper) scrape(ctx context.Context) {
	urls := map[string]bool{}
	for _, p := range s.logs {
		if s.job == "" {
			for _, m := range replicaURL.FindAllStringSubmatch(p.Log(), -1) {
				urls[m[1]] = true
			}
			continue
		}
		for _, m := range replicaOfJob.FindAllStringSubmatch(p.Log(), -1) {
			if m[1] == s.job {
				urls[m[2]] = true
			}
		}
	}
	for u := range urls {
		v, found, err := scrapeLabelled(ctx, u+"/metrics", s.metric, s.labels)
		if err != nil {
			continue // exited since
		}
		s.mu.Lock()
		if found {
			s.found[u] = true
		}
		s.max[u] = max(s.max[u], v)
		s.mu.Unlock()
	}
}

// Stop ends scraping after one last round.
func (s *ReplicaScraper) Stop() {
	s.stop()
	<-s.done
	s.scrape(context.Background())
}

// Total is the sum over replicas of the highest value seen, with the
// number of replicas scraped and how many of them exposed the metric.
func (s *ReplicaScraper) Total() (total float64, replicas, exposing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for u, v := range s.max {
		total += v
		replicas++
		if s.found[u] {
			exposing++
		}
	}
	return total, replicas, exposing
}

// SeriesOf returns the lines of a Prometheus text page that carry the
// label job="id".
func SeriesOf(ctx context.Context, url, job string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	label := `job="` + job + `"`
	for sc.Scan() {
		if line := sc.Text(); !strings.HasPrefix(line, "#") && strings.Contains(line, label) {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// scrapeLabelled sums the series of metric whose labels include every one
// of labels (each `name="value"`); without labels, every series.
func scrapeLabelled(ctx context.Context, url, metric string, labels []string) (sum float64, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue // another metric, or one with this prefix
		}
		labelSet, value := "", rest
		if rest[0] == '{' {
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			labelSet, value = rest[1:end], rest[end+1:]
		}
		for _, l := range labels {
			if !strings.Contains(","+labelSet+",", ","+l+",") {
				continue lines
			}
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("scraping %s: %q: %w", url, line, err)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}
