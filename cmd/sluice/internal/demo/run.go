package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/autoscale"
	"github.com/sluice-project/sluice/autoscale/local"
	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/controller"
	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/httpserve"
	"github.com/sluice-project/sluice/internal/kvpoll"
	"github.com/sluice-project/sluice/internal/natsperm"
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
	p := &parts{o: o, logger: logger, reg: reg, start: time.Now()}
	defer p.close()
	for _, step := range []func(context.Context) error{
		p.startStores,  // 1. the embedded defaults
		p.writeDataset, // 2. the dataset
		p.startSlowLink,
		p.submitJob,       // 3. the job
		p.startController, // 4. the controller
		p.openAgent,       // 5. the trainer agent
	} {
		if err := step(ctx); err != nil {
			return Summary{}, err
		}
	}
	return p.run(ctx, progress) // 6. the simulated trainer; 7. the drain
}

// parts are the processes of one demo run, as Run starts them; close stops
// them in the reverse order.
type parts struct {
	o       Options
	logger  *slog.Logger
	reg     prometheus.Registerer
	start   time.Time
	closers []func()

	conn, replicaConn   connect.Config
	auth                *embedded.NATSAuth
	teamKey             []byte
	s3c                 *s3.Client
	link                *slowlink.Proxy
	datasetBytes        int64
	vocabDir            string // the replicas' --vocab-dir (lm only)
	perEpoch            int64  // rows an epoch delivers or fails
	nc                  *nats.Conn
	js                  jetstream.JetStream
	b                   *broker.Broker
	submitted           time.Time
	fnToken, agentToken bearer.Token
	act                 *local.Actuator
	ctl                 *controller.Controller
	agent               *traineragent.Agent
	agentAddr           string
	chaosCtx            context.Context
	stopChaos           context.CancelFunc
}

// onClose runs f when the run ends, before what was started earlier stops.
func (p *parts) onClose(f func()) { p.closers = append(p.closers, f) }

func (p *parts) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// startStores starts the embedded defaults, NATS JetStream and S3 on
// loopback, and this process's S3 client.
func (p *parts) startStores(ctx context.Context) error {
	// NATS with the shipped authorization, as a deployment runs it: the
	// broker, the controller and the agent each connect as their own user
	// (the agent as its job, let in by the controller).
	auth, err := embedded.NewNATSAuth()
	if err != nil {
		return err
	}
	p.auth = auth
	nsrv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: p.o.DataDir, Auth: auth})
	if err != nil {
		return err
	}
	p.onClose(nsrv.Shutdown)
	s3srv, err := embedded.StartS3("")
	if err != nil {
		return err
	}
	p.onClose(func() { s3srv.Close() })
	p.conn = connect.Default()
	p.conn.NATS.URLs = []string{nsrv.URL()}
	p.conn.S3.Endpoint, p.conn.S3.PathStyle = s3srv.Endpoint(), true
	// The embedded endpoint's own keys: given to this process's client
	// directly, and to the replicas through the environment, where the AWS
	// SDK's default chain finds them.
	ocfg := p.conn.Objstore()
	ocfg.Credentials = credentials.NewStaticCredentialsProvider(demoKey, demoSecret, "")
	p.s3c, err = objstore.NewClient(ctx, ocfg, p.reg)
	return err
}

// startSlowLink puts the slow link between the replicas and S3 when one is
// asked for.
func (p *parts) startSlowLink(context.Context) error {
	p.replicaConn = p.conn
	if p.o.SlowS3 == (slowlink.Options{}) {
		return nil
	}
	var err error
	if p.link, err = slowlink.Start(p.conn.S3.Endpoint, p.o.SlowS3); err != nil {
		return err
	}
	p.onClose(func() { p.link.Close() })
	p.replicaConn.S3.Endpoint = p.link.URL()
	return nil
}

