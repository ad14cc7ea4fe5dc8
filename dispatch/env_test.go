package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// The test environment: a real embedded JetStream server on loopback,
// function replicas as httptest servers on 127.0.0.1 that speak the frame
// protocol (fakeFn, hand-written: the real functions/server is elsewhere),
// and a recording Sink.

type env struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return &env{nc: nc, js: js}
}

func testJob(id string, shards, epochs int) wire.Job {
	job := wire.Job{
		Spec: wire.JobSpec{ID: id, Dataset: "s3://data/ds/", Pipeline: "image-classification", BatchSize: 8,
			Epochs: epochs, Seed: 7}.WithDefaults(),
		Bucket: "data",
	}
	for i := range shards {
		job.Shards = append(job.Shards, fmt.Sprintf("ds/shard-%06d.tar", i))
	}
	return job
}

// queue publishes the job's tasks of every epoch, as the broker does.
func (e *env) queue(t *testing.T, job wire.Job) {
	t.Helper()
	for epoch := range job.Spec.Epochs {
		for shard := range job.Shards {
			e.publishTask(t, job.Task(epoch, shard))
		}
	}
}

func (e *env) publishTask(t *testing.T, task wire.ShardTask) {
	t.Helper()
	data, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(context.Background(), wire.TaskSubject(task.Job), data); err != nil {
		t.Fatal(err)
	}
}

func (e *env) putPlan(t *testing.T, p wire.DispatchPlan) {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	p.Time = time.Now()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), p.Job, data); err != nil {
		t.Fatal(err)
	}
}

// shardsFailed reads job's record of tasks given up (none: empty).
func (e *env) shardsFailed(t *testing.T, job wire.Job) wire.ShardsFailed {
	t.Helper()
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	var rec wire.ShardsFailed
	en, err := kv.Get(context.Background(), wire.ShardsFailedKey(job.Spec.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return rec
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(en.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func (e *env) consumerInfo(t *testing.T, job string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.js.Consumer(context.Background(), wire.TaskStream, wire.DispatchConsumer(job))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// results collects the job's published ShardResults.
func (e *env) results(t *testing.T, job string) func() []wire.ShardResult {
	t.Helper()
	var mu sync.Mutex
	var out []wire.ShardResult
	sub, err := e.nc.Subscribe(wire.ResultSubject(job), func(m *nats.Msg) {
		var r wire.ShardResult
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Errorf("undecodable result: %v", err)
			return
		}
		mu.Lock()
		out = append(out, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() []wire.ShardResult {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// start runs a Dispatcher until the test ends (or stop is called, which
// returns Run's error).
func (e *env) start(t *testing.T, job wire.Job, sink Sink, opts Options) (d *Dispatcher, stop func() error) {
	t.Helper()
	d = e.newDispatcher(t, job, sink, opts)
	return d, run(t, d)
}

func (e *env) newDispatcher(t *testing.T, job wire.Job, sink Sink, opts Options) *Dispatcher {
	t.Helper()
	if opts.Agent == "" {
		opts.Agent = "a"
	}
	d, err := New(context.Background(), e.nc, e.js, job, sink, opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func run(t *testing.T, d *Dispatcher) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Run did not return 10s after its ctx ended")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitRounds waits until the pull loop went round n more times: whatever
// it was going to do with what it saw, it did.
func waitRounds(t *testing.T, d *Dispatcher, n int) {
	t.Helper()
	d.mu.Lock()
	from := d.loops
	d.mu.Unlock()
	checkFor(t, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.loops < from+n {
			return fmt.Errorf("pull loop at round %d, want %d", d.loops, from+n)
		}
		return nil
	})
}

func checkFor(t *testing.T, f func() error) {
	t.Helper()
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, f)
}

// chunkData is the deterministic content of a fake shard's chunk.
func chunkData(task wire.ShardTask, i int) []byte {
	return fmt.Appendf(nil, "%s chunk %d of seed %d", task.ID(), i, task.Seed)
}

// chunksOf is how many chunks a fake shard has: 1 to 3.
func chunksOf(task wire.ShardTask) int { return 1 + task.Shard%3 }

func endOf(task wire.ShardTask) wire.ShardEnd {
	end := wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunks: chunksOf(task), Cache: "off"}
	for i := range end.Chunks {
		end.Samples += 2
		end.Bytes += int64(len(chunkData(task, i)))
	}
	return end
}

// fakeFn plays a function replica: it checks the task event and answers
// with the shard's frames, or as reply says for the n-th request (from 0)
// of a task.
type fakeFn struct {
	*httptest.Server
	// reply, when set and returning true, has answered the request.
	reply func(w http.ResponseWriter, task wire.ShardTask, n int) bool

	mu    sync.Mutex
	tasks []wire.ShardTask // in arrival order
	calls map[string]int
	errs  []string
}

func newFakeFn(t *testing.T, reply func(w http.ResponseWriter, task wire.ShardTask, n int) bool) *fakeFn {
	f := &fakeFn{reply: reply, calls: map[string]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.errs {
			t.Errorf("function replica: %s", e)
		}
	})
	return f
}

func (f *fakeFn) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(format string, args ...any) {
		f.mu.Lock()
		f.errs = append(f.errs, fmt.Sprintf(format, args...))
		f.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
	}
	if r.Method != http.MethodPost {
		fail("method %s, want POST", r.Method)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		fail("reading the task: %v", err)
		return
	}
	var task wire.ShardTask
	if err := json.Unmarshal(body, &task); err != nil {
		fail("decoding the task: %v", err)
		return
	}
	for h, want := range map[string]string{
		"Ce-Specversion": "1.0", "Ce-Type": wire.EventTypeShardTask, "Ce-Source": wire.EventSource,
		"Ce-Id": task.ID(), "Content-Type": "application/json",
	} {
		if got := r.Header.Get(h); got != want {
			fail("task %s: header %s = %q, want %q", task.ID(), h, got, want)
			return
		}
	}
	f.mu.Lock()
	n := f.calls[task.ID()]
	f.calls[task.ID()]++
	f.tasks = append(f.tasks, task)
	f.mu.Unlock()
	if f.reply != nil && f.reply(w, task, n) {
		return
	}
	writeShard(w, task, -1)
}

// writeShard answers with task's frames; cutAfter >= 0 cuts the
// connection after that many chunks.
func writeShard(w http.ResponseWriter, task wire.ShardTask, cutAfter int) {
	w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	for i := range chunksOf(task) {
		if i == cutAfter {
			panic(http.ErrAbortHandler)
		}
		if err := wire.WriteFrame(w, wire.FrameChunk, i, chunkData(task, i)); err != nil {
			return
		}
		fl.Flush()
	}
	if cutAfter >= chunksOf(task) {
		panic(http.ErrAbortHandler)
	}
	data, _ := json.Marshal(endOf(task))
	_ = wire.WriteFrame(w, wire.FrameEnd, 0, data)
}

func (f *fakeFn) received() []wire.ShardTask {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tasks)
}

func (f *fakeFn) callsOf(task wire.ShardTask) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[task.ID()]
}

// recSink records what a Dispatcher hands it and checks that copies of a
// chunk carry the same bytes.
type recSink struct {
	t *testing.T
	// onEnd and onFailed, when set, run after the record (e.g. Settle).
	onEnd    func(wire.ShardTask, wire.ShardEnd)
	onFailed func(wire.ShardTask, string)

	mu         sync.Mutex
	full       bool
	chunks     map[string]map[int][]byte
	chunkCalls map[string]int
	ends       map[string][]wire.ShardEnd
	endOrder   []string
	failed     map[string][]string
}

func newRecSink(t *testing.T) *recSink {
	return &recSink{t: t, chunks: map[string]map[int][]byte{}, chunkCalls: map[string]int{},
		ends: map[string][]wire.ShardEnd{}, failed: map[string][]string{}}
}

func (s *recSink) Room() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.full
}

func (s *recSink) setFull(full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = full
}

func (s *recSink) WaitRoom(context.Context, wire.ShardTask) error { return nil }

func (s *recSink) Chunk(task wire.ShardTask, index int, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := task.ID()
	s.chunkCalls[id]++
	if s.chunks[id] == nil {
		s.chunks[id] = map[int][]byte{}
	}
	if prev, ok := s.chunks[id][index]; ok {
		if string(prev) != string(data) {
			s.t.Errorf("task %s chunk %d came again with other bytes", id, index)
		}
		return nil
	}
	s.chunks[id][index] = slices.Clone(data)
	return nil
}

func (s *recSink) End(task wire.ShardTask, end wire.ShardEnd) {
	s.mu.Lock()
	s.ends[task.ID()] = append(s.ends[task.ID()], end)
	s.endOrder = append(s.endOrder, task.ID())
	for i := range end.Chunks {
		if _, ok := s.chunks[task.ID()][i]; !ok {
			s.t.Errorf("task %s ended without chunk %d", task.ID(), i)
		}
	}
	onEnd := s.onEnd
	s.mu.Unlock()
	if onEnd != nil {
		onEnd(task, end)
	}
}

// setOnEnd sets onEnd once the dispatcher runs (under the sink's lock: its
// sends may be ending).
func (s *recSink) setOnEnd(f func(wire.ShardTask, wire.ShardEnd)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onEnd = f
}

func (s *recSink) Failed(task wire.ShardTask, reason string) {
	s.mu.Lock()
	s.failed[task.ID()] = append(s.failed[task.ID()], reason)
	onFailed := s.onFailed
	s.mu.Unlock()
	if onFailed != nil {
		onFailed(task, reason)
	}
}

func (s *recSink) endCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.endOrder)
}

func (s *recSink) failures(task wire.ShardTask) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failed[task.ID()])
}

