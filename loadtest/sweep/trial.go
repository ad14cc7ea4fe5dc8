package sweep

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/supervise"
	"github.com/sluice-project/sluice/traineragent"
)

// TrialResult is what one simulated trainer saw. Times are seconds from
// its arrival, StartS from the run's start.
type TrialResult struct {
	Name string `json:"name"`
	Job  string `json:"job"`
	// Lagging trials compute Options.LagFactor times longer a step.
	Lagging bool `json:"lagging,omitempty"`
	// StartS is the trial's arrival.
	StartS float64 `json:"start_s"`
	// FirstBatchS and DoneS: its first batch, and the 410 after its last.
	FirstBatchS float64 `json:"first_batch_s"`
	DoneS       float64 `json:"done_s"`
	// StallS is the time it was blocked waiting for a batch (its agent's
	// start included), ComputeS the time it "computed".
	StallS   float64 `json:"stall_s"`
	ComputeS float64 `json:"compute_s"`
	Samples  int64   `json:"samples"`
	// Duplicates and Missing count (epoch, sample) pairs delivered more
	// than once and never.
	Duplicates int64  `json:"duplicates"`
	Missing    int64  `json:"missing"`
	Err        string `json:"error,omitempty"`
}

// trainer is one trial: the loop that reads its reader's batches from its
// job's agent.
type trainer struct {
	name, job string
	agent     *jobAgent
	stepTime  time.Duration
	lagging   bool
	expected  int64 // samples x epochs

	waiting atomic.Bool // blocked for a batch now
	started atomic.Bool
	done    atomic.Bool

	mu  sync.Mutex
	res TrialResult
}

// run starts the trial's job's agent, unless another trial of the job
// did, and reads the trial's batches to the end.
func (t *trainer) run(ctx context.Context, o Options, natsURL string, runStart time.Time) {
	arrived := time.Now()
	t.mu.Lock()
	t.res = TrialResult{Name: t.name, Job: t.job, Lagging: t.lagging, StartS: arrived.Sub(runStart).Seconds()}
	t.mu.Unlock()
	t.started.Store(true)
	t.waiting.Store(true)
	defer t.done.Store(true)
	defer t.waiting.Store(false)
	err := t.read(ctx, o, natsURL, arrived)
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.res.Err = err.Error()
	}
}

func (t *trainer) read(ctx context.Context, o Options, natsURL string, arrived time.Time) error {
	// After every trial's last 410 the agent writes that their readers are
	// done and exits by itself: a SIGTERM then would leave the job
	// unfinished. The last trial of the job to end stops it.
	ended := false
	defer func() { t.agent.release(ended) }()
	agentURL, err := t.agent.start(ctx, o, natsURL)
	if err != nil {
		return err
	}
	base := agentURL + "/r/" + t.name
	seen := map[string]int{}
	var steps int64
	var wait, compute time.Duration
	defer func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.res.StallS, t.res.ComputeS = wait.Seconds(), compute.Seconds()
		t.res.Missing = t.expected - int64(len(seen))
		for _, n := range seen {
			t.res.Samples += int64(n)
			if n > 1 {
				t.res.Duplicates += int64(n - 1)
			}
		}
	}()
	wait = time.Since(arrived) // the agent's start
	for {
		t.waiting.Store(true)
		asked := time.Now()
		q := url.Values{"steps": {strconv.FormatInt(steps, 10)},
			"wait_s": {strconv.FormatFloat(wait.Seconds(), 'f', 3, 64)}, "compute_s": {strconv.FormatFloat(compute.Seconds(), 'f', 3, 64)}}
		b, end, err := getBatch(ctx, base+"/v1/batch?"+q.Encode())
		wait += time.Since(asked)
		t.waiting.Store(false)
		if err != nil {
			return err
		}
		now := time.Since(arrived).Seconds()
		if end {
			ended = true
			t.mu.Lock()
			t.res.DoneS = now
			t.mu.Unlock()
			return nil
		}
		t.mu.Lock()
		if t.res.FirstBatchS == 0 {
			t.res.FirstBatchS = now
		}
		t.mu.Unlock()
		for _, k := range b.Keys {
			seen[strconv.Itoa(b.Epoch)+"/"+k]++
		}
		steps++
		began := time.Now()
		select { // the simulated GPU step
		case <-time.After(t.stepTime):
		case <-ctx.Done():
			return ctx.Err()
		}
		compute += time.Since(began)
	}
}

