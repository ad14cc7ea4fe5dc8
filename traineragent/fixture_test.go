package traineragent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/wire"
)

// layout says how many samples each chunk of each shard holds, e.g.
// {{3, 2}, {4}} is shard 0 with chunks of 3 and 2 samples, shard 1 with one of 4.
type layout [][]int

func testJob(id string, epochs, batch int, l layout) wire.Job {
	shards := make([]string, len(l))
	for i := range shards {
		shards[i] = fmt.Sprintf("train-%06d.tar", i)
	}
	return wire.Job{
		Spec: wire.JobSpec{ID: id, Dataset: "s3://b/p/", Pipeline: "test", BatchSize: batch, Epochs: epochs,
			ChunkMaxBytes: wire.DefaultChunkMaxBytes},
		Bucket: "b",
		Shards: shards,
	}
}

// sampleKey names the i-th sample of chunk c of shard s.
func sampleKey(s, c, i int) string { return fmt.Sprintf("s%d-c%d-%02d", s, c, i) }

// pixel is the value every image byte of a sample takes in an epoch, so a
// batch's rows can be checked against its keys.
func pixel(epoch int, key string) byte {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%s", epoch, key)
	return byte(h.Sum32())
}

func label(key string) int64 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int64(h.Sum32() % 1000)
}

// chunkBytes encodes a chunk as a function older than wire.MetaFirst
// would: it does not say its first row.
func chunkBytes(t testing.TB, job string, epoch, shard, chunk int, keys []string) []byte {
	t.Helper()
	return chunkBytesAt(t, job, epoch, shard, chunk, -1, keys)
}

// chunkBytesAt encodes a chunk as a function would, its first row in the
// shard first (< 0: not said).
func chunkBytesAt(t testing.TB, job string, epoch, shard, chunk, first int, keys []string) []byte {
	t.Helper()
	n := len(keys)
	img := make([]byte, 0, n*12)
	lab := make([]byte, 8*n)
	for i, k := range keys {
		for range 12 {
			img = append(img, pixel(epoch, k))
		}
		binary.LittleEndian.PutUint64(lab[8*i:], uint64(label(k)))
	}
	kj, err := json.Marshal(keys)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{
		wire.MetaJob: job, wire.MetaEpoch: strconv.Itoa(epoch), wire.MetaShard: strconv.Itoa(shard),
		wire.MetaChunk: strconv.Itoa(chunk), wire.MetaKeys: string(kj),
	}
	if first >= 0 {
		meta[wire.MetaFirst] = strconv.Itoa(first)
	}
	b, err := safetensors.Encode([]safetensors.Tensor{
		{Name: "image", DType: safetensors.U8, Shape: []int{n, 2, 2, 3}, Data: img},
		{Name: "label", DType: safetensors.I64, Shape: []int{n}, Data: lab},
	}, meta)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outputMsg is one message a function would publish.
type outputMsg struct {
	ref  wire.ChunkRef
	data []byte
}

// failedKey is the sample every shard end reports as failed.
func failedKey(shard int) string { return fmt.Sprintf("s%d-corrupt", shard) }

// outputs builds every message of a job: each shard's chunks then its end,
// which reports one failed sample.
func outputs(t testing.TB, job wire.Job, l layout) []outputMsg {
	t.Helper()
	var out []outputMsg
	for e := range job.Spec.Epochs {
		for s, chunks := range l {
			total := 0
			for c, n := range chunks {
				keys := make([]string, n)
				for i := range keys {
					keys[i] = sampleKey(s, c, i)
				}
				ref := wire.ChunkRef{Job: job.Spec.ID, Epoch: e, Shard: s, Chunk: c}
				out = append(out, outputMsg{ref, chunkBytesAt(t, job.Spec.ID, e, s, c, total, keys)})
				total += n
			}
			end, err := json.Marshal(wire.ShardEnd{Job: job.Spec.ID, Epoch: e, Shard: s, Chunks: len(chunks), Samples: total,
				Failed: []wire.FailedSample{{Key: failedKey(s), Reason: "decoding jpeg: unexpected EOF"}}})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, outputMsg{wire.ChunkRef{Job: job.Spec.ID, Epoch: e, Shard: s, Chunk: -1}, end})
		}
	}
	return out
}

