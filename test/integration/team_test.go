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

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

// A team scenario's sizes: 150 samples in 5 shards, batches of 8 for a
// world of 4, so each epoch has 4 full steps and a last one of 22 split
// over the ranks.
const (
	teamSamples = 150
	teamShards  = 5
	teamBatch   = 8
	teamWorld   = 4
)

// teamJob is a spec over d with a team scenario's sizes.
func teamJob(id string, d Dataset) Spec {
	return Spec{"id": id, "dataset": d.URL(), "pipeline": "imagenet-eval",
		"batch_size": teamBatch, "epochs": scenarioEpochs, "seed": 7, "max_replicas": 2}
}

// startTeam starts a reader's team of two `sluice agent` processes, as on
// two nodes: the planner serving ranks 0 and 1, and the member serving 2
// and 3, each on its own port with its own name.
func startTeam(c *Cluster, job string) (planner, member *Agent) {
	c.T.Helper()
	world := "--world-size=" + strconv.Itoa(teamWorld)
	planner = c.StartAgent("agent-node0", job, world, "--ranks=0,1")
	member = c.StartAgent("agent-node1", job, world, "--ranks=2,3")
	return planner, member
}

// TestIntegrationTeam: one job read by a DDP trainer of 4 ranks on two
// "nodes", each with its own `sluice agent` (--ranks 0,1 and --ranks
// 2,3), each rank's client reading its own node's agent until 410. Every
// sample of every epoch reaches exactly one rank exactly once, every rank
// takes the same steps of each epoch, the job succeeds and no output
// passes through NATS.
func TestIntegrationTeam(t *testing.T) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages("team", "train/", SmallImages(teamSamples, teamShards, 21))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(teamJob("team", d))
	planner, member := startTeam(c, "team")
	bytes := c.MeasureNATSBytes()
	tr := NewTrainer()
	ranks := newTeamRanks(t, tr, teamWorld, func(r int) string {
		if r < 2 {
			return planner.URL
		}
		return member.URL
	})
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	if err := ranks.Run(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	bytes.Check(t, "team", tr.Bytes())
	waitReleased(t, c, js, "team", wire.JobSucceeded, ctrl)
	ranks.CheckSteps(t)
	t.Logf("shard sends answered (tasks and rows produced again): planner %.0f, member %.0f, for %d tasks",
		ranks.Sends(planner.URL), ranks.Sends(member.URL), teamShards*scenarioEpochs)
	logReport(t, tr.Check("team", d.Keys, scenarioEpochs, nil, took))
}

// TestIntegrationTeamMemberRestart: the member agent (ranks 2 and 3) is
// SIGKILLed mid-epoch 0 and again mid-epoch 1, and started again with the
// same flags; its ranks' clients retry at once, as a trainer's would,
// until it serves again. The planner has the rows the killed member held
// produced again, and every sample still reaches one rank exactly once.
//
// The kills come between the member's ranks' requests: both park after
// the same step, the member is killed and restarted, and they go on (a
// part being written when its agent dies is lost or repeated, as in
// TestIntegrationAgentRestart).
func TestIntegrationTeamMemberRestart(t *testing.T) {
	teamMemberRestart(t, "team-restart", false)
}

// TestIntegrationTeamMemberRestartReady is TestIntegrationTeamMemberRestart
// with the member's ranks waiting for the restarted member's /readyz
// before they go on.
func TestIntegrationTeamMemberRestartReady(t *testing.T) {
	teamMemberRestart(t, "team-restart-ready", true)
}

func teamMemberRestart(t *testing.T, job string, waitReady bool) {
	c := StartCluster(t, binaries(t), ClusterOptions{})
	d := c.UploadImages(job, "train/", SmallImages(teamSamples, teamShards, 22))
	_, js := c.JetStream()
	ctrl := c.StartController("controller", ControllerOptions{})

	start := time.Now()
	c.Submit(teamJob(job, d))
	planner, member := startTeam(c, job)
	tr := NewTrainer()
	ranks := newTeamRanks(t, tr, teamWorld, func(r int) string {
		if r < 2 {
			return planner.URL
		}
		return member.URL
	})
	// Each rank's parts of the whole run (5 per epoch): mid epoch 0, and
	// mid epoch 1.
	ranks.PauseAfter([]int{2, 3}, []int{2, 7}, func(n int) {
		url, err := member.Restart()
		if err != nil {
			t.Errorf("restarting the member after its ranks' part %d: %v", n, err)
			return
		}
		if waitReady {
			testenv.CheckFor(t, time.Minute, 20*time.Millisecond, func() error { return readyz(url) })
		}
		t.Logf("SIGKILLed and restarted the member agent after its ranks' part %d (%d samples delivered); serving again at %s",
			n, tr.Samples(), url)
	})
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	if err := ranks.Run(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	waitReleased(t, c, js, job, wire.JobSucceeded, ctrl)
	ranks.CheckSteps(t)
	t.Logf("shard sends answered (tasks and rows produced again): planner %.0f, member %.0f over its 3 runs, for %d tasks",
		ranks.Sends(planner.URL), ranks.Sends(member.URL), teamShards*scenarioEpochs)
	logReport(t, tr.Check(job, d.Keys, scenarioEpochs, nil, took))
}

// readyz is nil once the agent at url answers /readyz with 200.
func readyz(url string) error {
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s/readyz: %s %s", url, resp.Status, body)
	}
	return nil
}

// teamRanks are a DDP trainer's ranks, each reading its part of every
// step from its node's agent (GET /v1/batch?rank=R&world_size=W) until
// 410, all recorded in one Trainer's by-key record.
type teamRanks struct {
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

func newTeamRanks(t *testing.T, tr *Trainer, world int, url func(rank int) string) *teamRanks {
	tr.client.Timeout = time.Minute
	rs := &teamRanks{tr: tr, world: world, url: url, steps: make([]map[int][]int, world), logf: t.Logf, retrying: map[int]int{},
		parked: map[int]int{}, resume: map[int]chan struct{}{}, sends: map[string]*sends{}}
	for r := range rs.steps {
		rs.steps[r] = map[int][]int{}
	}
	return rs
}

// PauseAfter makes ranks stop after their nth part, for each n in at,
// until all of them did; f(n) runs then, with none of their requests in
// flight.
func (rs *teamRanks) PauseAfter(ranks, at []int, f func(n int)) {
	rs.pauseRanks, rs.pauseAt, rs.pause = ranks, at, f
	for _, n := range at {
		rs.resume[n] = make(chan struct{})
	}
}

// Run reads every rank to its 410.
func (rs *teamRanks) Run(ctx context.Context) error {
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

func (rs *teamRanks) runRank(ctx context.Context, rank int) error {
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
func (rs *teamRanks) logRetry(rank, n int, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.retrying[rank] != n {
		rs.retrying[rank] = n
		rs.logf("rank %d after %d parts: %v; retrying", rank, n, err)
	}
}

func (rs *teamRanks) maybePause(ctx context.Context, rank, n int) {
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
func (rs *teamRanks) next(ctx context.Context, rank int) error {
	u := fmt.Sprintf("%s/v1/batch?rank=%d&world_size=%d", rs.url(rank), rank, rs.world)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
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
func (rs *teamRanks) readSends(ctx context.Context, rank int) {
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
func (rs *teamRanks) Sends(url string) float64 {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if a := rs.sends[url]; a != nil {
		return a.before + a.last
	}
	return 0
}

// CheckSteps checks that every rank got the same steps of every epoch, in
// order, and logs them.
func (rs *teamRanks) CheckSteps(t *testing.T) {
	t.Helper()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for e := range scenarioEpochs {
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
