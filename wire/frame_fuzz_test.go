package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzFrameReader reads arbitrary bytes as a shard's frame stream: no
// panic, no frame over its bound, every frame read is the bytes it came
// from, and the stream ends in io.EOF only where the last frame ended.
func FuzzFrameReader(f *testing.F) {
	var b bytes.Buffer
	_ = WriteFrame(&b, FrameChunk, 0, []byte("chunk0"))
	_ = WriteFrame(&b, FrameChunk, 1, []byte("chunk1"))
	_ = WriteFrame(&b, FrameEnd, 0, []byte(`{"job":"j","chunks":2,"samples":4}`))
	f.Add(b.Bytes(), uint8(0))
	f.Add(b.Bytes()[:b.Len()-3], uint8(0))
	b.Reset()
	_ = WriteFrame(&b, FrameError, 0, []byte(`{"permanent":true,"message":"no such shard"}`))
	f.Add(b.Bytes(), uint8(1))
	f.Add([]byte{'C', 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, uint8(0))
	f.Add([]byte{'Z', 0, 0, 0, 0, 0, 0, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, small uint8) {
		chunkMax := 64 << 10
		if small%2 == 1 {
			chunkMax = 0 // a chunk frame of at most ChunkHeadroom
		}
		fr := NewFrameReader(bytes.NewReader(data), chunkMax)
		var again bytes.Buffer
		for {
			fr0, err := fr.Next()
			switch {
			case errors.Is(err, io.EOF):
				if !bytes.Equal(again.Bytes(), data) {
					t.Fatalf("clean end after %d of %d bytes", again.Len(), len(data))
				}
				return
			case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrFrame):
				if !bytes.HasPrefix(data, again.Bytes()) {
					t.Fatalf("frames read are not the stream's prefix")
				}
				return
			case err != nil:
				t.Fatalf("error neither EOF nor ErrFrame: %v", err)
			}
			var limit int
			switch fr0.Kind {
			case FrameChunk:
				limit = ChunkFrameMax(chunkMax)
			case FrameEnd:
				limit = MaxEndFrameBytes
			case FrameError:
				limit = MaxErrorFrameBytes
			default:
				t.Fatalf("frame of kind %s returned", fr0.Kind)
			}
			if len(fr0.Data) > limit {
				t.Fatalf("%s frame of %d bytes, over %d", fr0.Kind, len(fr0.Data), limit)
			}
			if err := WriteFrame(&again, fr0.Kind, fr0.Chunk, fr0.Data); err != nil {
				t.Fatalf("writing back: %v", err)
			}
			if !bytes.HasPrefix(data, again.Bytes()) {
				t.Fatalf("frame %s %d read back differs from its bytes", fr0.Kind, fr0.Chunk)
			}
		}
	})
}