// checkBatch verifies a batch's tensors against its keys and epoch.
func checkBatch(t testing.TB, b Batch) {
	t.Helper()
	b.Materialize()
	if len(b.Tensors) != 2 || b.Tensors[0].Name != "image" || b.Tensors[1].Name != "label" {
		t.Fatalf("batch tensors %v: want image and label", b.Tensors)
	}
	n := len(b.Keys)
	img, lab := b.Tensors[0], b.Tensors[1]
	if fmt.Sprint(img.Shape) != fmt.Sprint([]int{n, 2, 2, 3}) || img.DType != safetensors.U8 || len(img.Data) != n*12 {
		t.Fatalf("image %s%v with %d bytes: want U8[%d 2 2 3]", img.DType, img.Shape, len(img.Data), n)
	}
	if fmt.Sprint(lab.Shape) != fmt.Sprint([]int{n}) || lab.DType != safetensors.I64 || len(lab.Data) != 8*n {
		t.Fatalf("label %s%v with %d bytes: want I64[%d]", lab.DType, lab.Shape, len(lab.Data), n)
	}
	for i, k := range b.Keys {
		for j := range 12 {
			if got, want := img.Data[i*12+j], pixel(b.Epoch, k); got != want {
				t.Fatalf("epoch %d row %d (%s) image byte %d = %d, want %d", b.Epoch, i, k, j, got, want)
			}
		}
		if got, want := int64(binary.LittleEndian.Uint64(lab.Data[8*i:])), label(k); got != want {
			t.Fatalf("row %d (%s) label %d, want %d", i, k, got, want)
		}
	}
}

// applyMsg applies one output message to an assembler as a reader's
// intake does, a shard end as a member's (its chunks may come later).
func applyMsg(a *assembly.Assembler, m outputMsg) (assembly.Outcome, error) {
	return applySent(a, m, false)
}

// applySent is applyMsg, a shard end as the end of a send of the agent
// (sent) or not.
func applySent(a *assembly.Assembler, m outputMsg, sent bool) (assembly.Outcome, error) {
	if m.ref.Chunk >= 0 {
		return a.Add(m.ref, m.data)
	}
	var end wire.ShardEnd
	if err := json.Unmarshal(m.data, &end); err != nil {
		return assembly.Outcome{}, err
	}
	return a.End(m.ref, end, sent)
}

// function is a hand-written function replica: it answers each shard task
// with the frames a real one would send for the test layout, and can be
// told to cut a response short or to hold one.
type function struct {
	t   testing.TB
	job wire.Job
	out map[assembly.ShardRef][]outputMsg
	srv *httptest.Server

	mu    sync.Mutex
	sends map[assembly.ShardRef]int
	// cutAfter, when set for a shard, cuts its next response after that
	// many chunks (then forgets it): a replica killed mid-shard.
	cutAfter map[assembly.ShardRef]int
	// retry, when set for a shard, is its output from its second send on
	// (another function version, which cuts the rows into other chunks).
	retry map[assembly.ShardRef][]outputMsg
	// hold blocks every response before its first frame until closed.
	hold chan struct{}
	// status, when set for a shard, is the HTTP status every request for
	// it gets (404: the shard's object is gone).
	status map[assembly.ShardRef]int
}

// newFunction serves job's layout l on loopback.
func newFunction(t testing.TB, job wire.Job, l layout) *function {
	t.Helper()
	return newFunctionOf(t, job, outputs(t, job, l))
}

// newFunctionOf serves the output msgs (each shard's chunks, then its end).
func newFunctionOf(t testing.TB, job wire.Job, msgs []outputMsg) *function {
	t.Helper()
	f := &function{t: t, job: job, out: map[assembly.ShardRef][]outputMsg{}, sends: map[assembly.ShardRef]int{}, cutAfter: map[assembly.ShardRef]int{}, retry: map[assembly.ShardRef][]outputMsg{}}
	for _, m := range msgs {
		k := assembly.ShardRef{Epoch: m.ref.Epoch, Shard: m.ref.Shard}
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
		kind, index := wire.FrameChunk, m.ref.Chunk
		if m.ref.Chunk < 0 {
			kind, index = wire.FrameEnd, 0
		}
		if err := wire.WriteFrame(w, kind, index, m.data); err != nil {
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
func (f *function) setRetry(epoch, shard int, msgs []outputMsg) {
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
		wg.Go(func() { results[i], errs[i] = a.readers[0].Resume(ctx, st, world, r) })
	}
	wg.Wait()
	for i := range results {
		if errs[i] == nil && results[i] != results[0] {
			return results[0], fmt.Errorf("rank %d was told %+v, rank %d %+v: want one resume", ranks[i], results[i], ranks[0], results[0])
		}
	}
	return results[0], errors.Join(errs...)
}
