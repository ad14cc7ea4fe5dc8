package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

// samplesPerShard is how many samples the test function makes of a shard.
const samplesPerShard = 4

// env is real embedded NATS and S3 with a dataset of image shards at
// s3://data/img/ and one of text shards at s3://data/txt/, a function
// server behind a gate (it answers a task with the shard's end frame
// only: the controller never sees samples), and a pool actuator that
// "runs" replicas of that server.
type env struct {
	nc *nats.Conn
	js jetstream.JetStream
	// secure, when set, is the server with the shipped authorization:
	// nc and js are the admin's, a controller connects as its own user
	// and answers the auth callout, agents connect as their jobs.
	secure *testenv.SecureNATS
	s3     *s3.Client
	b      *broker.Broker
	gate   *gate
	pool   *pool
	reg    *prometheus.Registry
}

func newEnv(t *testing.T, shards int) *env { return newEnvTB(t, shards) }

func newBenchEnv(b *testing.B) *env { return newEnvTB(b, 2) }

// newSecureEnv is newEnv on a server with the shipped authorization.
func newSecureEnv(t *testing.T, shards int) *env {
	secure := testenv.NewSecureNATS(t)
	nc, js := secure.Connect(t, natsperm.Admin())
	e := newEnvOn(t, shards, nc, js)
	e.secure = secure
	return e
}

func newEnvTB(t testing.TB, shards int) *env {
	t.Helper()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return newEnvOn(t, shards, nc, js)
}

func newEnvOn(t testing.TB, shards int, nc *nats.Conn, js jetstream.JetStream) *env {
	t.Helper()
	ctx := context.Background()
	s3c, _ := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: shards, Shards: shards, Seed: 1, MinSide: 8, MaxSide: 8, Quality: 50, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "img/", imgs); err != nil {
		t.Fatal(err)
	}
	txt, err := synth.Text(synth.TextOptions{Samples: 4, Shards: 2, Seed: 1, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "txt/", txt); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	g := &gate{next: http.HandlerFunc(function), open: make(chan struct{}), calls: map[string]int{}}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &env{nc: nc, js: js, s3: s3c, b: broker.New(js, s3c, streams.Options{}, nil), gate: g,
		pool: newPool(srv.URL), reg: prometheus.NewRegistry()}
}

func spec(id, dataset string, epochs int) wire.JobSpec {
	return wire.JobSpec{ID: id, Dataset: "s3://data/" + dataset + "/", Pipeline: "imagenet-eval", BatchSize: 4, Epochs: epochs, Seed: 7}
}

func (e *env) submit(t *testing.T, s wire.JobSpec) wire.Job {
	t.Helper()
	job, err := e.b.Submit(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// function answers a shard task as `sluice fn serve` does, with the
// shard's chunk (zeros: the controller's tests read no sample) and end
// frame: samplesPerShard samples of an image shard,
// every sample failed of a text shard (an image pipeline cannot decode
// it), read from S3.
func function(w http.ResponseWriter, r *http.Request) {
	var task wire.ShardTask
	if err := json.NewDecoder(r.Body).Decode(&task); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	end := wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Cache: "miss", S3Bytes: 100}
	if strings.HasPrefix(task.Key, "txt/") {
		for i := range samplesPerShard {
			end.AddFailed(fmt.Sprintf("%s#%d", task.Key, i), "decoding image: not an image")
		}
	} else {
		end.Chunks, end.Samples, end.Bytes = 1, samplesPerShard, 1000
	}
	data, _ := json.Marshal(end)
	w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	w.WriteHeader(http.StatusOK)
	for c := range end.Chunks {
		if wire.WriteFrame(w, wire.FrameChunk, c, make([]byte, end.Bytes)) != nil {
			return
		}
	}
	_ = wire.WriteFrame(w, wire.FrameEnd, 0, data)
}

// gate passes the first `allow` shard requests to the function, holds
// the rest until it is opened (or the request is cancelled: 503), and
// counts the requests that reached the function, per task.
type gate struct {
	next http.Handler

	mu     sync.Mutex
	allow  int
	open   chan struct{}
	opened bool
	calls  map[string]int // task id -> requests passed through
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server notice a client that
	// gave up (and cancel r's context).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	g.mu.Lock()
	pass := g.opened || g.allow > 0
	if pass && !g.opened {
		g.allow--
	}
	open := g.open
	g.mu.Unlock()
	if !pass {
		select {
		case <-open:
		case <-r.Context().Done():
			http.Error(w, "gate closed", http.StatusServiceUnavailable)
			return
		}
	}
	g.mu.Lock()
	g.calls[r.Header.Get("Ce-Id")]++
	g.mu.Unlock()
	g.next.ServeHTTP(w, r)
}

// hold lets n more requests through, then holds the rest.
func (g *gate) hold(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened {
		g.open, g.opened = make(chan struct{}), false
	}
	g.allow = n
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.opened {
		close(g.open)
		g.opened = true
	}
}

func (g *gate) callsPerTask() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.calls {
		out[k] = v
	}
	return out
}

