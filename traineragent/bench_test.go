package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// BenchmarkAgentMBChunks pushes ImageNet-size samples in chunks of about
// 3 MiB through the agent, from a function replica on loopback that
// answers each task with ready-made frames: the agent's own cost of
// receiving, batching and handing out.
func BenchmarkAgentMBChunks(b *testing.B) {
	const shards, chunksPerShard, perChunk = 4, 5, 20
	e := benchEnv(b)
	nc, js := e.nc, e.js
	l := make(fixture.Layout, shards)
	for s := range l {
		l[s] = make([]int, chunksPerShard)
	}
	ctx := context.Background()
	var bytes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer() // preprocessing is the functions' work, not the agent's
		id := fmt.Sprintf("bench-%d", i)
		job := fixture.Job(id, 1, 32, l)
		msgs, size := imageNetOutput(b, id, shards, chunksPerShard, perChunk)
		bytes += size
		e.submit(b, job, newFunctionOf(b, job, msgs), 2)
		a, err := New(nc, js, job, Options{}, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		errc := make(chan error, 1)
		go func() { errc <- a.Run(ctx) }()
		n := 0
		for {
			batch, err := a.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(batch.Keys)
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		if n != shards*chunksPerShard*perChunk {
			b.Fatalf("%d samples, want %d", n, shards*chunksPerShard*perChunk)
		}
	}
	b.SetBytes(bytes / int64(b.N))
}

func benchConnect(b *testing.B, url string) (*nats.Conn, jetstream.JetStream) {
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return nc, js
}

// BenchmarkNextRecordsPosition measures a batch's cost when batches are
// tiny (one sample), so that recording the position before each batch is
// returned (one key-value update on the embedded server) dominates. An
// op is 1000 batches.
func BenchmarkNextRecordsPosition(b *testing.B) {
	e := benchEnv(b)
	nc, js := e.nc, e.js
	chunks := make([]int, 100)
	for i := range chunks {
		chunks[i] = 10
	}
	l := fixture.Layout{chunks} // 1000 samples
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		job := fixture.Job(fmt.Sprintf("pos-%d", i), 1, 1, l)
		e.submit(b, job, newFunction(b, job, l), 2)
		a, err := New(nc, js, job, Options{}, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		errc := make(chan error, 1)
		go func() { errc <- a.Run(ctx) }()
		n := 0
		for {
			_, err := a.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		if n != 1000 {
			b.Fatalf("%d batches, want 1000", n)
		}
	}
}

// BenchmarkServeBatchesOverHTTP reads a job's batches of 256 ImageNet-size
// samples over loopback HTTP as a trainer does, all output already in the
// agent's memory: the agent's serving cost (forming steps, recording the
// position, writing the body). Its b.SetBytes makes MB/s comparable with
// BenchmarkServeFixedBatch, the same bytes served from one buffer.
func BenchmarkServeBatchesOverHTTP(b *testing.B) {
	const shards, chunksPerShard, perChunk, batch = 4, 8, 32, 256
	e := benchEnv(b)
	nc, js := e.nc, e.js
	l := make(fixture.Layout, shards)
	for s := range l {
		l[s] = make([]int, chunksPerShard)
	}
	ctx := context.Background()
	var total int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("http-%d", i)
		job := fixture.Job(id, 1, batch, l)
		msgs, _ := imageNetOutput(b, id, shards, chunksPerShard, perChunk)
		e.submit(b, job, newFunctionOf(b, job, msgs), 2)
		a, err := New(nc, js, job, Options{PrefetchSamples: shards * chunksPerShard * perChunk}, nil, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- a.Run(rctx) }()
		for a.Stats().SamplesArrived < int64(shards*chunksPerShard*perChunk) {
			time.Sleep(5 * time.Millisecond)
		}
		hs := httptest.NewServer(a.Handler())
		b.StartTimer()
		for {
			resp, err := http.Get(hs.URL + "/v1/batch")
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusGone {
				break
			}
			total += n
		}
		b.StopTimer()
		hs.Close()
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
		cancel()
		b.StartTimer()
	}
	b.SetBytes(total / int64(b.N))
}

// BenchmarkServeFixedBatch serves one batch of 256 samples from one buffer
// (what bench/batchserver does) to the same client: the ceiling that
// BenchmarkServeBatchesOverHTTP is compared with.
func BenchmarkServeFixedBatch(b *testing.B) {
	data := make([]byte, 256*224*224*3)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
	}))
	defer hs.Close()
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(hs.URL)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// benchEnv starts an embedded NATS server with Sluice's streams and buckets.
func benchEnv(b *testing.B) env {
	srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, js := benchConnect(b, srv.URL())
	b.Cleanup(nc.Close)
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		b.Fatal(err)
	}
	return env{nc, js}
}

