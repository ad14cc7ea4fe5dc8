package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// TeamRanks are a DDP trainer's ranks, each reading its part of every
// step from its node's agent (GET /v1/batch?rank=R&world_size=W) until
// 410, all recorded in one Trainer's by-key record.
type TeamRanks struct {
	tr    *Trainer
	world int
	url   func(rank int) string

	mu    sync.Mutex
	steps []map[int][]int // per rank, per epoch: the steps it got
	// sends is, per agent URL, its shard sends a function answered (its
	// metrics read after each part; a restart's count adds to the last
	// run's).
	sends map[string]*sends

	// pause: the ranks in pauseRanks wait after their nth part for n in
	// pauseAt until all of them got there; then pause(n) runs and they go on.
	pauseRanks []int
	pauseAt    []int
	pause      func(n int)
	parked     map[int]int // pause point -> ranks parked there
	resume     map[int]chan struct{}

	logf     func(format string, args ...any)
	retrying map[int]int // per rank, the parts it had when its requests began to fail
}

// NewTeamRanks reads world ranks, rank r from the agent at url(r) (asked
// again for every request), recording every batch in tr.
func NewTeamRanks(t *testing.T, tr *Trainer, world int, url func(rank int) string) *TeamRanks {
	tr.client.Timeout = time.Minute
	rs := &TeamRanks{tr: tr, world: world, url: url, steps: make([]map[int][]int, world), logf: t.Logf, retrying: map[int]int{},
		parked: map[int]int{}, resume: map[int]chan struct{}{}, sends: map[string]*sends{}}
	for r := range rs.steps {
		rs.steps[r] = map[int][]int{}
	}
	return rs
}

// PauseAfter makes ranks stop after their nth part, for each n in at,
// until all of them did; f(n) runs then, with none of their requests in
// flight.
func (rs *TeamRanks) PauseAfter(ranks, at []int, f func(n int)) {
	rs.pauseRanks, rs.pauseAt, rs.pause = ranks, at, f
	for _, n := range at {
		rs.resume[n] = make(chan struct{})
	}
}

// Run reads every rank to its 410.
func (rs *TeamRanks) Run(ctx context.Context) error {
	errs := make(chan error, rs.world)
	for r := range rs.world {
		go func() { errs <- rs.runRank(ctx, r) }()
	}
	var first error
	for range rs.world {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (rs *TeamRanks) runRank(ctx context.Context, rank int) error {
	n := 0
	for {
		err := rs.next(ctx, rank)
		switch {
		case err == errGone:
			return nil
		case err == nil:
			n++
			rs.readSends(ctx, rank)
			rs.maybePause(ctx, rank, n)
		case ctx.Err() != nil:
			return fmt.Errorf("rank %d after %d parts: %w (last: %v)", rank, n, ctx.Err(), err)
		case isRetryable(err):
			rs.logRetry(rank, n, err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		default:
			return fmt.Errorf("rank %d after %d parts: %w", rank, n, err)
		}
	}
}

// logRetry notes a rank's failed request (an agent restarting) in the
// test log, the first of a run of them.
func (rs *TeamRanks) logRetry(rank, n int, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.retrying[rank] != n {
		rs.retrying[rank] = n
		rs.logf("rank %d after %d parts: %v; retrying", rank, n, err)
	}
}

func (rs *TeamRanks) maybePause(ctx context.Context, rank, n int) {
	if !slices.Contains(rs.pauseRanks, rank) || !slices.Contains(rs.pauseAt, n) {
		return
	}
	rs.mu.Lock()
	rs.parked[n]++
	last := rs.parked[n] == len(rs.pauseRanks)
	rs.mu.Unlock()
	if last {
		rs.pause(n)
		close(rs.resume[n])
	}
	select {
	case <-rs.resume[n]:
	case <-ctx.Done():
	}
}

// next gets rank's next part and records it in the trainer.
func (rs *TeamRanks) next(ctx context.Context, rank int) error {
	u := fmt.Sprintf("%s/v1/batch?rank=%d&world_size=%d", rs.url(rank), rank, rs.world)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	rs.tr.token.Authorize(req)
	resp, err := rs.tr.client.Do(req)
	if err != nil {
		return retryable{fmt.Errorf("rank %d: get batch: %w", rank, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusGone:
		return errGone
	case resp.StatusCode == http.StatusServiceUnavailable:
		return retryable{fmt.Errorf("rank %d: get batch: %s: %s", rank, resp.Status, body)}
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("rank %d: get batch: %s: %s", rank, resp.Status, body)
	case err != nil:
		return retryable{fmt.Errorf("rank %d: reading batch: %w", rank, err)}
	}
	b, err := traineragent.DecodeBatch(body)
	if err != nil {
		return fmt.Errorf("rank %d: decoding batch: %w", rank, err)
	}
	step, err := strconv.Atoi(resp.Header.Get(wire.AgentHeaderStep))
	if err != nil {
		return fmt.Errorf("rank %d: step header %q: %w", rank, resp.Header.Get(wire.AgentHeaderStep), err)
	}
	rs.tr.record(b, len(body))
	rs.mu.Lock()
	rs.steps[rank][b.Epoch] = append(rs.steps[rank][b.Epoch], step)
	rs.mu.Unlock()
	return nil
}

// sends count an agent's shard sends answered by a function, over its runs.
type sends struct{ before, last float64 }

// readSends scrapes the /metrics of rank's agent for its shard sends a
// function answered (its tasks' and the rows it produced again).
func (rs *TeamRanks) readSends(ctx context.Context, rank int) {
	url := rs.url(rank)
	n, found, err := scrapeLabelled(ctx, url+"/metrics", "sluice_dispatch_sends_total", []string{`outcome="ok"`})
	if err != nil || !found {
		return // a restarting agent, or none yet: the next read will do
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	a := rs.sends[url]
	if a == nil {
		a = &sends{}
		rs.sends[url] = a
	}
	if n < a.last {
		a.before += a.last // restarted
	}
	a.last = n
}

// Sends is the shard sends a function answered for the agent at url, as
// last read.
func (rs *TeamRanks) Sends(url string) float64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if a := rs.sends[url]; a != nil {
		return a.before + a.last
	}
	return 0
}

// CheckSteps checks that every rank got the same steps of each of epochs, in
// order, and logs them.
func (rs *TeamRanks) CheckSteps(t *testing.T, epochs int) {
	t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for e := range epochs {
		want := rs.steps[0][e]
		if len(want) == 0 {
			t.Errorf("epoch %d: rank 0 got no step", e)
		}
		for r := range rs.world {
			got := rs.steps[r][e]
			if !slices.Equal(got, want) {
				t.Errorf("epoch %d: rank %d got steps %v, rank 0 %v", e, r, got, want)
			}
			if !slices.IsSorted(got) {
				t.Errorf("epoch %d: rank %d got steps out of order: %v", e, r, got)
			}
		}
		t.Logf("epoch %d: each of %d ranks got steps %v", e, rs.world, want)
	}
}
