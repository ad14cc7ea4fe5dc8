package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/embedded"
	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/streams"
	"github.com/sluice-project/sluice/wire"
)

// BenchmarkAgentMBChunks pushes ImageNet-size samples in chunks of about
// 3 MiB through the agent, from a function replica on loopback that
// answers each task with ready-made frames: the agent's own cost of
// receiving, batching and handing out.
func BenchmarkAgentMBChunks(b *testing.B) {
	const (
		shards, chunksPerShard, perChunk = 4, 5, 20
		side                             = 224
	)
	srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, js := benchConnect(b, srv.URL())
	defer nc.Close()
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		b.Fatal(err)
	}

	img := make([]byte, perChunk*side*side*3)
	lab := make([]byte, perChunk*8)
	l := make(layout, shards)
	for s := range l {
		l[s] = make([]int, chunksPerShard)
	}
	ctx := context.Background()
	var bytes int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer() // preprocessing is the functions' work, not the agent's
		id := fmt.Sprintf("bench-%d", i)
		job := testJob(id, 1, 32, l)
		var msgs []outputMsg
		for s := range shards {
			for c := range chunksPerShard {
				keys := make([]string, perChunk)
				for k := range keys {
					keys[k] = sampleKey(s, c, k)
				}
				kj, _ := json.Marshal(keys)
				data, err := safetensors.Encode([]safetensors.Tensor{
					{Name: "image", DType: safetensors.U8, Shape: []int{perChunk, side, side, 3}, Data: img},
					{Name: "label", DType: safetensors.I64, Shape: []int{perChunk}, Data: lab},
				}, map[string]string{wire.MetaKeys: string(kj), wire.MetaChunk: strconv.Itoa(c)})
				if err != nil {
					b.Fatal(err)
				}
				bytes += int64(len(data))
				msgs = append(msgs, outputMsg{wire.ChunkRef{Job: id, Shard: s, Chunk: c}, data})
			}
			end, _ := json.Marshal(wire.ShardEnd{Job: id, Shard: s, Chunks: chunksPerShard})
			msgs = append(msgs, outputMsg{wire.ChunkRef{Job: id, Shard: s, Chunk: -1}, end})
		}
		env{nc, js}.submit(b, job, newFunctionOf(b, job, msgs), 2)
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
	srv, err := embedded.StartNATS(embedded.NATSOptions{StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	nc, js := benchConnect(b, srv.URL())
	defer nc.Close()
	if err := streams.Ensure(context.Background(), js, streams.Options{}); err != nil {
		b.Fatal(err)
	}
	chunks := make([]int, 100)
	for i := range chunks {
		chunks[i] = 10
	}
	l := layout{chunks} // 1000 samples
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		job := testJob(fmt.Sprintf("pos-%d", i), 1, 1, l)
		env{nc, js}.submit(b, job, newFunction(b, job, l), 2)
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
