package server

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

// kinds is the frame kinds of a raw stream, heartbeats included.
func kinds(t *testing.T, b []byte) string {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		if len(b) < wire.FrameHeaderLen {
			t.Fatalf("cut frame header: %q", b)
		}
		n := int(binary.BigEndian.Uint32(b[5:9]))
		out = append(out, b[0])
		b = b[wire.FrameHeaderLen+n:]
	}
	return string(out)
}

// TestSinkKeepsASilentShardAlive: while a shard has nothing to send, the
// sink sends a heartbeat each interval (the first one starting the 200);
// frames reset the interval, and none goes out after stop.
func TestSinkKeepsASilentShardAlive(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &responseSink{w: rec, rc: http.NewResponseController(rec)}
	const every = 20 * time.Millisecond
	stop := s.keepAlive(every)
	heartbeats := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return bytes.Count([]byte(kinds(t, rec.Body.Bytes())), []byte("H"))
	}
	for deadline := time.Now().Add(10 * time.Second); heartbeats() < 2; time.Sleep(every / 4) {
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeats after 10s, want 2", heartbeats())
		}
	}
	if err := s.WriteFrame(wire.FrameChunk, 0, []byte("rows")); err != nil {
		t.Fatal(err)
	}
	stop()
	got := kinds(t, rec.Body.Bytes())
	time.Sleep(2 * every)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != wire.ShardStreamMediaType {
		t.Errorf("status %d, type %q: want a shard stream", rec.Code, rec.Header().Get("Content-Type"))
	}
	if n := len(got); n < 3 || got[n-1] != 'C' || strings.Trim(got[:n-1], "H") != "" {
		t.Errorf("frames %q, want heartbeats then the chunk", got)
	}
	if after := kinds(t, rec.Body.Bytes()); after != got {
		t.Errorf("frames %q after stop, were %q", after, got)
	}
}

// TestSinkSendsNoHeartbeatToAFastShard: a shard done within the interval
// gets none, and a failure before any frame can still be a status.
func TestSinkSendsNoHeartbeatToAFastShard(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &responseSink{w: rec, rc: http.NewResponseController(rec)}
	stop := s.keepAlive(time.Minute)
	stop()
	if s.started || !bytes.Equal(rec.Body.Bytes(), nil) {
		t.Errorf("started %v, body %q: want nothing sent", s.started, rec.Body.Bytes())
	}
}