// waitEnds waits for n End calls in all.
func (s *recSink) waitEnds(t *testing.T, n int) {
	t.Helper()
	checkFor(t, func() error {
		if got := s.endCount(); got < n {
			return fmt.Errorf("%d shard ends, want %d", got, n)
		}
		return nil
	})
}

// checkShards checks that each of tasks ended exactly once with all its
// chunks, as the fake function makes them.
func (s *recSink) checkShards(t *testing.T, tasks []wire.ShardTask) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, task := range tasks {
		id := task.ID()
		if n := len(s.ends[id]); n != 1 {
			t.Errorf("task %s: End called %d times, want 1", id, n)
			continue
		}
		if got, want := s.ends[id][0], endOf(task); got.Chunks != want.Chunks || got.Samples != want.Samples || got.Bytes != want.Bytes {
			t.Errorf("task %s: end %+v, want %+v", id, got, want)
		}
		if len(s.chunks[id]) != chunksOf(task) {
			t.Errorf("task %s: %d distinct chunks, want %d", id, len(s.chunks[id]), chunksOf(task))
		}
		for i, b := range s.chunks[id] {
			if string(b) != string(chunkData(task, i)) {
				t.Errorf("task %s chunk %d: %q, want %q", id, i, b, chunkData(task, i))
			}
		}
	}
}

func allTasks(job wire.Job) []wire.ShardTask {
	var out []wire.ShardTask
	for epoch := range job.Spec.Epochs {
		for shard := range job.Shards {
			out = append(out, job.Task(epoch, shard))
		}
	}
	return out
}

// metricValue is the value of the series of name with label = value (a
// counter, a gauge, or a histogram's count).
func metricValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() != label || lp.GetValue() != value {
					continue
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0
}
