package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/dispatch"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// env is a NATS server with Sluice's task stream and buckets, where jobs
// are submitted as the broker does (submit, in fixture_test.go).
type env struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func newEnv(t *testing.T) env {
	t.Helper()
	_, nc := testenv.NATS(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		t.Fatal(err)
	}
	return env{nc, js}
}

// record stores job's record as broker.Submit does.
func (e env) record(t testing.TB, job wire.Job) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, wire.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, job.Spec.ID, data); err != nil {
		t.Fatal(err)
	}
}

// demands collects the demand signals of a job.
type demands struct {
	mu  sync.Mutex
	got []wire.Demand
}

func (e env) watchDemand(t *testing.T, job string) *demands {
	t.Helper()
	d := &demands{}
	sub, err := e.nc.Subscribe(wire.DemandSubject(job), func(m *nats.Msg) {
		var dm wire.Demand
		if err := json.Unmarshal(m.Data, &dm); err != nil {
			t.Errorf("demand %q: %v", m.Data, err)
			return
		}
		d.mu.Lock()
		d.got = append(d.got, dm)
		d.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *demands) all() []wire.Demand {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// runAgent starts Run and returns a function waiting for its result.
func runAgent(t *testing.T, a *Agent) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	var once sync.Once
	var err error
	wait := func() error {
		once.Do(func() {
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				err = errors.New("Run did not return within 30s")
			}
		})
		return err
	}
	t.Cleanup(func() { cancel(); wait() })
	return wait
}

// drain calls Next until io.EOF and checks every batch.
func drain(t *testing.T, next func(context.Context) (Batch, error)) []Batch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []Batch
	for {
		b, err := next(ctx)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("after %d batches: %v", len(out), err)
		}
		fixture.CheckBatch(t, b)
		out = append(out, b)
	}
}

// checkDelivery asserts every sample of the layout arrived once per epoch,
// in batches of one epoch each, full but for each epoch's last.
func checkDelivery(t *testing.T, job wire.Job, l fixture.Layout, batches []Batch) {
	t.Helper()
	want := map[string]bool{}
	perEpoch := 0
	for e := range job.Spec.Epochs {
		for s, chunks := range l {
			for c, n := range chunks {
				for i := range n {
					want[fmt.Sprintf("%d/%s", e, fixture.SampleKey(s, c, i))] = true
				}
			}
		}
	}
	for _, chunks := range l {
		for _, n := range chunks {
			perEpoch += n
		}
	}
	got := map[string]bool{}
	sizes := map[int][]int{}
	lastEpochOfBatch := map[int]int{}
	for i, b := range batches {
		for _, k := range b.Keys {
			id := fmt.Sprintf("%d/%s", b.Epoch, k)
			if got[id] {
				t.Errorf("sample %s delivered twice", id)
			}
			got[id] = true
		}
		sizes[b.Epoch] = append(sizes[b.Epoch], len(b.Keys))
		lastEpochOfBatch[b.Epoch] = i
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("samples delivered (-want +got):\n%s", diff)
	}
	for e := range job.Spec.Epochs {
		var wantSizes []int
		for n := perEpoch; n > 0; n -= job.Spec.BatchSize {
			wantSizes = append(wantSizes, min(n, job.Spec.BatchSize))
		}
		if diff := cmp.Diff(wantSizes, sizes[e]); diff != "" {
			t.Errorf("epoch %d batch sizes (-want +got):\n%s", e, diff)
		}
	}
}

