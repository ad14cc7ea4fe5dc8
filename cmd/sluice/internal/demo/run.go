package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/controller"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/objstore"
	"github.com/sluice-project/sluice/internal/slowlink"
	"github.com/sluice-project/sluice/jobspec"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/traineragent"
	"github.com/sluice-project/sluice/wire"
)

const (
	jobID       = "demo"
	bucket      = "sluice-demo"
	prefix      = "synthetic/"
	demoKey     = "sluice"
	demoSecret  = "sluice-demo-secret"
	tickEvery   = time.Second
	drainWithin = 60 * time.Second
)

// Run executes the demo and returns its summary. progress, when not nil, is
// called about twice a second with a live snapshot. reg may be nil.
func Run(ctx context.Context, o Options, logger *slog.Logger, reg prometheus.Registerer, progress func(Progress)) (Summary, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := o.Validate(); err != nil {
		return Summary{}, err
	}
	start := time.Now()

	// 1. The embedded defaults: NATS JetStream and S3 on loopback.
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: o.DataDir})
	if err != nil {
		return Summary{}, err
	}
	defer nsrv.Shutdown()
	s3srv, err := embedded.StartS3("")
	if err != nil {
		return Summary{}, err
	}
	defer s3srv.Close()
	conn := connect.Default()
	conn.NATS.URLs = []string{nsrv.URL()}
	conn.S3.Endpoint, conn.S3.PathStyle = s3srv.Endpoint(), true
	// The embedded endpoint's own keys: given to this process's client
	// directly, and to the replicas through the environment, where the AWS
	// SDK's default chain finds them.
	ocfg := conn.Objstore()
	ocfg.Credentials = credentials.NewStaticCredentialsProvider(demoKey, demoSecret, "")
	s3c, err := objstore.NewClient(ctx, ocfg, reg)
	if err != nil {
		return Summary{}, err
	}

	// 2. Dataset.
	shards, err := dataset(o)
	if err != nil {
		return Summary{}, fmt.Errorf("generating dataset: %w", err)
	}
	if err := synth.Upload(ctx, s3c, bucket, prefix, shards); err != nil {
		return Summary{}, err
	}
	logger.Info("dataset written", "kind", o.Dataset, "samples", o.Samples, "shards", o.Shards, "url", "s3://"+bucket+"/"+prefix)
	var datasetBytes int64
	for _, sh := range shards {
		datasetBytes += int64(len(sh.Data))
	}
	// The replicas read S3 through the slow link when one is asked for.
	replicaConn := conn
	var link *slowlink.Proxy
	if o.SlowS3 != (slowlink.Options{}) {
		if link, err = slowlink.Start(s3srv.Endpoint(), o.SlowS3); err != nil {
			return Summary{}, err
		}
		defer link.Close()
		replicaConn.S3.Endpoint = link.URL()
	}

	// 3. The job, as `sluice job submit` submits it.
	nc, js, err := conn.ConnectNATS(ctx, "sluice-demo", logger)
	if err != nil {
		return Summary{}, err
	}
	defer nc.Close()
	b := broker.New(js, s3c, conn.Streams(), logger.With("component", "broker")).WithSpecCheck(jobspec.Check)
	// A --data-dir kept from an earlier run still holds that run's job.
	if err := b.Delete(ctx, jobID, true); err != nil && !errors.Is(err, broker.ErrJobNotFound) {
		return Summary{}, fmt.Errorf("clearing the previous demo job: %w", err)
	}
	submitted := time.Now()
	if _, err := b.Submit(ctx, wire.JobSpec{
		ID: jobID, Dataset: "s3://" + bucket + "/" + prefix, Pipeline: o.Pipeline,
		BatchSize: o.BatchSize, Epochs: o.Epochs, Seed: o.Seed, ChunkMaxBytes: o.ChunkMaxBytes,
		MinReplicas: o.MinReplicas,
	}); err != nil {
		return Summary{}, err
	}

	// The processes authenticate to each other as a deployment's would
	// (internal/bearer): the replicas require a function token, which the
	// agent sends, and the agent's API an agent token, which the trainer
	// sends. Both are random, for this run.
	fnToken, err := bearer.Random()
	if err != nil {
		return Summary{}, err
	}
	agentToken, err := bearer.Random()
	if err != nil {
		return Summary{}, err
	}

	// 4. The controller, as `sluice controller --actuator local` runs it:
	// zero replicas to start with; its autoscaler starts them.
	ropts := local.FnServe(o.ReplicaCommand, o.ReplicaCPUs, 1, replicaConn).WithCache(o.Cache).WithToken(fnToken)
	ropts.Env = append(ropts.Env, "AWS_ACCESS_KEY_ID="+demoKey, "AWS_SECRET_ACCESS_KEY="+demoSecret)
	act := local.New(ropts, logger.With("component", "actuator"), reg)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = act.Close(cctx)
	}()
	ctl, err := controller.New(controller.Options{
		ID: "demo", NC: nc, JS: js, Streams: conn.Streams(), Broker: b, Actuator: act,
		Tick: tickEvery, MaxReplicas: o.MaxReplicas,
	}, logger.With("component", "controller"), reg)
	if err != nil {
		return Summary{}, err
	}

	// 5. The trainer agent, as `sluice agent --job demo` serves it. GPU
	// utilisation goes into the demand signals where NVML finds a GPU;
	// elsewhere the agent reports -1 and the wait time alone measures stall.
	agentOpts := traineragent.Options{}
	agentOpts.Dispatch.Token = fnToken
	if gpu, closeGPU, err := traineragent.OpenNVML(logger); err == nil {
		agentOpts.GPU = gpu
		defer closeGPU()
	} else {
		logger.Info("no GPU utilisation", "reason", err)
	}
	chaosCtx, stopChaos := context.WithCancel(ctx)
	defer stopChaos()
	if o.ChaosKillMidShard > 0 {
		agentOpts.Dispatch.HTTPClient = &http.Client{Transport: chaosMidShard(chaosCtx, act, o.ChaosKillMidShard, o.Seed, logger)}
	}
	agent, err := traineragent.Open(ctx, nc, js, jobID, agentOpts, logger.With("component", "agent"), traineragent.NewMetrics(reg), reg)
	if err != nil {
		return Summary{}, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Summary{}, fmt.Errorf("listening for the trainer: %w", err)
	}
	hs := httpserve.New(agent.Handler(), httpserve.Options{Token: agentToken, Source: bearer.Agent, Logger: logger})
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	goRun("controller", ctl.Run)
	goRun("trainer agent", func(ctx context.Context) error {
		err := agent.Run(ctx)
		if errors.Is(err, traineragent.ErrJobEnded) {
			return nil // the job failed: the summary says why
		}
		return err
	})

	if o.ChaosKillEvery > 0 {
		go chaos(chaosCtx, act, o.ChaosKillEvery, o.Seed, logger)
	}

	// 6. The simulated trainer, reading batches over HTTP.
	tr := &trainer{url: "http://" + ln.Addr().String() + "/v1/batch", token: agentToken, stepTime: o.StepTime, seen: map[string]int{}, epochEnd: map[int]time.Time{}}
	expected := int64(o.Samples) * int64(o.Epochs)
	stopProgress := reportProgress(runCtx, progress, tr, act, expected, start)
	trainErr := tr.run(runCtx)
	stopChaos()

	// 7. The job ends (the controller marks it and releases it) and the
	// replicas go back to zero.
	var final wire.Job
	if trainErr == nil {
		trainErr = waitFor(runCtx, drainWithin, func() bool {
			j, err := b.Job(runCtx, jobID)
			if err != nil || !j.State.Terminal() {
				return false
			}
			final = j
			return act.Ready(jobID) == 0 && act.Counts().Live == 0
		})
		if trainErr != nil {
			trainErr = fmt.Errorf("waiting for the job to end and its replicas to stop: %w", trainErr)
		}
	}
	stopProgress()
	_, status, statusErr := b.Status(ctx, jobID)
	events := ctl.Runner().Events()
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		trainErr = errors.Join(trainErr, err)
	}
	if trainErr != nil && ctx.Err() == nil {
		return Summary{}, trainErr
	}
	if ctx.Err() != nil {
		return Summary{}, ctx.Err()
	}
	if statusErr != nil {
		return Summary{}, fmt.Errorf("reading the job's final status: %w", statusErr)
	}

	ast, counts := agent.Stats(), act.Counts()
	s := Summary{
		Job:                  jobID,
		State:                string(final.State),
		Reason:               final.Reason,
		SamplesExpected:      expected,
		SamplesDelivered:     int64(len(tr.seen)),
		Duplicates:           tr.duplicates,
		FailedSamples:        nonNil(ast.FailedSamples),
		FailedSamplesOmitted: ast.FailedSamplesOmitted,
		FailedShards:         nonNil(status.FailedShards),
		Epochs:               ast.Epochs,
		StallFraction:        ratio(tr.waited.Seconds(), tr.ran.Seconds()),
		AgentStallFraction:   ratio(ast.StallTime.Seconds(), tr.ran.Seconds()),
		WallS:                time.Since(start).Seconds(),
		ReplicasMax:          counts.MaxLive,
		ReplicasFinal:        counts.Live,
		ReplicasKilled:       counts.Killed,
		ReplicaCPUS:          counts.CPU.Seconds(),
		TaskRedeliveries:     status.Tasks.Redeliveries,
		DuplicateChunks:      ast.DuplicateChunks,
	}
	s.Lost = s.SamplesExpected - s.SamplesDelivered - s.failedCount()
	s.DatasetBytes = datasetBytes
	s.S3BytesPerEpoch, s.CacheHits, s.CacheMisses = status.S3BytesPerEpoch, status.CacheHits, status.CacheMisses
	s.CacheMemoryHits = status.CacheMemoryHits
	if link != nil {
		s.S3LinkBytes = link.Bytes()
	}
	prev := submitted
	for e := range o.Epochs {
		end, ok := tr.epochEnd[e]
		if !ok {
			break
		}
		s.EpochS = append(s.EpochS, end.Sub(prev).Seconds())
		prev = end
	}
	if !tr.first.IsZero() {
		s.TimeToFirstBatchS = tr.first.Sub(submitted).Seconds()
		s.ThroughputSamplesPerS = ratio(float64(s.SamplesDelivered), tr.last.Sub(submitted).Seconds())
	}
	for _, e := range events {
		if e.Job == jobID {
			s.ScaleEvents = append(s.ScaleEvents, ScaleEvent{TS: e.Time.Sub(start).Seconds(), Replicas: e.Replicas, Reason: e.Reason})
		}
	}
	return s, nil
}