// result is a copy of what the trial saw so far.
func (t *trainer) result() TrialResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res
}

// getBatch GETs one batch; end is true on 410 Gone.
func getBatch(ctx context.Context, u string) (traineragent.Batch, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return traineragent.Batch{}, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return traineragent.Batch{}, false, fmt.Errorf("getting a batch: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return traineragent.Batch{}, false, fmt.Errorf("reading a batch: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		b, err := traineragent.DecodeBatch(body)
		return b, false, err
	case http.StatusGone:
		if resp.Header.Get("Sluice-End") != "delivered" {
			return traineragent.Batch{}, false, fmt.Errorf("the job ended: %s", bytes.TrimSpace(body))
		}
		return traineragent.Batch{}, true, nil
	}
	return traineragent.Batch{}, false, fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(body))
}

// jobAgent is the one `sluice agent` process of a job: it serves every
// trial of the job (a reader each, at /r/<trial>), so each shard is
// preprocessed once for all of them. The first trial of the job to
// arrive starts it; the last to end stops it.
type jobAgent struct {
	job    string
	noShed bool // --max-lag-bytes -1

	once sync.Once
	url  string
	stop func(grace time.Duration)
	err  error

	mu       sync.Mutex
	left     int  // trials not ended yet
	allEnded bool // every trial ended got its last 410
}

func newJobAgent(job string, trials int, noShed bool) *jobAgent {
	return &jobAgent{job: job, left: trials, allEnded: true, noShed: noShed}
}

// start starts the agent once and returns its base URL.
func (a *jobAgent) start(ctx context.Context, o Options, natsURL string) (string, error) {
	a.once.Do(func() { a.url, a.stop, a.err = startAgent(ctx, o, natsURL, a.job, a.noShed) })
	return a.url, a.err
}

// release notes that a trial ended (ended: with its last 410); the last
// trial's release stops the agent, giving it time to exit by itself when
// every trial ended so.
func (a *jobAgent) release(ended bool) {
	a.mu.Lock()
	a.left--
	a.allEnded = a.allEnded && ended
	last, grace := a.left == 0, time.Duration(0)
	if a.allEnded {
		grace = 30 * time.Second
	}
	a.mu.Unlock()
	if last && a.stop != nil {
		a.stop(grace)
	}
}

// startAgent runs `sluice agent` for job (serving every reader the job
// declares) and returns its base URL once it serves, and what stops it.
func startAgent(ctx context.Context, o Options, natsURL, job string, noShed bool) (string, func(grace time.Duration), error) {
	args := append(append([]string{}, o.Command[1:]...), "agent", "--job", job, "--name", "agent-"+job,
		"--listen", "127.0.0.1:0", "--nats", natsURL, "--linger", "2s", "--log-level", "warn")
	if noShed {
		args = append(args, "--max-lag-bytes", "-1")
	}
	cmd := exec.Command(o.Command[0], args...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.Stderr = os.Stderr
	return startReady(ctx, cmd, "agent of job "+job)
}

// startReady starts cmd and waits for its ready line on stdout; stop
// waits up to grace for it to exit by itself, then sends SIGTERM and
// waits for it to exit (SIGKILL after 15 s; internal/supervise).
func startReady(ctx context.Context, cmd *exec.Cmd, what string) (string, func(grace time.Duration), error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	p, err := supervise.Start(cmd, supervise.Options{})
	if err != nil {
		return "", nil, fmt.Errorf("starting %s: %w", what, err)
	}
	stop := func(grace time.Duration) {
		select {
		case <-p.Done():
			return
		case <-time.After(grace):
		}
		_ = p.Stop(15 * time.Second)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url, err := ready.Wait(wctx, out)
	switch {
	case err == nil:
		return url, stop, nil
	case ctx.Err() != nil:
		stop(0)
		return "", nil, ctx.Err()
	case wctx.Err() != nil:
		stop(0)
		return "", nil, fmt.Errorf("%s did not get ready within a minute", what)
	}
	stop(0)
	return "", nil, fmt.Errorf("%s: %w", what, err)
}
