package dispatch

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluice-project/sluice/wire"
)

// FuzzReadShard reads arbitrary bytes as a shard's reply: no panic; a
// shard end only after every chunk from 0 in order, naming the task and
// their count; any other outcome a classified send error.
func FuzzReadShard(f *testing.F) {
	task := wire.ShardTask{Job: "j", Epoch: 1, Shard: 2, ChunkMaxBytes: 64 << 10}
	var b bytes.Buffer
	_ = wire.WriteFrame(&b, wire.FrameChunk, 0, []byte("chunk0"))
	_ = wire.WriteFrame(&b, wire.FrameChunk, 1, []byte("chunk1"))
	_ = wire.WriteFrame(&b, wire.FrameEnd, 0, []byte(`{"job":"j","epoch":1,"shard":2,"chunks":2,"samples":4}`))
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:b.Len()-5])
	b.Reset()
	_ = wire.WriteFrame(&b, wire.FrameChunk, 1, []byte("chunk1"))
	f.Add(b.Bytes())
	b.Reset()
	_ = wire.WriteFrame(&b, wire.FrameError, 0, []byte(`{"permanent":true,"message":"gone"}`))
	f.Add(b.Bytes())
	b.Reset()
	_ = wire.WriteFrame(&b, wire.FrameEnd, 0, []byte(`{"job":"j","epoch":1,"shard":2,"chunks":-1}`))
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		next := 0
		chunk := func(i int, _ []byte) error {
			if i != next {
				t.Fatalf("chunk %d handed over, want %d", i, next)
			}
			next++
			return nil
		}
		end, err := readShard(bytes.NewReader(data), "fuzz", task, chunk, func() error { return nil }, func(err error) error { return err })
		if err != nil {
			var se *sendError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a send error", err)
			}
			return
		}
		if end.Job != task.Job || end.Epoch != task.Epoch || end.Shard != task.Shard || end.Chunks != next {
			t.Fatalf("end %+v after %d chunks of %s", end, next, task.ID())
		}
	})
}
