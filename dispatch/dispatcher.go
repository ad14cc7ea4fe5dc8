package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/lowwater"
	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// Sink receives the output of the tasks a Dispatcher sends. The trainer agent is one.
// Its methods are called from the dispatcher's goroutines (concurrently for different tasks).
type Sink interface {
	// Room reports whether the dispatcher may take another task from the queue
	// (the agent's prefetch and output buffer bounds). Called often; cheap; non-blocking.
	Room() bool
	// WaitRoom is called before each frame of a send of task is read: it blocks while the sink has
	// no room for another chunk (the send then stops reading the replica's reply, whose writes wait:
	// back-pressure; the send's stall clock does not run), until ctx ends (the send was cancelled),
	// whose error it returns.
	WaitRoom(ctx context.Context, task wire.ShardTask) error
	// Chunk hands over chunk `index` of task's shard as it arrives, in the send's order from 0; data
	// is the sink's to keep. After a retry the same rows come again (perhaps cut into other chunks:
	// wire.MetaFirst): the sink drops copies. An error refuses the chunk: the send fails (as a
	// malformed reply) and the task is sent again. The dispatcher sends tasks with Expand set, so a
	// chunk may carry expansions (wire.MetaExpand) for the sink to apply.
	Chunk(task wire.ShardTask, index int, data []byte) error
	// End says the shard is complete: every chunk 0..end.Chunks-1 was passed to Chunk (in this send or an earlier one).
	End(task wire.ShardTask, end wire.ShardEnd)
	// Failed says the shard failed for good (a permanent error, or Options.MaxDeliver failed sends): none of its samples will come.
	Failed(task wire.ShardTask, reason string)
}

// Defaults of Options.
const (
	DefaultMaxDeliver   = 20
	DefaultLocalityWait = 100 * time.Millisecond
	// DefaultStallTimeout is six of the functions' heartbeat intervals
	// (wire.ShardHeartbeatInterval): a replica whose node is lost goes
	// silent, not away, and its shard is sent elsewhere after this.
	DefaultStallTimeout = 6 * wire.ShardHeartbeatInterval
)

// Options tune a Dispatcher.
type Options struct {
	Agent        string        // this agent's name: its share in the DispatchPlan, and ShardResult.Agent
	AckWait      time.Duration // of the task consumer; in-progress pings every AckWait/3; default streams.DispatchAckWait
	MaxDeliver   int           // failed sends of a task before it is Failed; default 20
	LocalityWait time.Duration // how long a task waits for its busy home replica; default 100ms, negative: no wait
	HTTPClient   *http.Client  // nil: NewHTTPClient()
	// Token is the function token (bearer.Function) sent with every task;
	// the zero Token sends none (replicas on loopback without one).
	Token bearer.Token
	// StallTimeout fails a send (transiently) when its replica sent no
	// byte for that long, before or between frames: a wedged replica, or
	// one on a lost node, must not hold a task for ever. A function sends
	// heartbeats while it has nothing else to send (a long download), so
	// the bound is a few of their intervals. Default DefaultStallTimeout;
	// negative: none.
	StallTimeout time.Duration
}

// Stats is a snapshot of a Dispatcher.
type Stats struct {
	// InFlight is the tasks with a send slot: being sent, or waiting to
	// be sent again (a retry's backoff, a busy home, no replica).
	InFlight int
	// Held is the tasks received (or replays started) and not settled.
	Held int
	// Queued is the task consumer's NumPending, read at most once a second.
	Queued int
	// Replays is the replays waiting for a send slot.
	Replays int
	// Producing is the shards being produced again for the agent itself
	// (Produce), a replica found or not: work the job's replicas owe it
	// although its queue may be empty.
	Producing int
	// Share is this agent's share of the plan's InFlight (0 without a plan).
	Share int
	// Sends counts sends begun, Retries those beyond a task's first,
	// Failed tasks failed for good, Settled tasks settled, Malformed
	// deliveries that were no task of the job (terminated).
	Sends, Retries, Failed, Settled, Malformed int
}