// pool is an actuator whose replicas are the one function server, each
// under its own path: every replica asked for is ready at once. It
// records the most replicas it was asked for in all and per job.
type pool struct {
	url string

	mu       sync.Mutex
	want     map[string]int
	maxTotal int
	maxJob   map[string]int
	together map[string]bool // jobs seen with replicas at the same time as another
}

func newPool(url string) *pool {
	return &pool{url: url, want: map[string]int{}, maxJob: map[string]int{}, together: map[string]bool{}}
}

func (p *pool) Scale(_ context.Context, job string, n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want[job] = n
	total, live := 0, 0
	for _, v := range p.want {
		total += v
		if v > 0 {
			live++
		}
	}
	p.maxTotal = max(p.maxTotal, total)
	p.maxJob[job] = max(p.maxJob[job], n)
	if live > 1 {
		for j, v := range p.want {
			if v > 0 {
				p.together[j] = true
			}
		}
	}
	return nil
}

func (p *pool) Ready(job string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.want[job]
}

func (p *pool) Endpoints(job string) []string {
	n := p.Ready(job)
	eps := make([]string, n)
	for i := range n {
		eps[i] = fmt.Sprintf("%s/%s/r%d", p.url, job, i)
	}
	return eps
}

func (p *pool) replicas(job string) int { return p.Ready(job) }

// agent plays a job's trainer agent at the controller's seams, with real
// JetStream and HTTP: it pulls the job's tasks from the task consumer
// while its share of the dispatch plan allows, sends each to an endpoint
// of the plan, publishes the shard's result and acks the task (keeping it
// alive meanwhile), and signals its demand for the readers it serves.
// Once the job's task consumer holds no task (every agent's done) it
// writes the done key of the readers in finishes.
type agent struct {
	e        *env
	name     string
	job      wire.Job
	readers  []string
	finishes []string
	stall    float64
	hc       *http.Client
	// node, when set, seals the agent's demand and done records as the
	// node of a job with a team key does.
	node *wire.NodeIdentity

	mu          sync.Mutex
	inflight    int
	perEndpoint map[string]int
	finished    bool
}

