package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// Agent serves one job on one node: it dispatches the job's shard tasks to
// function replicas itself, receives their output, and feeds every reader
// it serves (a trainer, or a sweep's trials on this node) from the same
// chunks. Several agents of one job (one per node) share its task queue.
type Agent struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	job  wire.Job
	name string
	// node seals what the agent sends and check checks what it reads
	// (nil both: the job's record has no node key).
	node    *wire.NodeIdentity
	check   *wire.NodeVerifier
	opts    Options
	log     *slog.Logger
	reg     prometheus.Registerer
	readers []*Reader
	started atomic.Bool
	disp    atomic.Pointer[dispatch.Dispatcher]

	// roomCh is closed when a reader's state changes, for the sends
	// waiting for room in the output buffer (buffer.go). A leaf of the
	// lock order (see Reader): taken under a reader's mu.
	roomMu sync.Mutex
	roomCh chan struct{}
	// roomWaits counts the sends waiting for room now.
	roomWaits atomic.Int32
}

// New prepares an agent for job serving opts.Readers (default: every
// reader the job declares); Run starts it. m may be nil; reg (nil: none)
// takes the dispatcher's metrics.
func New(nc *nats.Conn, js jetstream.JetStream, job wire.Job, opts Options, logger *slog.Logger, m *Metrics, reg prometheus.Registerer) (*Agent, error) {
	if nc == nil || js == nil {
		return nil, errors.New("trainer agent: a nats connection and a jetstream context are required")
	}
	if err := wire.ValidateJobID(job.Spec.ID); err != nil {
		return nil, fmt.Errorf("trainer agent: %w", err)
	}
	declared := job.Spec.Readers
	if len(declared) == 0 {
		declared = []string{wire.DefaultReader}
	}
	names := opts.Readers
	if len(names) == 0 {
		names = declared
	}
	switch {
	case job.Spec.BatchSize < 1:
		return nil, fmt.Errorf("trainer agent: job %s: batch size %d: want >= 1", job.Spec.ID, job.Spec.BatchSize)
	case job.Spec.Epochs < 1:
		return nil, fmt.Errorf("trainer agent: job %s: epochs %d: want >= 1", job.Spec.ID, job.Spec.Epochs)
	case opts.WorldSize < 0 || opts.WorldSize > readerstate.MaxWorldSize:
		return nil, fmt.Errorf("trainer agent: world size %d: want 0..%d (0: from the first request)", opts.WorldSize, readerstate.MaxWorldSize)
	case opts.PrefetchSamples < 0:
		return nil, fmt.Errorf("trainer agent: prefetch samples %d: want >= 0 (0 for the default)", opts.PrefetchSamples)
	case opts.DemandInterval < 0:
		return nil, fmt.Errorf("trainer agent: demand interval %v: want >= 0 (0 for the default)", opts.DemandInterval)
	case opts.KeepAliveInterval < 0:
		return nil, fmt.Errorf("trainer agent: keep-alive interval %v: want >= 0 (0 for the default)", opts.KeepAliveInterval)
	}
	if err := checkRanks(job, opts, declared); err != nil {
		return nil, err
	}
	for _, r := range names {
		if !slices.Contains(declared, r) {
			return nil, fmt.Errorf("trainer agent: job %s has no reader %q: its spec declares %s",
				job.Spec.ID, r, strings.Join(declared, ", "))
		}
	}
	if len(names) != len(declared) {
		// The job's agents share its tasks: a task taken by an agent
		// serving some readers would never reach the others.
		return nil, fmt.Errorf("trainer agent: job %s declares readers %s: an agent serves all of them (the job's agents share its tasks)",
			job.Spec.ID, strings.Join(declared, ", "))
	}
	if opts.DemandInterval == 0 {
		opts.DemandInterval = time.Second
	}
	if opts.KeepAliveInterval == 0 {
		opts.KeepAliveInterval = defaultKeepAlive
	}
	if opts.Name == "" && opts.Node != nil {
		opts.Name = opts.Node.Node
	}
	if opts.Name == "" {
		host, _ := os.Hostname()
		opts.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	node, check, err := nodeSeals(job, opts)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	a := &Agent{nc: nc, js: js, job: job, name: opts.Name, node: node, check: check, opts: opts, reg: reg,
		log: logger.With("job", job.Spec.ID, "agent", opts.Name)}
	for _, name := range names {
		r := newReader(job, name, opts, logger, m)
		r.node, r.check = node, check
		r.changed = a.pokeRoom
		r.completed = a.shardsRecorded
		r.replay = a.replay
		if len(opts.Ranks) > 0 && len(opts.Ranks) < opts.WorldSize {
			r.st.Ranks.DropFixed = true // the team's agents share it
			auth := teamproto.NewAuth(node, check, job.Spec.ID, name)
			if slices.Contains(opts.Ranks, 0) {
				r.planAsTeam(newTeam(opts.WorldSize, opts.Ranks, auth))
			} else {
				m := teamproto.NewMember(nc, job, name, opts.Name, slices.Sorted(slices.Values(opts.Ranks)), opts.WorldSize, opts.DropLast, r.log)
				m.Secure(auth, r.m.teamRefused, r.m.nodeRefused)
				r.joinTeam(m)
			}
		}
		a.readers = append(a.readers, r)
	}
	return a, nil
}

// nodeSeals are the agent's node credential and the check of its job's
// nodes' seals, from opts (its Node, or one derived from its TeamKey for
// its Name) and the job record's node key: nil both where the record has
// none (a job submitted without a team key, or by an older sluice), which
// a team may not be.
func nodeSeals(job wire.Job, opts Options) (*wire.NodeIdentity, *wire.NodeVerifier, error) {
	id := job.Spec.ID
	team := len(opts.Ranks) > 0 && len(opts.Ranks) < opts.WorldSize
	if job.NodeKey == "" {
		if team {
			return nil, nil, fmt.Errorf("trainer agent: job %s: a team (ranks %v of %d) seals its messages with node credentials, and the job's record has no node key "+
				"(submitted without a team key, or by an older sluice): submit it again with `sluice job submit`", id, opts.Ranks, opts.WorldSize)
		}
		return nil, nil, nil
	}
	check, err := wire.NewNodeVerifier(id, job.NodeKey)
	if err != nil {
		return nil, nil, fmt.Errorf("trainer agent: %w", err)
	}
	node := opts.Node
	switch {
	case node != nil && node.Job != id:
		return nil, nil, fmt.Errorf("trainer agent: the node credential is of job %s, not %s", node.Job, id)
	case node != nil && node.Node != opts.Name:
		return nil, nil, fmt.Errorf("trainer agent: the node credential is node %s's: the agent's name must be its node's (it is %.64q)", node.Node, opts.Name)
	case node == nil && len(opts.TeamKey) == 0:
		return nil, nil, fmt.Errorf("trainer agent: job %s: its agents seal their messages as their node (its record has a node key): "+
			"give the agent the job's team key (`sluice job submit` writes it) or its node credential (`sluice job node-credential`)", id)
	case node == nil:
		if node, err = wire.DeriveNode(opts.TeamKey, id, opts.Name); err != nil {
			return nil, nil, fmt.Errorf("trainer agent: deriving the node credential of agent %.64q: %w", opts.Name, err)
		}
	}
	// A credential of another submission of the job (or a wrong key) is
	// said now, not as every message refused.
	probe := node.SealFor(wire.SealDemand, nil, nil)
	if _, err := check.Verify(probe, wire.SealDemand, nil, nil); err != nil {
		return nil, nil, fmt.Errorf("trainer agent: job %s: this agent's node credential is not certified by the job's record "+
			"(the team key or node credential of another submission of the job?): %w", id, err)
	}
	return node, check, nil
}

// checkRanks checks Options.Ranks: ranks of WorldSize, each once, on a
// job with one reader.
func checkRanks(job wire.Job, opts Options, declared []string) error {
	if len(opts.Ranks) == 0 {
		return nil
	}
	if opts.WorldSize == 0 {
		return fmt.Errorf("trainer agent: ranks %v need the world size they are of", opts.Ranks)
	}
	seen := map[int]bool{}
	for _, r := range opts.Ranks {
		switch {
		case r < 0 || r >= opts.WorldSize:
			return fmt.Errorf("trainer agent: rank %d: want 0..%d (the world size is %d)", r, opts.WorldSize-1, opts.WorldSize)
		case seen[r]:
			return fmt.Errorf("trainer agent: rank %d given twice", r)
		}
		seen[r] = true
	}
	if len(opts.Ranks) < opts.WorldSize && len(declared) != 1 {
		return fmt.Errorf("trainer agent: job %s declares readers %s: agents serving some ranks each (a team) serve a job with one reader",
			job.Spec.ID, strings.Join(declared, ", "))
	}
	return nil
}

// defaultKeepAlive is how often a reader's position is written when it
// changed without a batch being handed out.
const defaultKeepAlive = 2 * time.Second

// Job is the job the agent reads.
func (a *Agent) Job() wire.Job { return a.job }

// Name is the agent's name in demand signals and dispatch shares.
func (a *Agent) Name() string { return a.name }

// Reader returns the reader called name, or nil.
func (a *Agent) Reader(name string) *Reader {
	for _, r := range a.readers {
		if r.reader == name {
			return r
		}
	}
	return nil
}

// Ready reports whether every reader loaded its position and the agent is
// dispatching, and none stopped.
func (a *Agent) Ready() bool {
	if a.disp.Load() == nil {
		return false
	}
	for _, r := range a.readers {
		if !r.Ready() {
			return false
		}
	}
	return true
}

// Next returns the next batch of the agent's only reader (see Reader.Next).
func (a *Agent) Next(ctx context.Context) (Batch, error) {
	if len(a.readers) != 1 {
		return Batch{}, fmt.Errorf("trainer agent: Next: the agent serves %d readers: use Reader(name).Next", len(a.readers))
	}
	return a.readers[0].Next(ctx)
}

// Stats is the first reader's progress (the only one, for a job with one
// reader); Reader(name).Stats gives each.
func (a *Agent) Stats() Stats { return a.readers[0].Stats() }

// Handler serves the readers' HTTP API (see Reader.Handler): each reader
// under /r/NAME/v1/..., and the first (for a job with one reader, the only
// one) under /v1/... too.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	for i, r := range a.readers {
		h := r.Handler()
		prefix := "/r/" + r.reader
		mux.Handle(prefix+"/v1/", http.StripPrefix(prefix, h))
		if i == 0 {
			mux.Handle("/v1/", h)
		}
	}
	return mux
}