// ErrJobGone means the job's task consumer was deleted: the job was
// cancelled or deleted.
var ErrJobGone = errors.New("job gone: its task consumer was deleted")

// Dispatcher pulls one job's shard tasks for one agent, sends them to
// function replicas and hands their output to a Sink. See the package doc.
type Dispatcher struct {
	id   string
	nc   *nats.Conn
	cons jetstream.Consumer
	kv   jetstream.KeyValue
	// readers holds the job's record of shards given up (failed.go);
	// submitted tells this submission's record from an earlier one's.
	readers   jetstream.KeyValue
	submitted time.Time
	sink      Sink
	opts      Options
	ping      time.Duration // progress ping interval (d.mu)
	hc        *http.Client
	log       *slog.Logger
	m         *metrics
	load      *replicaLoad

	gInflight, gHeld prometheus.Gauge

	wake  chan struct{} // a slot, the plan or a replay changed: look again
	sends sync.WaitGroup

	mu      sync.Mutex
	st      *state
	plan    wire.DispatchPlan
	planSet bool
	planCh  chan struct{} // closed and replaced when the plan changes
	ran     bool
	stopped bool
	queued  int
	// producing counts Produce calls under way.
	producing int
	loops     int // pull loop rounds, for tests
}

// New binds to the job's task consumer (wire.DispatchConsumer(job), on wire.TaskStream, created with
// streams.Dispatch(job, opts.AckWait) if it does not exist yet) and to the KV bucket wire.DispatchBucket.
// logger nil discards; reg nil leaves the metrics unregistered.
func New(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, job wire.Job, sink Sink, opts Options, logger *slog.Logger, reg prometheus.Registerer) (*Dispatcher, error) {
	id := job.Spec.ID
	if err := wire.ValidateJobID(id); err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	switch {
	case nc == nil || js == nil:
		return nil, fmt.Errorf("dispatch for job %s: no NATS connection", id)
	case sink == nil:
		return nil, fmt.Errorf("dispatch for job %s: no sink", id)
	case opts.Agent == "":
		return nil, fmt.Errorf("dispatch for job %s: Options.Agent is required (the agent's name in the dispatch plan)", id)
	}
	opts = opts.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// A consumer or bucket whose leader was on a lost member answers again
	// once the others elect one: an agent started meanwhile (the job
	// resumed on another node) waits for it.
	var cons jetstream.Consumer
	var kv, readers jetstream.KeyValue
	bctx, cancel := context.WithTimeout(ctx, bindRetryWindow)
	defer cancel()
	err := retry.JetStream(bctx, logger, nc, "binding to the task consumer and buckets", func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, bindAttemptTimeout)
		defer cancel()
		var err error
		if cons, err = bindConsumer(actx, js, id, opts.AckWait); err != nil {
			return err
		}
		if kv, err = js.KeyValue(actx, wire.DispatchBucket); err != nil {
			return fmt.Errorf("job %s: opening key-value bucket %s: %w", id, wire.DispatchBucket, err)
		}
		if readers, err = js.KeyValue(actx, wire.ReadersBucket); err != nil {
			return fmt.Errorf("job %s: opening key-value bucket %s: %w", id, wire.ReadersBucket, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Ping within the consumer's own AckWait, should it be shorter.
	ackWait := opts.AckWait
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		ackWait = min(ackWait, info.Config.AckWait)
	}
	m := newMetrics(reg)
	return &Dispatcher{
		id: id, nc: nc, cons: cons, kv: kv, readers: readers, submitted: job.Submitted, sink: sink, opts: opts, hc: opts.HTTPClient,
		ping:      pingEvery(ackWait),
		log:       logger.With("job", id, "agent", opts.Agent),
		m:         m,
		load:      newReplicaLoad(),
		gInflight: m.inflight.WithLabelValues(id),
		gHeld:     m.held.WithLabelValues(id),
		wake:      make(chan struct{}, 1),
		st:        newState(),
		planCh:    make(chan struct{}),
	}, nil
}

// withDefaults fills in the options left zero (and turns the negative
// LocalityWait and StallTimeout into none).
func (o Options) withDefaults() Options {
	if o.AckWait <= 0 {
		o.AckWait = streams.DispatchAckWait
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	switch {
	case o.LocalityWait == 0:
		o.LocalityWait = DefaultLocalityWait
	case o.LocalityWait < 0:
		o.LocalityWait = 0
	}
	switch {
	case o.StallTimeout == 0:
		o.StallTimeout = DefaultStallTimeout
	case o.StallTimeout < 0:
		o.StallTimeout = 0
	}
	if o.HTTPClient == nil {
		o.HTTPClient = NewHTTPClient()
	}
	return o
}

// ReadBufferSize is the read buffer of NewHTTPClient's connections.
// Through a proxy (Knative's activator and queue-proxy, an ingress) a
// shard's reply comes as HTTP chunks of at most 32 KB, and net/http's
// default of 4 KB then reads the connection once per chunk or more; 1 MB
// takes several hundred KB a read (BenchmarkSendStream: docs/knative.md).
// It is 1 MB a connection, and a send holds a chunk of up to
// ChunkMaxBytes (4 MB by default) anyway.
const ReadBufferSize = 1 << 20

// NewHTTPClient is the client for sends to function replicas: no total
// timeout (a shard may take long), the connections to few replicas kept,
// and a read buffer and read batching that spare the reader's CPU.
func NewHTTPClient() *http.Client {
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment}
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = dt.Clone()
	}
	// Many sends go to few replicas at once: keep their connections.
	tr.MaxIdleConnsPerHost = 256
	tr.ReadBufferSize = ReadBufferSize
	// A long stream through proxies comes in segments of 32 KB or less:
	// read it in batches, not a wake-up each (docs/knative.md).
	tr.DialContext = lowwater.Dial(lowwater.Default, tr.DialContext)
	return &http.Client{Transport: tr}
}

