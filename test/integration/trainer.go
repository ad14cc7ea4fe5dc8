package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// Trainer stands in for a training script: it GETs /v1/batch from an agent
// until 410 Gone and records every (epoch, key) it receives.
type Trainer struct {
	mu         sync.Mutex
	seen       map[string]int // "epoch/key" -> deliveries
	batches    int
	samples    int
	bytes      int64             // batch bodies received
	failed     map[string]string // "epoch/key" -> reason, from the agent's stats
	client     *http.Client
	token      bearer.Token // sent with every request, if set
	afterBatch func(n int)  // called after the nth batch (1-based) was received
	// sources are a mixed job's rows' sources per epoch, in the order
	// received; seenFrom counts "epoch/source/key" (sources may share keys).
	sources  map[int][]int
	seenFrom map[string]int
}

// NewTrainer returns a trainer with nothing received.
func NewTrainer() *Trainer {
	return &Trainer{seen: map[string]int{}, failed: map[string]string{}, client: &http.Client{Timeout: 2 * time.Minute},
		sources: map[int][]int{}, seenFrom: map[string]int{}}
}

// Authorize makes the trainer send tok with every request, as a trainer
// of an agent listening beyond loopback does.
func (tr *Trainer) Authorize(tok bearer.Token) { tr.token = tok }

// AfterBatch sets a hook the trainer calls after receiving each batch and
// before asking for the next: the moment to kill an agent between requests.
func (tr *Trainer) AfterBatch(f func(n int)) { tr.afterBatch = f }

// Batches is the number of batches received so far.
func (tr *Trainer) Batches() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.batches
}

// Samples is the number of samples received so far, duplicates included.
func (tr *Trainer) Samples() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.samples
}

// Bytes is the size of the batches received so far (the response bodies:
// safetensors files), duplicates included.
func (tr *Trainer) Bytes() int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.bytes
}

// errGone is the agent's 410: every batch was delivered (or the job ended).
var errGone = fmt.Errorf("410 gone")

// Run reads batches from the agent at agentURL() (asked again on every
// request, so a restarted agent on a new address is followed) until 410.
// agentURL is a reader's base URL: the agent's own for its first reader,
// Agent.ReaderURL for any.
// A connection error or 503 (an agent being restarted) is retried until
// ctx ends.
func (tr *Trainer) Run(ctx context.Context, agentURL func() string) error {
	for {
		err := tr.next(ctx, agentURL())
		switch {
		case err == errGone:
			// The agent exits once it answered 410, so its stats may be
			// gone: the ones read after the last batch hold every failure
			// (an epoch's last batch waits for all its shards' ends).
			_ = tr.readStats(ctx, agentURL())
			return nil
		case err == nil:
			_ = tr.readStats(ctx, agentURL()) // a restarting agent: the next read will do
		case ctx.Err() != nil:
			return fmt.Errorf("trainer: %w (last: %v)", ctx.Err(), err)
		case isRetryable(err):
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		default:
			return err
		}
	}
}

type retryable struct{ error }

func isRetryable(err error) bool { _, ok := err.(retryable); return ok }

