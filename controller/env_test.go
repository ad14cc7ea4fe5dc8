package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/functions/server"
	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/synth"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// env is real embedded NATS and S3 with a small image dataset at
// s3://data/img/ (samples, in shards) and a text one at s3://data/txt/, a
// real function server behind a gate, and a pool actuator that "runs"
// replicas of that server.
type env struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	s3      *s3.Client
	b       *broker.Broker
	gate    *gate
	pool    *pool
	reg     *prometheus.Registry
	samples int
}

func newEnv(t *testing.T, samples, shards int) *env { return newEnvTB(t, samples, shards) }

func newBenchEnv(b *testing.B) *env { return newEnvTB(b, 8, 2) }

func newEnvTB(t testing.TB, samples, shards int) *env {
	t.Helper()
	ctx := context.Background()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s3c, _ := testenv.S3(t, "")
	imgs, err := synth.Images(synth.ImageOptions{Samples: samples, Shards: shards, Seed: 1, MinSide: 24, MaxSide: 40, Quality: 60, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "img/", imgs); err != nil {
		t.Fatal(err)
	}
	txt, err := synth.Text(synth.TextOptions{Samples: 12, Shards: 2, Seed: 1, Format: "jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "txt/", txt); err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(ctx, js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	fn, err := server.New(server.Config{Concurrency: 64}, js, s3c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{next: fn.Handler(), open: make(chan struct{}), calls: map[string]int{}}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &env{nc: nc, js: js, s3: s3c, b: broker.New(js, s3c, streams.Options{}, nil), gate: g,
		pool: newPool(srv.URL), reg: prometheus.NewRegistry(), samples: samples}
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

// gate passes the first `allow` shard requests to the function server,
// holds the rest until it is opened (or the request is cancelled: 503),
// and counts the requests that reached the function, per task.
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

// pool is an actuator whose replicas are the one function server: every
// replica asked for is ready at once. It records the most replicas it was
// asked for in all and per job.
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
	if p.Ready(job) == 0 {
		return nil
	}
	return []string{p.url}
}

func (p *pool) replicas(job string) int { return p.Ready(job) }

// reader consumes a job's output on a reader's durable consumer like an
// agent does, acking every message, and records the (epoch, key) of every
// sample delivered.
type reader struct {
	mu   sync.Mutex
	seen map[string]int
	dups int
	stop func()
}

func (e *env) startReader(t *testing.T, job, name string) *reader {
	t.Helper()
	cons, err := e.js.Consumer(context.Background(), wire.OutputStream(job), wire.ReaderConsumer(name))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.b.Job(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	readers, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	r := &reader{seen: map[string]int{}}
	ends := map[string]bool{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		defer m.Ack()
		ref, err := wire.ParseChunkRef(job, m.Headers())
		if err != nil {
			return
		}
		if ref.Chunk < 0 {
			// Every shard end of every epoch: done, as an agent says it
			// once its trainer has the last batch.
			r.mu.Lock()
			ends[ref.MsgID()] = true
			all := len(ends) == rec.Tasks()
			r.mu.Unlock()
			if all {
				data, _ := json.Marshal(wire.ReaderDone{Submitted: rec.Submitted, Time: time.Now()})
				if _, err := readers.Put(context.Background(), wire.ReaderDoneKey(job, name), data); err != nil {
					t.Errorf("writing %s: %v", wire.ReaderDoneKey(job, name), err)
				}
			}
			return
		}
		f, err := safetensors.Decode(m.Data())
		if err != nil {
			t.Errorf("chunk %s: %v", ref.MsgID(), err)
			return
		}
		var keys []string
		if err := json.Unmarshal([]byte(f.Metadata[wire.MetaKeys]), &keys); err != nil {
			t.Errorf("chunk %s keys: %v", ref.MsgID(), err)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, k := range keys {
			id := fmt.Sprintf("%d/%s", ref.Epoch, k)
			if r.seen[id]++; r.seen[id] > 1 {
				r.dups++
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	r.stop = cc.Stop
	t.Cleanup(cc.Stop)
	return r
}

// exactlyOnce checks that every sample of every epoch arrived once.
func (r *reader) exactlyOnce(t *testing.T, expected int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) != expected || r.dups != 0 {
		t.Errorf("reader got %d distinct samples with %d duplicates, want %d exactly once", len(r.seen), r.dups, expected)
	}
}

// running is a controller running in the background.
type running struct {
	c      *Controller
	cancel context.CancelFunc
	done   chan error
}

func (e *env) startController(t *testing.T, id string, o Options) *running {
	return e.startControllerB(t, id, o)
}

func (e *env) startControllerB(t testing.TB, id string, o Options) *running {
	t.Helper()
	o.ID, o.NC, o.JS, o.Broker = id, e.nc, e.js, e.b
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
	c, err := New(o, nil, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
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
// no lease, no dispatch consumer, no task, no output stream, no replica,
// no metric series labelled with the job.
func (e *env) released(job string) error {
	ctx := context.Background()
	if l, err := e.lease(job); err != nil || l != nil {
		return fmt.Errorf("lease %+v (%v), want none", l, err)
	}
	if _, err := e.js.Consumer(ctx, wire.TaskStream, wire.DispatchConsumer(job)); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("dispatch consumer: %v, want not found", err)
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
	if _, err := e.js.Stream(ctx, wire.OutputStream(job)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("output stream: %v, want not found", err)
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
