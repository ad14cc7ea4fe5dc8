package server

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/wire"
)

// A replay task's messages need their own dedupe ids, or the output
// stream drops them as copies of the first run's; everything else stays.
func TestOutputHeaderOfAReplay(t *testing.T) {
	ref := wire.ChunkRef{Job: "j", Epoch: 1, Shard: 2, Chunk: 3}
	if got := outputHeader(ref, wire.ShardTask{}).Get(nats.MsgIdHdr); got != ref.MsgID() {
		t.Errorf("first run: Nats-Msg-Id %q, want %q", got, ref.MsgID())
	}
	h := outputHeader(ref, wire.ShardTask{Replay: "trainer-x1"})
	if got, want := h.Get(nats.MsgIdHdr), ref.MsgID()+".rtrainer-x1"; got != want {
		t.Errorf("replay: Nats-Msg-Id %q, want %q", got, want)
	}
	back, err := wire.ParseChunkRef("j", h)
	if err != nil || back != ref {
		t.Errorf("replay headers parse to %+v, %v; want %+v", back, err, ref)
	}
}