func TestAgentDeliversEveryEpochExactlyOnce(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}} // 15 samples per epoch
	job := fixture.Job("job-1", 2, 4, l)
	reg := prometheus.NewRegistry()
	a, err := New(e.nc, e.js, job, Options{DemandInterval: 20 * time.Millisecond}, nil, NewMetrics(reg), reg)
	if err != nil {
		t.Fatal(err)
	}
	dm := e.watchDemand(t, job.Spec.ID)
	f := newFunction(t, job, l)
	// Two replicas killed mid-shard: their shards are sent again and the
	// chunks that had arrived come twice; the agent drops the copies.
	f.cut(0, 0, 1)
	f.cut(1, 2, 2)
	// The agent may start before the job is submitted.
	wait := runAgent(t, a)
	rng := rand.New(rand.NewPCG(7, 7))
	var order []assembly.ShardRef
	for ep := range job.Spec.Epochs {
		for s := range job.Shards {
			order = append(order, assembly.ShardRef{Epoch: ep, Shard: s})
		}
	}
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	e.submit(t, job, f, 2, order...)

	var batches []Batch
	done := make(chan struct{})
	go func() {
		defer close(done)
		batches = drain(t, a.Next)
	}()
	<-done
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkDelivery(t, job, l, batches)
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
	if f.sendsOf(0, 0) != 2 || f.sendsOf(1, 2) != 2 || f.sendsOf(0, 1) != 1 {
		t.Errorf("sends of e0/s0, e1/s2, e0/s1 = %d, %d, %d; want 2, 2, 1", f.sendsOf(0, 0), f.sendsOf(1, 2), f.sendsOf(0, 1))
	}

	st := a.Stats()
	if st.DuplicateChunks != 3 {
		t.Errorf("DuplicateChunks = %d, want 3", st.DuplicateChunks)
	}
	if st.SamplesDelivered != 30 || st.SamplesArrived != 30 || st.BatchesDelivered != 8 || st.Epochs != 2 || st.BufferedSamples != 0 {
		t.Errorf("stats = %+v, want 30 samples arrived and delivered in 8 batches over 2 epochs, none buffered", st)
	}
	var failed []string
	for _, f := range st.FailedSamples {
		failed = append(failed, f.Key)
	}
	slices.Sort(failed)
	if diff := cmp.Diff([]string{"s0-corrupt", "s0-corrupt", "s1-corrupt", "s1-corrupt", "s2-corrupt", "s2-corrupt"}, failed); diff != "" {
		t.Errorf("failed samples (-want +got):\n%s", diff)
	}
	if st.TimeToFirstBatch <= 0 || st.RunTime < st.TimeToFirstBatch {
		t.Errorf("time to first batch %v, run time %v", st.TimeToFirstBatch, st.RunTime)
	}
	if _, err := a.Next(context.Background()); !errors.Is(err, io.EOF) {
		t.Errorf("Next after the end = %v, want io.EOF", err)
	}

	// The final demand says Done, and it is the last one.
	testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		got := dm.all()
		if len(got) == 0 || !got[len(got)-1].Done {
			return fmt.Errorf("demands %+v: want the last one Done", got)
		}
		return nil
	})
	got := dm.all()
	last := got[len(got)-1]
	if last.Job != job.Spec.ID || last.SamplesDone != 30 || last.BufferCapacity != 256 || last.GPUUtilization != -1 {
		t.Errorf("final demand %+v: want job %s, 30 samples done, capacity 256, gpu -1", last, job.Spec.ID)
	}
	for _, d := range got[:len(got)-1] {
		if d.Done {
			t.Errorf("demand %+v is Done before the last one", d)
		}
	}

	n, err := prometheusCounter(reg, "sluice_agent_samples_delivered_total")
	if err != nil || n != 30 {
		t.Errorf("samples delivered metric = %v (%v), want 30", n, err)
	}
}

func prometheusCounter(reg *prometheus.Registry, name string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue(), nil
		}
	}
	return 0, fmt.Errorf("no single series %s", name)
}