// Run loads every reader's position, dispatches the job's tasks and feeds
// the readers until every rank of every reader got every step; it then
// records each reader as done, publishes the final demand (Done) and
// returns nil. It returns early with ctx's error, an error wrapping
// readerstate.ErrJobEnded when the job is cancelled or deleted, or another error; the
// readers' Next then fails with ErrStopped. The tasks it holds unsettled
// go back to the queue at once, so another agent (or this one restarted)
// takes them.
func (a *Agent) Run(ctx context.Context) error {
	if !a.started.CompareAndSwap(false, true) {
		return errors.New("trainer agent: Run called twice")
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	for _, r := range a.readers {
		r.mu.Lock()
		r.fail = fail
		r.mu.Unlock()
	}
	err := a.run(ctx)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx) // the reason the agent was stopped
	}
	a.release(err)
	for _, r := range a.readers {
		r.end(err)
	}
	return err
}

func (a *Agent) run(ctx context.Context) error {
	jobs, d, err := a.open(ctx)
	if err != nil {
		return err
	}
	var bg sync.WaitGroup
	bgCtx, stopBG := context.WithCancel(ctx)
	// The roles stop first (a planner stops answering its team, so its
	// members find no planner rather than one stopping), then the
	// background work.
	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
		stopBG()
		bg.Wait()
	}()
	dispatched := make(chan error, 1)
	bg.Go(func() { dispatched <- d.Run(bgCtx) })
	bg.Go(func() { a.watchJob(bgCtx, jobs) })
	for _, r := range a.readers {
		stop, err := r.role.start(bgCtx, a.nc, &bg)
		if err != nil {
			return err
		}
		stops = append(stops, stop)
		bg.Go(func() { r.gpu.Run(bgCtx) })
	}
	demandCtx, stopDemand := context.WithCancel(bgCtx)
	var demandDone sync.WaitGroup
	demandDone.Go(func() { a.publishDemands(demandCtx) })
	stopDemands := func() {
		stopDemand()
		demandDone.Wait()
	}
	defer stopDemands()

	if err := a.waitDelivered(ctx, jobs, dispatched); err != nil {
		return err
	}
	for _, r := range a.readers {
		if err := r.role.finish(ctx); err != nil {
			return err
		}
	}
	stopDemands()
	return a.publishFinal(ctx)
}

