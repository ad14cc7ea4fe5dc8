package traineragent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/internal/streams"
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

// chunkBytes encodes a chunk as a function would.
func chunkBytes(t testing.TB, job string, epoch, shard, chunk int, keys []string) []byte {
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
	b, err := safetensors.Encode([]safetensors.Tensor{
		{Name: "image", DType: safetensors.U8, Shape: []int{n, 2, 2, 3}, Data: img},
		{Name: "label", DType: safetensors.I64, Shape: []int{n}, Data: lab},
	}, map[string]string{
		wire.MetaJob: job, wire.MetaEpoch: strconv.Itoa(epoch), wire.MetaShard: strconv.Itoa(shard),
		wire.MetaChunk: strconv.Itoa(chunk), wire.MetaKeys: string(kj),
	})
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
				total += n
				ref := wire.ChunkRef{Job: job.Spec.ID, Epoch: e, Shard: s, Chunk: c}
				out = append(out, outputMsg{ref, chunkBytes(t, job.Spec.ID, e, s, c, keys)})
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

// natsMsg builds the message; a non-empty msgID overrides the dedupe id, to
// simulate a re-publication past the stream's duplicate window.
func (m outputMsg) natsMsg(msgID string) *nats.Msg {
	h := m.ref.Header()
	if msgID != "" {
		h.Set(nats.MsgIdHdr, msgID)
	}
	return &nats.Msg{Subject: wire.OutputSubject(m.ref.Job), Header: h, Data: m.data}
}

// checkBatch verifies a batch's tensors against its keys and epoch.
func checkBatch(t testing.TB, b Batch) {
	t.Helper()
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

// createOutput creates job's output stream and a consumer per declared
// reader, through internal/streams as broker.Submit does: chunks published
// before would not be kept (interest retention).
func createOutput(t testing.TB, nc *nats.Conn, js jetstream.JetStream, job wire.Job) {
	t.Helper()
	ctx := context.Background()
	spec := job.Spec.WithDefaults(nc.MaxPayload())
	cfg, err := streams.Output(spec, nc.MaxPayload(), streams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, r := range spec.Readers {
		if _, err := js.CreateConsumer(ctx, cfg.Name, streams.Reader(spec.ID, r)); err != nil {
			t.Fatal(err)
		}
	}
}