func TestAgentTakesNoTaskWhileItsBufferIsFull(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{4}, {4}, {4}, {4}, {4}, {4}} // 24 samples in shards of one chunk of 4
	job := fixture.Job("slow", 1, 4, l)
	f := newFunction(t, job, l)
	e.submit(t, job, f, 1)
	a, err := New(e.nc, e.js, job, Options{PrefetchSamples: 8, DemandInterval: 20 * time.Millisecond}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dm := e.watchDemand(t, job.Spec.ID)
	wait := runAgent(t, a)

	// Two shards make two ready batches, which fill the buffer; the agent
	// then takes no task until the trainer takes a batch.
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if st := a.Stats(); st.BufferedSamples < 8 {
			return fmt.Errorf("buffered %d samples, want 8", st.BufferedSamples)
		}
		return nil
	})
	testenv.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		for _, d := range dm.all() {
			if d.BufferedSamples == 8 && d.BufferCapacity == 8 {
				return nil
			}
		}
		return errors.New("no demand reports the full buffer")
	})
	sends := 0
	for s := range l {
		sends += f.sendsOf(0, s)
	}
	if st := a.Stats(); st.SamplesArrived != 8 || sends != 2 || e.taskBacklog(t, job.Spec.ID) != len(l) {
		t.Fatalf("with a full buffer: %d samples arrived, %d shards sent, %d tasks unsettled; want 8, 2 and all %d",
			st.SamplesArrived, sends, e.taskBacklog(t, job.Spec.ID), len(l))
	}

	b, err := a.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fixture.CheckBatch(t, b)
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		if st := a.Stats(); st.SamplesArrived <= 8 {
			return fmt.Errorf("%d samples arrived after a batch was taken, want more", st.SamplesArrived)
		}
		return nil
	})
	rest := drain(t, a.Next)
	checkDelivery(t, job, l, append([]Batch{b}, rest...))
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
}

func TestAgentNextReportsStallAndStop(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{2}}
	job := fixture.Job("idle", 1, 2, l)
	e.record(t, job)
	a, err := New(e.nc, e.js, job, Options{DemandInterval: 10 * time.Millisecond, GPU: fixedGPU(0.42)}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dm := e.watchDemand(t, job.Spec.ID)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()

	// No task is queued: a trainer waiting in Next is stalled, and the
	// demand says so while the wait is still going on.
	nextCtx, nextCancel := context.WithCancel(context.Background())
	nextErr := make(chan error, 1)
	go func() {
		_, err := a.Next(nextCtx)
		nextErr <- err
	}()
	testenv.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		for _, d := range dm.all() {
			if d.StallFraction > 0.5 && d.GPUUtilization == 0.42 {
				return nil
			}
		}
		return fmt.Errorf("no demand reports a stall and the gpu reading: %+v", dm.all())
	})
	nextCancel()
	if err := <-nextErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Next with a cancelled context = %v, want context.Canceled", err)
	}
	if st := a.Stats(); st.StallTime <= 0 {
		t.Errorf("stall time %v after a wait, want > 0", st.StallTime)
	}

	cancel()
	if err := <-runErr; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
	if _, err := a.Next(context.Background()); !errors.Is(err, readerstate.ErrStopped) {
		t.Errorf("Next after Run stopped = %v, want ErrStopped", err)
	}
	if err := a.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
}

