package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// function is a hand-written function replica: it answers each shard task
// with the frames a real one would send for the test layout, and can be
// told to cut a response short or to hold one.
type function struct {
	t   testing.TB
	job wire.Job
	out map[assembly.ShardRef][]fixture.OutputMsg
	srv *httptest.Server

	mu    sync.Mutex
	sends map[assembly.ShardRef]int
	// cutAfter, when set for a shard, cuts its next response after that
	// many chunks (then forgets it): a replica killed mid-shard.
	cutAfter map[assembly.ShardRef]int
	// retry, when set for a shard, is its output from its second send on
	// (another function version, which cuts the rows into other chunks).
	retry map[assembly.ShardRef][]fixture.OutputMsg
	// hold blocks every response before its first frame until closed.
	hold chan struct{}
	// status, when set for a shard, is the HTTP status every request for
	// it gets (404: the shard's object is gone).
	status map[assembly.ShardRef]int
}

// newFunction serves job's layout l on loopback.
func newFunction(t testing.TB, job wire.Job, l fixture.Layout) *function {
	t.Helper()
	return newFunctionOf(t, job, fixture.Outputs(t, job, l))
}

// newFunctionOf serves the output msgs (each shard's chunks, then its end).
func newFunctionOf(t testing.TB, job wire.Job, msgs []fixture.OutputMsg) *function {
	t.Helper()
	f := &function{t: t, job: job, out: map[assembly.ShardRef][]fixture.OutputMsg{}, sends: map[assembly.ShardRef]int{}, cutAfter: map[assembly.ShardRef]int{}, retry: map[assembly.ShardRef][]fixture.OutputMsg{}}
	for _, m := range msgs {
		k := assembly.ShardRef{Epoch: m.Ref.Epoch, Shard: m.Ref.Shard}
		f.out[k] = append(f.out[k], m)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *function) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Ce-Type") != wire.EventTypeShardTask {
		http.Error(w, "not a shard task event", http.StatusBadRequest)
		return
	}
	var task wire.ShardTask
	if err := json.NewDecoder(r.Body).Decode(&task); err != nil || task.Validate() != nil {
		http.Error(w, fmt.Sprintf("bad task: %v", err), http.StatusBadRequest)
		return
	}
	k := assembly.ShardRef{Epoch: task.Epoch, Shard: task.Shard}
	f.mu.Lock()
	f.sends[k]++
	cut, cutting := f.cutAfter[k]
	delete(f.cutAfter, k)
	hold := f.hold
	status := f.status[k]
	msgs, ok := f.out[k]
	if again, set := f.retry[k]; set && f.sends[k] > 1 {
		msgs = again
	}
	f.mu.Unlock()
	if status != 0 {
		w.Header().Set(wire.HeaderTaskRejected, "true") // the function's verdict
		http.Error(w, "shard task refused by the test", status)
		return
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		w.Header().Set(wire.HeaderTaskRejected, "true")
		http.Error(w, "no such shard", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	w.WriteHeader(http.StatusOK)
	for i, m := range msgs {
		if cutting && i == cut {
			panic(http.ErrAbortHandler) // the connection is cut: "shard incomplete"
		}
		kind, index := wire.FrameChunk, m.Ref.Chunk
		if m.Ref.Chunk < 0 {
			kind, index = wire.FrameEnd, 0
		}
		if err := wire.WriteFrame(w, kind, index, m.Data); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

// cut makes the next response for (epoch, shard) stop after n chunks.
func (f *function) cut(epoch, shard, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutAfter[assembly.ShardRef{Epoch: epoch, Shard: shard}] = n
}

// setRetry makes the sends of (epoch, shard) after the first answer msgs.
func (f *function) setRetry(epoch, shard int, msgs []fixture.OutputMsg) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retry[assembly.ShardRef{Epoch: epoch, Shard: shard}] = msgs
}

// sendsOf is how often (epoch, shard) was asked for.
func (f *function) sendsOf(epoch, shard int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sends[assembly.ShardRef{Epoch: epoch, Shard: shard}]
}

// submit does what broker.Submit and a controller do for job: record it,
// queue its tasks (every epoch, in order, or as order says), and publish a
// dispatch plan sending them to f with inFlight tasks at once.
func (e env) submit(t testing.TB, job wire.Job, f *function, inFlight int, order ...assembly.ShardRef) {
	t.Helper()
	e.submitTo(t, job, f.srv.URL, inFlight, order...)
}

// submitTo is submit with the tasks sent to the function at url.
func (e env) submitTo(t testing.TB, job wire.Job, url string, inFlight int, order ...assembly.ShardRef) {
	t.Helper()
	ctx := context.Background()
	e.record(t, job)
	if _, err := e.js.CreateOrUpdateConsumer(ctx, wire.TaskStream, streams.Dispatch(job.Spec.ID, 0)); err != nil {
		t.Fatal(err)
	}
	if len(order) == 0 {
		for ep := range job.Spec.Epochs {
			for s := range job.Shards {
				order = append(order, assembly.ShardRef{Epoch: ep, Shard: s})
			}
		}
	}
	for _, k := range order {
		data, err := json.Marshal(job.Task(k.Epoch, k.Shard))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.js.Publish(ctx, wire.TaskSubject(job.Spec.ID), data); err != nil {
			t.Fatal(err)
		}
	}
	e.planTo(t, job.Spec.ID, url, inFlight)
}

// plan publishes job's dispatch plan: f's URL, inFlight tasks at once.
func (e env) plan(t testing.TB, job string, f *function, inFlight int) {
	t.Helper()
	e.planTo(t, job, f.srv.URL, inFlight)
}

// planTo is plan for the function at url.
func (e env) planTo(t testing.TB, job, url string, inFlight int) {
	t.Helper()
	ctx := context.Background()
	kv, err := e.js.KeyValue(ctx, wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(wire.DispatchPlan{Job: job, Time: time.Now(), Endpoints: []string{url}, PerEndpoint: inFlight, InFlight: inFlight})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, job, data); err != nil {
		t.Fatal(err)
	}
}

// taskBacklog is the job's tasks not yet settled: queued or held by an agent.
func (e env) taskBacklog(t testing.TB, job string) int {
	t.Helper()
	cons, err := e.js.Consumer(context.Background(), wire.TaskStream, wire.DispatchConsumer(job))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return int(info.NumPending) + info.NumAckPending
}

// resumeAgent resumes every rank agent a serves (its Options.Ranks, else
// 0..world-1) from st at once, as each rank of a DDP job loads the same
// checkpoint; it returns the lowest rank's result.
func resumeAgent(ctx context.Context, a *Agent, st State, world int) (ResumeResult, error) {
	ranks := a.opts.Ranks
	if len(ranks) == 0 {
		for r := range max(world, st.WorldSize, 1) {
			ranks = append(ranks, r)
		}
	}
	results := make([]ResumeResult, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() { results[i], errs[i] = a.readers[0].Resume(ctx, st, world, r, "") })
	}
	wg.Wait()
	for i := range results {
		if errs[i] == nil && results[i] != results[0] {
			return results[0], fmt.Errorf("rank %d was told %+v, rank %d %+v: want one resume", ranks[i], results[i], ranks[0], results[0])
		}
	}
	return results[0], errors.Join(errs...)
}