// writeDataset generates the synthetic dataset and uploads it.
func (p *parts) writeDataset(ctx context.Context) error {
	o := p.o
	shards, err := dataset(o)
	if err != nil {
		return fmt.Errorf("generating dataset: %w", err)
	}
	if err := synth.Upload(ctx, p.s3c, bucket, prefix, shards); err != nil {
		return err
	}
	p.logger.Info("dataset written", "kind", o.Dataset, "samples", o.Samples, "shards", o.Shards, "url", "s3://"+bucket+"/"+prefix)
	p.perEpoch = int64(o.Samples)
	if o.Dataset == "lm" {
		if err := p.writeVocab(); err != nil {
			return err
		}
		// Packing makes rows of the documents: how many, the demo
		// learns by packing them here as the replicas will.
		rows, packs, err := expectedRows(shards, o.Pipeline, p.vocabDir)
		if err != nil {
			return fmt.Errorf("counting the rows: %w", err)
		}
		if packs {
			p.perEpoch = rows
		}
	}
	for _, sh := range shards {
		p.datasetBytes += int64(len(sh.Data))
	}
	return nil
}

// submitJob submits the job as `sluice job submit` does, and draws the
// run's tokens.
func (p *parts) submitJob(ctx context.Context) error {
	o := p.o
	var err error
	// As the admin: the demo deletes what an earlier run left.
	if p.nc, p.js, err = p.connectAs(ctx, natsperm.Admin(), "sluice-demo"); err != nil {
		return err
	}
	p.b = broker.New(p.js, p.s3c, p.conn.Streams(), p.logger.With("component", "broker")).WithSpecCheck(jobspec.Check)
	// A --data-dir kept from an earlier run still holds that run's job.
	if err := p.b.Delete(ctx, jobID, true); err != nil && !errors.Is(err, broker.ErrJobNotFound) {
		return fmt.Errorf("clearing the previous demo job: %w", err)
	}
	p.submitted = time.Now()
	// The job's team key, as `sluice job submit` issues it: the agent's
	// NATS credential.
	if p.teamKey, err = wire.ParseTeamKey(wire.NewTeamKey()); err != nil {
		return err
	}
	if _, err := p.b.Submit(ctx, wire.JobSpec{
		ID: jobID, Dataset: "s3://" + bucket + "/" + prefix, Pipeline: o.Pipeline,
		BatchSize: o.BatchSize, Epochs: o.Epochs, Seed: o.Seed, ChunkMaxBytes: o.ChunkMaxBytes,
		MinReplicas: o.MinReplicas,
	}, broker.WithTeamKey(p.teamKey)); err != nil {
		return err
	}

	// The processes authenticate to each other as a deployment's would
	// (internal/bearer): the replicas require a function token, which the
	// agent sends, and the agent's API an agent token, which the trainer
	// sends. Both are random, for this run.
	if p.fnToken, err = bearer.Random(); err != nil {
		return err
	}
	p.agentToken, err = bearer.Random()
	return err
}

// connectAs connects to the embedded NATS as role's user.
func (p *parts) connectAs(ctx context.Context, role natsperm.Role, name string) (*nats.Conn, jetstream.JetStream, error) {
	c := p.conn
	c.NATS.User, c.NATS.Password, c.NATS.InboxPrefix = role.User(), p.auth.Passwords[role.Name], role.InboxPrefix
	nc, js, err := c.ConnectNATS(ctx, name, p.logger)
	if err != nil {
		return nil, nil, err
	}
	p.onClose(nc.Close)
	return nc, js, nil
}