// open loads the readers' positions and binds the job's dispatcher,
// asking again for the shards a resume had asked for before this agent
// (re)started.
func (a *Agent) open(ctx context.Context) (jetstream.KeyValue, *dispatch.Dispatcher, error) {
	jobs, err := streams.OpenBucket(ctx, a.js, wire.JobsBucket, a.log)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the job store: %w", err)
	}
	for _, r := range a.readers {
		if err := r.role.open(ctx, a.js); err != nil {
			return nil, nil, err
		}
	}
	dopts := a.opts.Dispatch
	dopts.Agent = a.name
	d, err := dispatch.New(ctx, a.nc, a.js, a.job, (*sink)(a), dopts, a.log.With("component", "dispatcher"), a.reg)
	if err != nil {
		return nil, nil, fmt.Errorf("job %s: %w", a.job.Spec.ID, err)
	}
	for _, r := range a.readers {
		r.mu.Lock()
		r.producer = teamproto.NewProducer(ctx, a.job, d.Produce)
		r.st.Changed = true
		r.unlock()
		r.role.dispatching(d)
	}
	a.disp.Store(d)
	for _, r := range a.readers {
		a.replay(r.replaysOwed())
	}
	return jobs, d, nil
}

// waitDelivered returns once every rank of every reader was told the job
// is delivered (a 410, io.EOF from Next; a resume from a checkpoint may
// rewind a reader meanwhile), or with why the dispatcher ended first.
func (a *Agent) waitDelivered(ctx context.Context, jobs jetstream.KeyValue, dispatched <-chan error) error {
	id := a.job.Spec.ID
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !a.allDone() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-dispatched:
			if errors.Is(err, dispatch.ErrJobGone) {
				if ended := checkJob(ctx, jobs, id); ended != nil {
					return ended
				}
				return fmt.Errorf("%w: job %s: %w", readerstate.ErrJobEnded, id, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("dispatching job %s: %w", id, err)
		case <-t.C:
		}
		for _, r := range a.readers {
			r.askOwed(ctx)
		}
	}
	return nil
}