func TestAgentHTTP(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3}, {2}}
	job := fixture.Job("http", 1, 2, l)
	e.submit(t, job, newFunction(t, job, l), 2)
	a, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	batches := drain(t, func(ctx context.Context) (Batch, error) { return getBatch(ctx, srv.URL) })
	checkDelivery(t, job, l, batches)
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(srv.URL + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		SamplesDelivered int                 `json:"samples_delivered"`
		Epochs           int                 `json:"epochs"`
		FailedSamples    []wire.FailedSample `json:"failed_samples"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.SamplesDelivered != 5 || st.Epochs != 1 || len(st.FailedSamples) != 2 {
		t.Errorf("GET /v1/stats = %+v, want 5 samples, 1 epoch, 2 failed", st)
	}
}

// getBatch is GET /v1/batch of the agent at base: io.EOF once the job is
// over (410).
func getBatch(ctx context.Context, base string) (Batch, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/batch", nil)
	if err != nil {
		return Batch{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Batch{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Batch{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return assembly.DecodeBatch(body)
	case http.StatusGone:
		return Batch{}, io.EOF
	}
	return Batch{}, fmt.Errorf("GET /v1/batch: %s: %s", resp.Status, body)
}

func TestNewRejectsBadJobs(t *testing.T) {
	e := newEnv(t)
	twoReaders := fixture.Job("j", 1, 1, fixture.Layout{{1}})
	twoReaders.Spec.Readers = []string{"a", "b"}
	for _, tc := range []struct {
		name string
		job  wire.Job
		opts Options
		want string
	}{
		{"bad id", fixture.Job("a b", 1, 1, fixture.Layout{{1}}), Options{}, ""},
		{"no batch size", fixture.Job("j", 1, 0, fixture.Layout{{1}}), Options{}, ""},
		{"no epochs", fixture.Job("j", 0, 1, fixture.Layout{{1}}), Options{}, ""},
		{"negative prefetch", fixture.Job("j", 1, 1, fixture.Layout{{1}}), Options{PrefetchSamples: -1}, ""},
		{"ranks without a world size", fixture.Job("j", 1, 1, fixture.Layout{{1}}), Options{Ranks: []int{0}}, "world size"},
		{"a rank beyond the world", fixture.Job("j", 1, 1, fixture.Layout{{1}}), Options{WorldSize: 2, Ranks: []int{2}}, "rank 2"},
		{"a rank twice", fixture.Job("j", 1, 1, fixture.Layout{{1}}), Options{WorldSize: 4, Ranks: []int{1, 1}}, "twice"},
		{"a team of a job with two readers", twoReaders, Options{WorldSize: 4, Ranks: []int{0, 1}}, "one reader"},
	} {
		_, err := New(e.nc, e.js, tc.job, tc.opts, nil, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

type fixedGPU float64

func (g fixedGPU) Utilization() (float64, error) { return float64(g), nil }

// TestAShardThatFailsForGoodEndsItsEpoch: a shard whose every send is
// refused for good (its object gone: 404) is reported under its key and
// the epoch is cut without it, its task settled: the trainer gets the
// other samples and its 410, not a wait for samples that will not come.
func TestAShardThatFailsForGoodEndsItsEpoch(t *testing.T) {
	e := newEnv(t)
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}}
	job := fixture.Job("gone-shard", 1, 4, l)
	f := newFunction(t, job, l)
	f.status = map[assembly.ShardRef]int{{Epoch: 0, Shard: 1}: http.StatusNotFound}
	e.submit(t, job, f, 2)
	a, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	parts := takeRanks(t, a, 1, -1)[0]
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// The epoch's last step tells the trainer what the epoch lacks: the
	// failed sample each shard end lists, and the shard that failed.
	if last := parts[len(parts)-1]; !last.Last || last.EpochFailed != 3 {
		t.Errorf("the epoch's last part: last %t, epoch_failed %d, want 3", last.Last, last.EpochFailed)
	}
	got := 0
	for _, p := range parts {
		b := p.Batch
		got += len(b.Keys)
		for _, k := range b.Keys {
			if strings.HasPrefix(k, "s1-") {
				t.Errorf("sample %s of the failed shard delivered", k)
			}
		}
	}
	if got != 11 {
		t.Errorf("%d samples delivered, want the 11 of the shards that did not fail", got)
	}
	var reasons []string
	for _, fs := range a.Stats().FailedSamples {
		if fs.Key == job.Shards[1] {
			reasons = append(reasons, fs.Reason)
		}
	}
	if len(reasons) != 1 || !strings.Contains(reasons[0], "404") || !strings.Contains(reasons[0], "0 samples of it came") {
		t.Errorf("failures of shard %s: %q, want one naming the 404 and the samples that came", job.Shards[1], reasons)
	}
	if n := e.taskBacklog(t, job.Spec.ID); n != 0 {
		t.Errorf("%d tasks left unsettled, want 0", n)
	}
}

// TestDispatchLoad: the work an agent's demand reports counts what its
// queue no longer shows: shards produced again and replays not started,
// so that the autoscaler keeps or brings back a replica for them.
func TestDispatchLoad(t *testing.T) {
	inFlight, pending := dispatchLoad(dispatch.Stats{InFlight: 2, Producing: 1, Queued: 5, Replays: 3, Held: 9, Share: 4})
	if inFlight != 3 || pending != 8 {
		t.Errorf("in flight %d, pending %d; want 3 and 8", inFlight, pending)
	}
	if inFlight, pending := dispatchLoad(dispatch.Stats{Producing: 1}); inFlight != 1 || pending != 0 {
		t.Errorf("a production alone: in flight %d, pending %d; want 1 and 0", inFlight, pending)
	}
}