// startController builds the controller as `sluice controller --actuator
// local` runs it: zero replicas to start with; its autoscaler starts them.
// It answers the auth callout at once, so that the agent can connect.
func (p *parts) startController(ctx context.Context) error {
	o := p.o
	ropts := local.FnServe(o.ReplicaCommand, o.ReplicaCPUs, 1, p.replicaConn).WithCache(o.Cache).WithToken(p.fnToken).WithVocabDir(p.vocabDir)
	ropts.Env = append(ropts.Env, "AWS_ACCESS_KEY_ID="+demoKey, "AWS_SECRET_ACCESS_KEY="+demoSecret)
	p.act = local.New(ropts, p.logger.With("component", "actuator"), p.reg)
	p.onClose(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = p.act.Close(cctx)
	})
	nc, js, err := p.connectAs(ctx, natsperm.Controller(), "sluice-controller demo")
	if err != nil {
		return err
	}
	p.ctl, err = controller.New(controller.Options{
		ID: "demo", NC: nc, JS: js, Streams: p.conn.Streams(), Actuator: p.act,
		Broker:        broker.New(js, nil, p.conn.Streams(), p.logger.With("component", "broker")),
		CalloutIssuer: p.auth.CalloutIssuer,
		Tick:          tickEvery, MaxReplicas: o.MaxReplicas,
	}, p.logger.With("component", "controller"), p.reg)
	if err != nil {
		return err
	}
	return p.ctl.ServeCallout()
}

// openAgent opens the trainer agent as `sluice agent --job demo` serves it,
// and serves its API on loopback. GPU utilisation goes into the demand
// signals where NVML finds a GPU; elsewhere the agent reports -1 and the
// wait time alone measures stall.
func (p *parts) openAgent(ctx context.Context) error {
	logger := p.logger
	agentOpts := traineragent.Options{TeamKey: p.teamKey} // its node credential derived from it
	agentOpts.Dispatch.Token = p.fnToken
	if gpu, closeGPU, err := traineragent.OpenNVML(logger); err == nil {
		agentOpts.GPU = gpu
		p.onClose(closeGPU)
	} else {
		logger.Info("no GPU utilisation", "reason", err)
	}
	p.chaosCtx, p.stopChaos = context.WithCancel(ctx)
	p.onClose(p.stopChaos)
	if p.o.ChaosKillMidShard > 0 {
		agentOpts.Dispatch.HTTPClient = &http.Client{Transport: chaosMidShard(p.chaosCtx, p.act, p.o.ChaosKillMidShard, p.o.Seed, logger)}
	}
	// As `sluice agent --job demo` connects: as its job, with the team
	// key; the record and plan followed by reading them.
	c := p.conn
	c.NATS.User, c.NATS.Password = wire.AgentNATSUser(jobID), wire.AgentNATSPassword(p.teamKey)
	c.NATS.InboxPrefix, c.NATS.RetryAuth = natsperm.AgentFor(jobID).InboxPrefix, true
	nc, js, err := c.ConnectNATS(ctx, "sluice-agent "+jobID, logger)
	if err != nil {
		return fmt.Errorf("the agent connecting as its job: %w", err)
	}
	p.onClose(nc.Close)
	p.agent, err = traineragent.Open(ctx, nc, kvpoll.JetStream(js, 0), jobID, agentOpts, logger.With("component", "agent"), traineragent.NewMetrics(p.reg), p.reg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for the trainer: %w", err)
	}
	p.agentAddr = ln.Addr().String()
	hs := httpserve.New(p.agent.Handler(), httpserve.Options{Token: p.agentToken, Source: bearer.Agent, Logger: logger})
	go func() { _ = hs.Serve(ln) }()
	p.onClose(func() { hs.Close() })
	return nil
}

