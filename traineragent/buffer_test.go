package traineragent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

func TestIntakeRoom(t *testing.T) {
	for _, tc := range []struct {
		name             string
		buffer           int64
		held             []int64
		starved, lagging []bool
		want             bool
	}{
		{"no bound", 0, []int64{1 << 40}, []bool{false}, []bool{false}, true},
		{"below", 100, []int64{40, 59}, []bool{false, false}, []bool{false, false}, true},
		{"full", 100, []int64{40, 60}, []bool{false, false}, []bool{false, false}, false},
		{"full, a reader starved", 100, []int64{40, 60}, []bool{false, true}, []bool{false, false}, true},
		{"a lagging reader's bytes do not count", 100, []int64{40, 600}, []bool{false, false}, []bool{false, true}, true},
		{"a lagging reader starved does not open it", 100, []int64{100, 6}, []bool{false, true}, []bool{false, true}, false},
	} {
		if got := intakeRoom(tc.buffer, tc.held, tc.starved, tc.lagging); got != tc.want {
			t.Errorf("%s: intakeRoom = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// wideOutputs is every message of a one-epoch job of shards chunks
// chunks of rows rows each, a row rowBytes bytes.
func wideOutputs(t testing.TB, job wire.Job, shards, chunks, rows, rowBytes int) []fixture.OutputMsg {
	t.Helper()
	var out []fixture.OutputMsg
	for s := range shards {
		for c := range chunks {
			keys := make([]string, rows)
			for i := range keys {
				keys[i] = fixture.RowKey(s, c*rows+i)
			}
			kj, _ := json.Marshal(keys)
			data, err := safetensors.Encode([]safetensors.Tensor{{Name: "x", DType: safetensors.U8, Shape: []int{rows, rowBytes}, Data: make([]byte, rows*rowBytes)}},
				map[string]string{wire.MetaJob: job.Spec.ID, wire.MetaEpoch: "0", wire.MetaShard: strconv.Itoa(s),
					wire.MetaChunk: strconv.Itoa(c), wire.MetaFirst: strconv.Itoa(c * rows), wire.MetaKeys: string(kj)})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fixture.OutputMsg{Ref: wire.ChunkRef{Job: job.Spec.ID, Shard: s, Chunk: c}, Data: data})
		}
		end, _ := json.Marshal(wire.ShardEnd{Job: job.Spec.ID, Shard: s, Chunks: chunks, Samples: chunks * rows})
		out = append(out, fixture.OutputMsg{Ref: wire.ChunkRef{Job: job.Spec.ID, Shard: s, Chunk: -1}, Data: end})
	}
	return out
}

// TestAgentHoldsNoMoreThanItsOutputBuffer is reproduction 3 of issue 24:
// a trainer that does not read, 4 tasks in flight, an output buffer of 4
// chunks: the agent holds at most the buffer plus one chunk per task in
// flight (each send stops reading its reply), not the shards in flight.
func TestAgentHoldsNoMoreThanItsOutputBuffer(t *testing.T) {
	const (
		shards, chunks, rows, rowBytes = 8, 6, 60, 1 << 10
		inFlight                       = 4
	)
	e := newEnv(t)
	job := fixture.Job("buffered", 1, 8, make(fixture.Layout, shards))
	job.Spec.ChunkMaxBytes = 64 << 10
	job.Spec.OutputBufferBytes = 4 * 64 << 10
	msgs := wideOutputs(t, job, shards, chunks, rows, rowBytes)
	chunk := int64(len(msgs[0].Data))
	f := newFunctionOf(t, job, msgs)
	// The replies wait until the agent has sent 4 tasks: it takes them
	// while its buffer is empty.
	hold := make(chan struct{})
	f.mu.Lock()
	f.hold = hold
	f.mu.Unlock()
	a, err := New(e.nc, e.js, job, Options{Name: "node0", PrefetchSamples: 16, DemandInterval: 20 * time.Millisecond}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	e.submit(t, job, f, inFlight)
	kv, err := e.js.KeyValue(context.Background(), wire.DispatchBucket)
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := json.Marshal(wire.DispatchPlan{Job: job.Spec.ID, Time: time.Now(), Endpoints: []string{f.srv.URL},
		PerEndpoint: inFlight, InFlight: inFlight, Shares: map[string]int{"node0": inFlight}})
	if _, err := kv.Put(context.Background(), job.Spec.ID, plan); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		n := 0
		for s := range shards {
			n += f.sendsOf(0, s)
		}
		if n < inFlight {
			return fmt.Errorf("%d tasks sent, want %d", n, inFlight)
		}
		return nil
	})
	close(hold)

	bound := job.Spec.OutputBufferBytes + inFlight*chunk
	held := func() int64 {
		r := a.readers[0]
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.st.Asm.HeldBytes
	}
	var most int64
	testenv.CheckFor(t, 20*time.Second, 5*time.Millisecond, func() error {
		h := held()
		most = max(most, h)
		if h > bound {
			t.Fatalf("the agent holds %d bytes of chunks, over its buffer %d plus %d chunks of %d (%d)", h, job.Spec.OutputBufferBytes, inFlight, chunk, bound)
		}
		if n := a.roomWaits.Load(); n != inFlight {
			return fmt.Errorf("%d sends wait for room, holding %d bytes; want all %d", n, h, inFlight)
		}
		return nil
	})
	if h := held(); h > bound || h < job.Spec.OutputBufferBytes {
		t.Errorf("with every send waiting: %d bytes held, want %d..%d", h, job.Spec.OutputBufferBytes, bound)
	}
	t.Logf("held %d bytes (at most %d seen) for a buffer of %d, chunks of %d, %d in flight, shards of %d",
		held(), most, job.Spec.OutputBufferBytes, chunk, inFlight, chunks*chunk)

	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		b, err := a.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range b.Keys {
			seen[k]++
		}
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for s := range shards {
		for r := range chunks * rows {
			if n := seen[fixture.RowKey(s, r)]; n != 1 {
				t.Fatalf("row %d of shard %d handed out %d times, want once", r, s, n)
			}
		}
	}
	if h := held(); h != 0 {
		t.Errorf("after the job: %d bytes held, want 0", h)
	}
}

// TestBatchWrittenFromRunsIsItsFile: a batch of rows of several chunks,
// written from the chunks' bytes, is the file Encode makes of its copy.
func TestBatchWrittenFromRunsIsItsFile(t *testing.T) {
	var samples []assembly.Sample
	for c, n := range []int{3, 4} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fixture.SampleKey(0, c, i)
		}
		rows, _, err := assembly.SplitChunk(fixture.ChunkBytes(t, "j", 0, 0, c, keys))
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, rows[1:]...) // runs not at a chunk's start
	}
	rows, sc, err := assembly.SplitChunk(fixture.ChunkBytes(t, "j", 0, 0, 0, []string{fixture.SampleKey(0, 0, 0), fixture.SampleKey(0, 0, 1), fixture.SampleKey(0, 0, 2)}))
	if err != nil {
		t.Fatal(err)
	}
	samples = append(samples, rows[0]) // a run of another decode of a chunk
	b := assembly.Stack(0, sc, samples).Batch
	if len(b.Runs) != 2 || len(b.Runs[0]) != 3 {
		t.Fatalf("runs %d, of image %d: want 2 tensors of 3 runs", len(b.Runs), len(b.Runs[0]))
	}
	meta := map[string]string{wire.MetaBatchJob: "j"}
	head, size, err := b.Header(meta)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := b.WriteFile(&got, head); err != nil {
		t.Fatal(err)
	}
	whole := b
	whole.Materialize()
	fixture.CheckBatch(t, whole)
	want, err := safetensors.Encode(whole.Tensors, meta)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != size || !bytes.Equal(got.Bytes(), want) {
		t.Errorf("written from runs: %d bytes (said %d), want the %d of Encode, equal", got.Len(), size, len(want))
	}
}