// publishFinal sends the last demand signal, which tells the autoscaler
// to scale the job to zero, and makes sure it left.
func (a *Agent) publishFinal(ctx context.Context) error {
	if err := a.publishDemand(time.Now(), true); err != nil {
		return err
	}
	flushCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := a.nc.FlushWithContext(flushCtx); err != nil {
		return fmt.Errorf("flushing the final demand of job %s: %w", a.job.Spec.ID, err)
	}
	a.log.Info("job delivered", "samples", a.readers[0].Stats().SamplesDelivered)
	return nil
}

func (a *Agent) allDone() bool {
	for _, r := range a.readers {
		if !r.done() {
			return false
		}
	}
	return true
}

// release runs when Run ends early: unless the job is gone each reader
// records its position once more. (The dispatcher has returned its
// unsettled tasks to the queue.)
func (a *Agent) release(err error) {
	if err == nil || errors.Is(err, readerstate.ErrJobEnded) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, r := range a.readers {
		if serr := r.sync(ctx, false); serr != nil {
			r.log.Warn("recording the position on the way out", "err", serr)
		}
	}
}

// shardsRecorded is told by a reader the shards whose every row its position
// now records as handed out: a shard's task is settled once every reader
// has it recorded. Settling a task the dispatcher does not hold (settled
// before, its copy come again and gone) does nothing, so a task delivered
// again after its shard was recorded settles as soon as its end comes.
func (a *Agent) shardsRecorded(shards []assembly.ShardRef) {
	d := a.disp.Load()
	if d == nil {
		return
	}
	for _, s := range shards {
		if a.everyReaderRecorded(s) {
			d.Settle(s.Epoch, s.Shard)
		}
	}
}

func (a *Agent) everyReaderRecorded(s assembly.ShardRef) bool {
	for _, r := range a.readers {
		if !r.recorded.Has(s) {
			return false
		}
	}
	return true
}

// replay asks the dispatcher to produce tasks again (a resume).
func (a *Agent) replay(tasks []wire.ShardTask) {
	d := a.disp.Load()
	if d == nil {
		return // Run issues what the positions owe once it dispatches
	}
	for _, t := range tasks {
		d.Replay(t)
	}
}

// watchJob stops the agent when the job's record says it was cancelled,
// failed or deleted.
func (a *Agent) watchJob(ctx context.Context, jobs jetstream.KeyValue) {
	w, err := jobs.Watch(ctx, a.job.Spec.ID)
	if err != nil {
		a.log.Warn("watching the job record; a cancelled job will not stop this agent", "err", err)
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			err := jobEnded(a.job.Spec.ID, e)
			if err == nil && a.succeededWithoutMe(e) {
				err = fmt.Errorf("%w: job %s succeeded: another agent delivered what this one had not", readerstate.ErrJobEnded, a.job.Spec.ID)
			}
			if err != nil {
				a.log.Warn("stopping", "reason", err)
				a.readers[0].stop(err)
				return
			}
		}
	}
}