// run runs the controller and the agent, and the simulated trainer against
// them until every batch was read; then waits for the job to end and
// summarises it.
func (p *parts) run(ctx context.Context, progress func(Progress)) (Summary, error) {
	o := p.o
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
	goRun("controller", p.ctl.Run)
	goRun("trainer agent", func(ctx context.Context) error {
		err := p.agent.Run(ctx)
		if errors.Is(err, traineragent.ErrJobEnded) {
			return nil // the job failed: the summary says why
		}
		return err
	})

	if o.ChaosKillEvery > 0 {
		go chaos(p.chaosCtx, p.act, o.ChaosKillEvery, o.Seed, p.logger)
	}

	// 6. The simulated trainer, reading batches over HTTP.
	tr := &trainer{url: "http://" + p.agentAddr + "/v1/batch", token: p.agentToken, stepTime: o.StepTime, seen: map[string]int{}, epochEnd: map[int]time.Time{}}
	expected := p.perEpoch * int64(o.Epochs)
	stopProgress := reportProgress(runCtx, progress, tr, p.act, expected, p.start)
	trainErr := tr.run(runCtx)
	p.stopChaos()

	// 7. The job ends (the controller marks it and releases it) and the
	// replicas go back to zero.
	var final wire.Job
	if trainErr == nil {
		final, trainErr = p.drain(runCtx)
	}
	stopProgress()
	_, status, statusErr := p.b.Status(ctx, jobID)
	events := p.ctl.Runner().Events()
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
	return p.summary(tr, expected, final, status, events), nil
}

// drain waits for the job to end and its replicas to stop, and returns the
// job as it ended.
func (p *parts) drain(ctx context.Context) (wire.Job, error) {
	var final wire.Job
	err := waitFor(ctx, drainWithin, func() bool {
		j, err := p.b.Job(ctx, jobID)
		if err != nil || !j.State.Terminal() {
			return false
		}
		final = j
		return p.act.Ready(jobID) == 0 && p.act.Counts().Live == 0
	})
	if err != nil {
		return final, fmt.Errorf("waiting for the job to end and its replicas to stop: %w", err)
	}
	return final, nil
}

// summary gathers what the trainer saw, the agent's and the actuator's
// counts and the job's final status into the run's summary.
func (p *parts) summary(tr *trainer, expected int64, final wire.Job, status wire.JobStatus, events []autoscale.ScaleEvent) Summary {
	ast, counts := p.agent.Stats(), p.act.Counts()
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
		WallS:                time.Since(p.start).Seconds(),
		ReplicasMax:          counts.MaxLive,
		ReplicasFinal:        counts.Live,
		ReplicasKilled:       counts.Killed,
		ReplicaCPUS:          counts.CPU.Seconds(),
		TaskRedeliveries:     status.Tasks.Redeliveries,
		DuplicateChunks:      ast.DuplicateChunks,
	}
	s.Lost = s.SamplesExpected - s.SamplesDelivered - s.failedCount()
	s.DatasetBytes = p.datasetBytes
	s.S3BytesPerEpoch, s.CacheHits, s.CacheMisses = status.S3BytesPerEpoch, status.CacheHits, status.CacheMisses
	s.CacheMemoryHits = status.CacheMemoryHits
	if p.link != nil {
		s.S3LinkBytes = p.link.Bytes()
	}
	prev := p.submitted
	for e := range p.o.Epochs {
		end, ok := tr.epochEnd[e]
		if !ok {
			break
		}
		s.EpochS = append(s.EpochS, end.Sub(prev).Seconds())
		prev = end
	}
	if !tr.first.IsZero() {
		s.TimeToFirstBatchS = tr.first.Sub(p.submitted).Seconds()
		s.ThroughputSamplesPerS = ratio(float64(s.SamplesDelivered), tr.last.Sub(p.submitted).Seconds())
	}
	for _, e := range events {
		if e.Job == jobID {
			s.ScaleEvents = append(s.ScaleEvents, ScaleEvent{TS: e.Time.Sub(p.start).Seconds(), Replicas: e.Replicas, Reason: e.Reason})
		}
	}
	return s
}

// dataset generates the synthetic shards o asks for.
func dataset(o Options) ([]synth.Shard, error) {
	switch o.Dataset {
	case "text":
		to := synth.DefaultTextOptions()
		to.Samples, to.Shards, to.Seed = o.Samples, o.Shards, o.Seed
		return synth.Text(to)
	case "lm":
		to := synth.DefaultTextOptions()
		to.Samples, to.Shards, to.Seed, to.Format = o.Samples, o.Shards, o.Seed, "jsonl"
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