// dataset generates the synthetic shards o asks for.
func dataset(o Options) ([]synth.Shard, error) {
	switch o.Dataset {
	case "text":
		to := synth.DefaultTextOptions()
		to.Samples, to.Shards, to.Seed = o.Samples, o.Shards, o.Seed
		return synth.Text(to)
	case "tabular":
		to := synth.DefaultTabularOptions()
		to.Samples, to.Shards, to.Seed = o.Samples, o.Shards, o.Seed
		return synth.Tabular(to)
	}
	io := synth.DefaultImageOptions()
	io.Samples, io.Shards, io.Seed, io.Corrupt = o.Samples, o.Shards, o.Seed, o.Corrupt
	return synth.Images(io)
}

// trainer stands in for a training script: it reads batches from the
// agent's GET /v1/batch until 410 Gone and "computes" for stepTime each,
// counting what it saw by (epoch, key).
type trainer struct {
	url         string
	token       bearer.Token
	stepTime    time.Duration
	mu          sync.Mutex
	seen        map[string]int // epoch/key -> deliveries
	duplicates  int64
	delivered   atomic.Int64
	waitedNanos atomic.Int64
	waited, ran time.Duration
	first, last time.Time
	epochEnd    map[int]time.Time // each epoch's last batch
}

func (t *trainer) run(ctx context.Context) error {
	began := time.Now()
	defer func() { t.ran = time.Since(began); t.waited = time.Duration(t.waitedNanos.Load()) }()
	for {
		asked := time.Now()
		batch, err := t.next(ctx)
		t.waitedNanos.Add(int64(time.Since(asked)))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("trainer: next batch: %w", err)
		}
		now := time.Now()
		if t.first.IsZero() {
			t.first = now
		}
		t.last = now
		t.mu.Lock()
		t.epochEnd[batch.Epoch] = now
		for _, k := range batch.Keys {
			id := strconv.Itoa(batch.Epoch) + "/" + k
			if t.seen[id]++; t.seen[id] > 1 {
				t.duplicates++
			}
		}
		t.mu.Unlock()
		t.delivered.Add(int64(len(batch.Keys)))
		select { // the simulated GPU step
		case <-time.After(t.stepTime):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// next GETs one batch; io.EOF once the agent says every batch was
// delivered (or the job ended: the summary says how).
func (t *trainer) next(ctx context.Context) (traineragent.Batch, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err != nil {
		return traineragent.Batch{}, err
	}
	t.token.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return traineragent.Batch{}, err
	}
	defer resp.Body.Close()
	var body []byte
	if resp.ContentLength > 0 && resp.ContentLength < 1<<31 {
		body = make([]byte, resp.ContentLength) // a batch is MBs: read it once
		_, err = io.ReadFull(resp.Body, body)
	} else {
		body, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return traineragent.Batch{}, fmt.Errorf("reading a batch: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return traineragent.DecodeBatch(body)
	case http.StatusGone:
		return traineragent.Batch{}, io.EOF
	}
	return traineragent.Batch{}, fmt.Errorf("GET %s: %s: %s", t.url, resp.Status, bytes.TrimSpace(body))
}

// chaos SIGKILLs a random replica every period.
func chaos(ctx context.Context, act *local.Actuator, every time.Duration, seed uint64, logger *slog.Logger) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if act.KillRandom(jobID, rng) {
				logger.Info("chaos: killed a replica")
			}
		}
	}
}

