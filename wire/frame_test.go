package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestFramesRoundTrip(t *testing.T) {
	var b bytes.Buffer
	// Heartbeats between and around the chunks are passed over.
	for i, p := range [][]byte{[]byte("chunk0"), []byte("chunk1")} {
		if err := WriteFrame(&b, FrameHeartbeat, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := WriteFrame(&b, FrameChunk, i, p); err != nil {
			t.Fatal(err)
		}
	}
	WriteFrame(&b, FrameHeartbeat, 0, nil)
	if err := WriteFrame(&b, FrameEnd, 0, []byte(`{"chunks":2}`)); err != nil {
		t.Fatal(err)
	}
	fr := NewFrameReader(&b, 64<<10)
	var got []string
	for {
		f, err := fr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f.Kind.String()+":"+string(f.Data)+":"+string(rune('0'+f.Chunk)))
	}
	want := []string{"chunk:chunk0:0", "chunk:chunk1:1", `shard end:{"chunks":2}:0`}
	if len(got) != len(want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frame %d: %q, want %q", i, got[i], want[i])
		}
	}
}

func TestFrameReaderRefuses(t *testing.T) {
	cases := map[string]func(*bytes.Buffer){
		"unknown kind": func(b *bytes.Buffer) { WriteFrame(b, 'Z', 0, nil) },
		"chunk over its bound": func(b *bytes.Buffer) {
			WriteFrame(b, FrameChunk, 0, make([]byte, ChunkFrameMax(64<<10)+1))
		},
		"end over its bound":       func(b *bytes.Buffer) { WriteFrame(b, FrameEnd, 0, make([]byte, MaxEndFrameBytes+1)) },
		"heartbeat with a payload": func(b *bytes.Buffer) { WriteFrame(b, FrameHeartbeat, 0, []byte("x")) },
	}
	for name, write := range cases {
		var b bytes.Buffer
		write(&b)
		if _, err := NewFrameReader(&b, 64<<10).Next(); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: %v, want ErrFrame", name, err)
		}
	}
	var b bytes.Buffer
	WriteFrame(&b, FrameChunk, 0, []byte("abcdef"))
	cut := b.Bytes()[:b.Len()-2]
	if _, err := NewFrameReader(bytes.NewReader(cut), 64<<10).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := NewFrameReader(bytes.NewReader(nil), 64<<10).Next(); !errors.Is(err, io.EOF) {
		t.Errorf("empty body: %v, want io.EOF", err)
	}
}