// succeededWithoutMe reports whether the job's record says it succeeded
// while a reader of this agent has not handed out everything: a job
// succeeds only once every reader is done, so another agent did.
func (a *Agent) succeededWithoutMe(e jetstream.KeyValueEntry) bool {
	var job wire.Job
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &job) != nil || job.State != wire.JobSucceeded {
		return false
	}
	for _, r := range a.readers {
		if !r.handedOut() {
			return true
		}
	}
	return false
}

// publishDemands publishes each reader's demand signal every
// DemandInterval until ctx ends.
func (a *Agent) publishDemands(ctx context.Context) {
	t := time.NewTicker(a.opts.DemandInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if err := a.publishDemand(now, false); err != nil {
				a.log.Warn("publishing demand", "err", err)
			}
		}
	}
}

func (a *Agent) publishDemand(now time.Time, done bool) error {
	var st dispatch.Stats
	if d := a.disp.Load(); d != nil {
		st = d.Stats()
	}
	for _, r := range a.readers {
		d := r.demand(now, done)
		d.Agent = a.name
		d.InFlight, d.PendingTasks = dispatchLoad(st)
		data, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("encoding demand: %w", err)
		}
		msg := nats.NewMsg(wire.DemandSubject(a.job.Spec.ID))
		msg.Data = data
		if a.node != nil {
			// The controller checks it names the node that sealed it.
			a.node.SealFor(wire.SealDemand, nil, data).SetHeader(msg.Header)
		}
		if err := a.nc.PublishMsg(msg); err != nil {
			return fmt.Errorf("publishing demand of job %s: %w", a.job.Spec.ID, err)
		}
	}
	return nil
}

// dispatchLoad is the work a demand signal reports from the dispatcher's
// stats: in flight, the sends under way and the shards produced again for
// this agent (after the queue drained they alone keep a replica: the last
// epoch's rows moved between a team's agents); pending, the queue's tasks
// and the replays waiting for a send slot, tasks it would send were its
// share larger (a resume late in the last epoch replays after the queue
// drained).
func dispatchLoad(st dispatch.Stats) (inFlight, pending int) {
	return st.InFlight + st.Producing, st.Queued + st.Replays
}

// sink is the Agent as the dispatcher's dispatch.Sink.
type sink Agent

var _ dispatch.Sink = (*sink)(nil)

// Room: some reader wants more and the chunks held stay within the job's
// output buffer, not counting those of readers that lag (they keep no
// new shard: assembly's lag.go).
func (s *sink) Room() bool {
	held := make([]int64, len(s.readers))
	wants := make([]bool, len(s.readers))
	for i, r := range s.readers {
		held[i], wants[i], _ = r.role.buffer()
	}
	buffer := s.job.Spec.OutputBufferBytes
	bound := s.opts.MaxLagBytes
	if bound == 0 {
		bound = buffer / 2
	}
	lag := assembly.Shedding(held, wants, bound)
	var kept int64
	want := false
	for i, r := range s.readers {
		r.shedding.Store(lag[i])
		if !lag[i] {
			kept += held[i]
			want = want || wants[i]
		}
	}
	return want && (buffer <= 0 || kept < buffer)
}

func (s *sink) WaitRoom(ctx context.Context, _ wire.ShardTask) error { return s.waitRoom(ctx) }

func (s *sink) Chunk(task wire.ShardTask, index int, data []byte) error {
	// The readers keep rows of it, shared read-only. One that refuses it
	// fails the send: the others drop the copies of the retry.
	var errs []error
	for _, r := range s.readers {
		errs = append(errs, r.role.chunk(task, index, data))
	}
	return errors.Join(errs...)
}

func (s *sink) End(task wire.ShardTask, end wire.ShardEnd) {
	for _, r := range s.readers {
		r.role.end(task, &end, "")
	}
	// A copy of a shard every reader had recorded (a task redelivered
	// after its settle was lost) settles at once; others once recorded (a
	// member's position is its planner's: it records none, and settles
	// what the planner says is complete).
	(*Agent)(s).shardsRecorded([]assembly.ShardRef{{Epoch: task.Epoch, Shard: task.Shard}})
}

func (s *sink) Failed(task wire.ShardTask, reason string) {
	for _, r := range s.readers {
		r.role.end(task, nil, reason)
	}
	(*Agent)(s).shardsRecorded([]assembly.ShardRef{{Epoch: task.Epoch, Shard: task.Shard}})
}