// startAgent runs an agent of job serving every declared reader and
// finishing them all; opts may change that before it starts.
func (e *env) startAgent(t *testing.T, job wire.Job, name string, opts ...func(*agent)) *agent {
	t.Helper()
	a := &agent{e: e, name: name, job: job, readers: job.Spec.Readers, finishes: job.Spec.Readers,
		hc: &http.Client{}, perEndpoint: map[string]int{}}
	for _, o := range opts {
		o(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { a.run(ctx, t, &wg) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return a
}

func (a *agent) run(ctx context.Context, t *testing.T, wg *sync.WaitGroup) {
	id := a.job.Spec.ID
	cons, err := a.e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer(id))
	if err != nil {
		t.Errorf("agent %s: %v", a.name, err)
		return
	}
	plans, err := a.e.js.KeyValue(ctx, wire.DispatchBucket)
	if err != nil {
		t.Errorf("agent %s: %v", a.name, err)
		return
	}
	var signalled time.Time
	for ctx.Err() == nil {
		var plan wire.DispatchPlan
		if en, err := plans.Get(ctx, id); err == nil {
			_ = json.Unmarshal(en.Value(), &plan)
		}
		if time.Since(signalled) >= 50*time.Millisecond {
			signalled = time.Now()
			a.signal()
			a.finishIfDone(ctx)
		}
		for {
			ep, ok := a.room(plan)
			if !ok {
				break
			}
			batch, err := cons.FetchNoWait(1)
			if err != nil {
				break
			}
			took := false
			for msg := range batch.Messages() {
				took = true
				a.mu.Lock()
				a.inflight++
				a.perEndpoint[ep]++
				a.mu.Unlock()
				wg.Go(func() { a.process(ctx, msg, ep) })
			}
			if !took {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// room picks an endpoint for one more task, if the plan lets the agent
// send one.
func (a *agent) room(plan wire.DispatchPlan) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight >= plan.Share(a.name) {
		return "", false
	}
	for _, ep := range plan.Endpoints {
		if plan.PerEndpoint == 0 || a.perEndpoint[ep] < plan.PerEndpoint {
			return ep, true
		}
	}
	return "", false
}

// signal publishes the agent's demand for each reader it serves.
func (a *agent) signal() {
	a.mu.Lock()
	inflight := a.inflight
	a.mu.Unlock()
	for _, r := range a.readers {
		m := nats.NewMsg(wire.DemandSubject(a.job.Spec.ID))
		m.Data, _ = json.Marshal(wire.Demand{Job: a.job.Spec.ID, Reader: r, Agent: a.name, Time: time.Now(),
			InFlight: inflight, StallFraction: a.stall, BufferCapacity: 100})
		if a.node != nil {
			a.node.SealFor(wire.SealDemand, nil, m.Data).SetHeader(m.Header)
		}
		_ = a.e.nc.PublishMsg(m)
	}
}

// process sends one task and settles it.
func (a *agent) process(ctx context.Context, msg jetstream.Msg, ep string) {
	defer func() {
		a.mu.Lock()
		a.inflight--
		a.perEndpoint[ep]--
		a.mu.Unlock()
	}()
	var task wire.ShardTask
	if err := json.Unmarshal(msg.Data(), &task); err != nil {
		_ = msg.Term()
		return
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	end, err := a.send(ctx, ep, task)
	if err != nil {
		_ = msg.Nak()
		return
	}
	res, _ := json.Marshal(wire.ShardResult{Agent: a.name, Time: time.Now(), Key: task.Key, End: end, Sends: 1})
	if err := a.e.nc.Publish(wire.ResultSubject(task.Job), res); err != nil {
		_ = msg.Nak()
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		return
	}
}

// finishIfDone writes the done keys of the readers in finishes once the
// job's tasks are all acked.
func (a *agent) finishIfDone(ctx context.Context) {
	a.mu.Lock()
	finished := a.finished
	a.mu.Unlock()
	if finished {
		return
	}
	// The stream, not the consumer's NumPending, which once read 0 right
	// after Submit queued the tasks: a work queue keeps a task until it is
	// acked.
	stream, err := a.e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return
	}
	subject := wire.TaskSubject(a.job.Spec.ID)
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil || info.State.Subjects[subject] > 0 {
		return
	}
	a.mu.Lock()
	a.finished = true
	a.mu.Unlock()
	for _, r := range a.finishes {
		a.e.readerDone(a.job, r, a.node)
	}
}

// send posts task to ep as an agent does and reads the shard's frames to
// its end.
func (a *agent) send(ctx context.Context, ep string, task wire.ShardTask) (wire.ShardEnd, error) {
	return dispatch.Sender{Client: a.hc}.Send(ctx, ep, task, nil)
}

// readerDone writes that reader of job is through, as its agent does once
// every rank reached the end of the last epoch: sealed by node, when set.
func (e *env) readerDone(job wire.Job, reader string, node *wire.NodeIdentity) {
	readers, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		panic(err)
	}
	key := wire.ReaderDoneKey(job.Spec.ID, reader)
	data, _ := json.Marshal(wire.ReaderDone{Submitted: job.Submitted, Time: time.Now()})
	if node != nil {
		if data, err = node.SealRecord(key, 0, data); err != nil {
			panic(err)
		}
	}
	if _, err := readers.Put(context.Background(), key, data); err != nil {
		panic(err)
	}
}

// running is a controller running in the background.
type running struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan error
	logs   *logbuf.Buffer
}

func (e *env) startController(t *testing.T, id string, o Options) *running {
	return e.startControllerB(t, id, o)
}

func (e *env) startControllerB(t testing.TB, id string, o Options) *running {
	t.Helper()
	o.ID, o.NC, o.JS, o.Broker = id, e.nc, e.js, e.b
	if e.secure != nil {
		o.NC, o.JS = e.secure.Connect(t, natsperm.Controller())
		o.Broker, o.CalloutIssuer = broker.New(o.JS, nil, streams.Options{}, nil), e.secure.Auth.CalloutIssuer
	}
	if o.Actuator == nil {
		o.Actuator = e.pool
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.Tick == 0 {
		o.Tick = 100 * time.Millisecond
	}
	if o.TaskAckWait == 0 {
		o.TaskAckWait = 2 * time.Second
	}
	if o.MaxReplicas == 0 {
		o.MaxReplicas = 4
	}
	logger, logs := logbuf.Logger(slog.LevelInfo)
	c, err := New(o, logger, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() {
		r.stop(t)
		if t.Failed() { // what the controller did, for a failure seen once in a while
			t.Logf("controller %s's log:\n%s", id, logs)
		}
	})
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !c.Ready() {
			return errors.New("controller not ready")
		}
		return nil
	})
	return r
}

// stop ends the controller and waits for Run to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("controller %s: Run = %v", r.c.ID(), err)
		}
		r.done <- nil // later stops return at once
	case <-time.After(time.Minute):
		t.Errorf("controller %s did not stop within a minute", r.c.ID())
	}
}