// chaosMidShard is the agent's transport to the replicas: it SIGKILLs a
// random replica when a shard's first chunk arrives, up to kills times.
func chaosMidShard(ctx context.Context, act *local.Actuator, kills int, seed uint64, logger *slog.Logger) http.RoundTripper {
	return &chaosTransport{ctx: ctx, act: act, kills: kills, rng: rand.New(rand.NewPCG(seed, 0xc4a06)), log: logger,
		next: http.DefaultTransport}
}

type chaosTransport struct {
	ctx  context.Context
	act  *local.Actuator
	log  *slog.Logger
	next http.RoundTripper

	mu    sync.Mutex
	kills int
	rng   *rand.Rand
}

func (c *chaosTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	resp.Body = &firstFrame{ReadCloser: resp.Body, arrived: c.kill}
	return resp, nil
}

// kill SIGKILLs a replica, while kills are left.
func (c *chaosTransport) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kills == 0 || c.ctx.Err() != nil {
		return
	}
	if c.act.KillRandom(jobID, c.rng) {
		c.kills--
		c.log.Info("chaos: killed a replica mid-shard")
	}
}

// firstFrame calls arrived once a whole frame header was read: the shard's
// first chunk is arriving.
type firstFrame struct {
	io.ReadCloser
	n       int
	arrived func()
}

func (f *firstFrame) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if f.n < wire.FrameHeaderLen && f.n+n >= wire.FrameHeaderLen {
		f.arrived()
	}
	f.n += n
	return n, err
}

// reportProgress calls progress every 500ms until the returned stop is called.
func reportProgress(ctx context.Context, progress func(Progress), tr *trainer, act *local.Actuator, expected int64, start time.Time) (stop func()) {
	if progress == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var lastN, lastWait int64
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				n, w := tr.delivered.Load(), tr.waitedNanos.Load()
				dt := now.Sub(last)
				c := act.Counts()
				progress(Progress{
					Elapsed: now.Sub(start), Delivered: n, Expected: expected,
					SamplesPerS:   float64(n-lastN) / dt.Seconds(),
					StallFraction: min(1, ratio(float64(w-lastWait), float64(dt))),
					Replicas:      act.Ready(jobID), Killed: c.Killed,
				})
				lastN, lastWait, last = n, w, now
			}
		}
	}()
	return func() { cancel(); <-done }
}

func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func nonNil(f []wire.FailedSample) []wire.FailedSample {
	if f == nil {
		return []wire.FailedSample{}
	}
	return f
}