func (tr *Trainer) next(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/batch", nil)
	if err != nil {
		return err
	}
	tr.token.Authorize(req)
	resp, err := tr.client.Do(req)
	if err != nil {
		return retryable{fmt.Errorf("trainer: get batch: %w", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusGone:
		return errGone
	case resp.StatusCode == http.StatusServiceUnavailable:
		return retryable{fmt.Errorf("trainer: get batch: %s: %s", resp.Status, body)}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("trainer: get batch: %s: %s", resp.Status, body)
	case err != nil:
		return fmt.Errorf("trainer: reading batch: %w", err)
	}
	b, err := traineragent.DecodeBatch(body)
	if err != nil {
		return fmt.Errorf("trainer: decoding batch: %w", err)
	}
	n := tr.record(b, len(body))
	if tr.afterBatch != nil {
		tr.afterBatch(n)
	}
	return nil
}

// readStats records the samples the agent reports as failed (adding to
// those of earlier reads, which a restarted agent no longer reports).
func (tr *Trainer) readStats(ctx context.Context, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/stats", nil)
	if err != nil {
		return err
	}
	tr.token.Authorize(req)
	resp, err := tr.client.Do(req)
	if err != nil {
		return fmt.Errorf("trainer: get stats: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		Failed []wire.FailedSample `json:"failed_samples"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("trainer: decoding stats: %w", err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, f := range st.Failed {
		tr.failed[epochKey(f.Epoch, f.Key)] = f.Reason
	}
	return nil
}

func epochKey(epoch int, key string) string { return strconv.Itoa(epoch) + "/" + key }

// Report compares what a trainer received with what a job should deliver.
type Report struct {
	Scenario   string
	Expected   int // samples x epochs
	Delivered  int // distinct (epoch, key) received
	Lost       int // expected, neither received nor reported failed
	Duplicates int // deliveries beyond the first
	Failed     int // reported failed by the agent
	Unexpected int // received but not in the dataset
	Seconds    float64
	// Examples of each problem, for the failure message.
	LostKeys, DuplicateKeys, UnexpectedKeys, WrongFailures []string
}

// Check compares the trainer's record with the dataset's keys over epochs.
// wantFailed are keys expected to fail (corrupt samples), in every epoch.
func (tr *Trainer) Check(scenario string, keys []string, epochs int, wantFailed []string, took time.Duration) Report {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := Report{Scenario: scenario, Expected: len(keys) * epochs, Seconds: took.Seconds()}
	corrupt := map[string]bool{}
	for _, k := range wantFailed {
		corrupt[k] = true
	}
	want := map[string]bool{}
	for e := range epochs {
		for _, k := range keys {
			ek := epochKey(e, k)
			want[ek] = true
			n := tr.seen[ek]
			_, failed := tr.failed[ek]
			switch {
			case n > 0:
				r.Delivered++
			case failed:
				r.Failed++
				if !corrupt[k] {
					r.WrongFailures = append(r.WrongFailures, ek+": "+tr.failed[ek])
				}
			default:
				r.Lost++
				r.LostKeys = append(r.LostKeys, ek)
			}
			if n > 1 {
				r.Duplicates += n - 1
				r.DuplicateKeys = append(r.DuplicateKeys, ek)
			}
		}
	}
	for ek := range tr.seen {
		if !want[ek] {
			r.Unexpected++
			r.UnexpectedKeys = append(r.UnexpectedKeys, ek)
		}
	}
	sort.Strings(r.UnexpectedKeys)
	return r
}

// Line is the figures line the suite logs for each scenario.
func (r Report) Line() string {
	return fmt.Sprintf("scenario=%s expected=%d delivered=%d lost=%d duplicates=%d failed=%d seconds=%.1f",
		r.Scenario, r.Expected, r.Delivered, r.Lost, r.Duplicates, r.Failed, r.Seconds)
}

// Err says what is wrong, or nil when every sample arrived exactly once.
func (r Report) Err() error {
	var probs []string
	if r.Lost > 0 {
		probs = append(probs, fmt.Sprintf("%d lost (e.g. %s)", r.Lost, first(r.LostKeys, 5)))
	}
	if r.Duplicates > 0 {
		probs = append(probs, fmt.Sprintf("%d duplicates (e.g. %s)", r.Duplicates, first(r.DuplicateKeys, 5)))
	}
	if r.Unexpected > 0 {
		probs = append(probs, fmt.Sprintf("%d unexpected (e.g. %s)", r.Unexpected, first(r.UnexpectedKeys, 5)))
	}
	if len(r.WrongFailures) > 0 {
		probs = append(probs, fmt.Sprintf("%d good samples reported failed (e.g. %s)", len(r.WrongFailures), first(r.WrongFailures, 3)))
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", r.Scenario, strings.Join(probs, "; "))
}

func first(s []string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.Join(s, ", ")
}

// record counts batch b, of size bytes on the wire, and returns the
// batches counted so far.
func (tr *Trainer) record(b traineragent.Batch, size int) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i, k := range b.Keys {
		tr.seen[epochKey(b.Epoch, k)]++
		if b.Sources != nil {
			tr.seenFrom[epochKey(b.Epoch, strconv.Itoa(b.Sources[i])+"/"+k)]++
		}
	}
	tr.sources[b.Epoch] = append(tr.sources[b.Epoch], b.Sources...)
	tr.batches++
	tr.samples += len(b.Keys)
	tr.bytes += int64(size)
	return tr.batches
}

// Sources are the sources of a mixed job's rows of epoch e, in the order
// received, and how many times each "source/key" of it came.
func (tr *Trainer) Sources(e int) ([]int, map[string]int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	seen := map[string]int{}
	prefix := strconv.Itoa(e) + "/"
	for k, n := range tr.seenFrom {
		if strings.HasPrefix(k, prefix) {
			seen[strings.TrimPrefix(k, prefix)] = n
		}
	}
	return slices.Clone(tr.sources[e]), seen
}