func (e *env) status(job string) (wire.JobStatus, error) {
	kv, err := e.js.KeyValue(context.Background(), wire.StatusBucket)
	if err != nil {
		return wire.JobStatus{}, err
	}
	en, err := kv.Get(context.Background(), job)
	if err != nil {
		return wire.JobStatus{}, err
	}
	var s wire.JobStatus
	err = json.Unmarshal(en.Value(), &s)
	return s, err
}

// plan is job's dispatch plan; false if it has none.
func (e *env) plan(job string) (wire.DispatchPlan, bool, error) {
	kv, err := e.js.KeyValue(context.Background(), wire.DispatchBucket)
	if err != nil {
		return wire.DispatchPlan{}, false, err
	}
	en, err := kv.Get(context.Background(), job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.DispatchPlan{}, false, nil
	}
	if err != nil {
		return wire.DispatchPlan{}, false, err
	}
	var p wire.DispatchPlan
	err = json.Unmarshal(en.Value(), &p)
	return p, true, err
}

func (e *env) lease(job string) (*wire.Lease, error) {
	kv, err := e.js.KeyValue(context.Background(), wire.LeasesBucket)
	if err != nil {
		return nil, err
	}
	en, err := kv.Get(context.Background(), job)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var l wire.Lease
	err = json.Unmarshal(en.Value(), &l)
	return &l, err
}

// waitState waits for the job's status to reach state.
func (e *env) waitState(t *testing.T, job string, state wire.JobState, within time.Duration) wire.JobStatus {
	t.Helper()
	var s wire.JobStatus
	testenv.CheckFor(t, within, 20*time.Millisecond, func() error {
		var err error
		if s, err = e.status(job); err != nil {
			return err
		}
		if s.State != state {
			return fmt.Errorf("job %s is %s (%s), want %s; status %+v", job, s.State, s.Reason, state, s.Tasks)
		}
		return nil
	})
	return s
}

// released checks that nothing of job is left but its record and status:
// no lease, no task consumer, no task, no dispatch plan, no replica, no
// metric series labelled with the job.
func (e *env) released(job string) error {
	ctx := context.Background()
	if l, err := e.lease(job); err != nil || l != nil {
		return fmt.Errorf("lease %+v (%v), want none", l, err)
	}
	if _, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer(job)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("task consumer: %v, want not found", err)
	}
	s, err := e.js.Stream(ctx, wire.TaskStream)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubject(job)))
	if err != nil {
		return err
	}
	if n := info.State.Subjects[wire.TaskSubject(job)]; n != 0 {
		return fmt.Errorf("%d tasks left", n)
	}
	if p, ok, err := e.plan(job); err != nil || ok {
		return fmt.Errorf("dispatch plan %+v (%v), want none", p, err)
	}
	if n := e.pool.replicas(job); n != 0 {
		return fmt.Errorf("%d replicas, want 0", n)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "job" && l.GetValue() == job {
					return fmt.Errorf("series %s{job=%q} left", mf.GetName(), job)
				}
			}
		}
	}
	return nil
}