// imageNetOutput is the output of job id's shards as functions make it:
// chunksPerShard chunks of perChunk uint8 224x224x3 samples (zeros) each,
// then the shard's end; and the chunks' bytes.
func imageNetOutput(b *testing.B, id string, shards, chunksPerShard, perChunk int) ([]fixture.OutputMsg, int64) {
	img := make([]byte, perChunk*224*224*3)
	lab := make([]byte, perChunk*8)
	var msgs []fixture.OutputMsg
	var bytes int64
	for s := range shards {
		for c := range chunksPerShard {
			keys := make([]string, perChunk)
			for k := range keys {
				keys[k] = fixture.SampleKey(s, c, k)
			}
			kj, _ := json.Marshal(keys)
			data, err := safetensors.Encode([]safetensors.Tensor{
				{Name: "image", DType: safetensors.U8, Shape: []int{perChunk, 224, 224, 3}, Data: img},
				{Name: "label", DType: safetensors.I64, Shape: []int{perChunk}, Data: lab},
			}, map[string]string{wire.MetaKeys: string(kj), wire.MetaChunk: strconv.Itoa(c)})
			if err != nil {
				b.Fatal(err)
			}
			bytes += int64(len(data))
			msgs = append(msgs, fixture.OutputMsg{Ref: wire.ChunkRef{Job: id, Shard: s, Chunk: c}, Data: data})
		}
		end, _ := json.Marshal(wire.ShardEnd{Job: id, Shard: s, Chunks: chunksPerShard})
		msgs = append(msgs, fixture.OutputMsg{Ref: wire.ChunkRef{Job: id, Shard: s, Chunk: -1}, Data: end})
	}
	return msgs, bytes
}

// BenchmarkAssembleAndWrite is the agent's work per byte from a chunk
// that arrived to a batch written to the trainer's connection: the chunks
// split into rows, batches of 256 cut and each written as a safetensors
// file, to a loopback TCP connection whose other end discards (or to
// io.Discard: the agent's own work alone). "runs" writes a batch from the
// chunks' own bytes, as the agent does; "copy" copies its rows into one
// buffer per tensor first, as it did before (stack).
func BenchmarkAssembleAndWrite(b *testing.B) {
	const shards, chunksPerShard, perChunk, batch = 2, 8, 26, 256
	job := fixture.Job("aw", 1, batch, make(fixture.Layout, shards))
	msgs, size := imageNetOutput(b, "aw", shards, chunksPerShard, perChunk)
	meta := map[string]string{wire.MetaBatchJob: "aw"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	for _, bc := range []struct {
		name string
		to   io.Writer
	}{{"copy/tcp", conn}, {"runs/tcp", conn}, {"copy/discard", io.Discard}, {"runs/discard", io.Discard}} {
		mode := strings.Split(bc.name, "/")[0]
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				a := assembly.NewAssembler(job)
				for _, m := range msgs {
					out, err := fixture.ApplySent(a, m, true)
					if err != nil {
						b.Fatal(err)
					}
					for _, rb := range out.Batches {
						a.HandOut(rb)
						bt := rb.Batch
						if mode == "copy" {
							bt.Materialize()
						}
						head, _, err := bt.Header(meta)
						if err == nil {
							err = bt.WriteFile(bc.to, head)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				if !a.AllFinished() {
					b.Fatal("not every row handed out")
				}
			}
		})
	}
}