// bindRetryWindow bounds the retries of binding to the task consumer and
// the buckets.
const bindRetryWindow = time.Minute

// bindAttemptTimeout bounds one attempt: a request to a consumer with no
// leader gets no answer.
const bindAttemptTimeout = 5 * time.Second

// bindConsumer opens job id's task consumer, creating it with ackWait if
// it does not exist yet. Create, not CreateOrUpdate: one the broker or
// the controller made meanwhile keeps its ack wait.
func bindConsumer(ctx context.Context, js jetstream.JetStream, id string, ackWait time.Duration) (jetstream.Consumer, error) {
	name := wire.DispatchConsumer(id)
	cons, err := js.Consumer(ctx, wire.TaskStream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = js.CreateConsumer(ctx, wire.TaskStream, streams.Dispatch(id, ackWait))
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = js.Consumer(ctx, wire.TaskStream, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: binding to task consumer %s: %w", id, name, err)
	}
	return cons, nil
}

// pingEvery is the progress ping interval for a consumer's ackWait.
func pingEvery(ackWait time.Duration) time.Duration { return max(ackWait/3, 10*time.Millisecond) }

// Stats for demand signals and status: InFlight (sends now), Held (received, not settled),
// Queued (the consumer's NumPending, read at most once a second), Sends, Retries, Failed.
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.st
	return Stats{
		InFlight: s.sending, Held: s.held(), Queued: d.queued, Replays: len(s.replays), Producing: d.producing, Share: d.share(),
		Sends: s.sends, Retries: s.retries, Failed: s.failed, Settled: s.settled, Malformed: s.malformed,
	}
}

// poke wakes the pull loop.
func (d *Dispatcher) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// gauges sets the gauges from the state; d.mu held.
func (d *Dispatcher) gauges() {
	d.gInflight.Set(float64(d.st.sending))
	d.gHeld.Set(float64(d.st.held()))
}

// sleep waits for dur or ctx's end, and says whether ctx is still live.
func sleep(ctx context.Context, dur time.Duration) bool {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
