package wire

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Output messages on OutputSubject(job) are either a chunk (a safetensors
// file holding some of a shard's samples) or a shard end (JSON ShardEnd,
// saying how many chunks the shard produced). Both carry these headers and a
// Nats-Msg-Id derived from (job, epoch, shard, chunk), so a redelivered
// shard's re-publication is dropped by the stream's duplicate window and,
// past it, by the trainer agent.
const (
	HeaderKind  = "Sluice-Kind"
	HeaderEpoch = "Sluice-Epoch"
	HeaderShard = "Sluice-Shard"
	HeaderChunk = "Sluice-Chunk"

	KindChunk    = "chunk"
	KindShardEnd = "shard-end"
)

// Safetensors metadata keys of a chunk (all values are strings, as the format requires).
const (
	MetaJob   = "job"
	MetaEpoch = "epoch"
	MetaShard = "shard"
	MetaChunk = "chunk"
	MetaKeys  = "keys" // JSON array of sample keys, in tensor row order
)

// ShardEnd closes a shard's output for one epoch.
type ShardEnd struct {
	Job     string         `json:"job"`
	Epoch   int            `json:"epoch"`
	Shard   int            `json:"shard"`
	Chunks  int            `json:"chunks"`
	Samples int            `json:"samples"`
	Failed  []FailedSample `json:"failed,omitempty"`
}

// ChunkRef identifies one output message.
type ChunkRef struct {
	Job   string
	Epoch int
	Shard int
	Chunk int // -1 for the shard end
}

// MsgID is the JetStream dedupe id of the message.
func (r ChunkRef) MsgID() string {
	if r.Chunk < 0 {
		return fmt.Sprintf("%s.e%d.s%d.end", r.Job, r.Epoch, r.Shard)
	}
	return fmt.Sprintf("%s.e%d.s%d.c%d", r.Job, r.Epoch, r.Shard, r.Chunk)
}

// Header builds the headers of the message r names.
func (r ChunkRef) Header() nats.Header {
	h := nats.Header{}
	kind := KindChunk
	if r.Chunk < 0 {
		kind = KindShardEnd
	}
	h.Set(HeaderKind, kind)
	h.Set(HeaderEpoch, strconv.Itoa(r.Epoch))
	h.Set(HeaderShard, strconv.Itoa(r.Shard))
	h.Set(HeaderChunk, strconv.Itoa(r.Chunk))
	h.Set(nats.MsgIdHdr, r.MsgID())
	return h
}

// ParseChunkRef reads the headers of an output message of job.
func ParseChunkRef(job string, h nats.Header) (ChunkRef, error) {
	r := ChunkRef{Job: job}
	var err error
	if r.Epoch, err = strconv.Atoi(h.Get(HeaderEpoch)); err != nil {
		return r, fmt.Errorf("output header %s: %w", HeaderEpoch, err)
	}
	if r.Shard, err = strconv.Atoi(h.Get(HeaderShard)); err != nil {
		return r, fmt.Errorf("output header %s: %w", HeaderShard, err)
	}
	if r.Chunk, err = strconv.Atoi(h.Get(HeaderChunk)); err != nil {
		return r, fmt.Errorf("output header %s: %w", HeaderChunk, err)
	}
	switch k := h.Get(HeaderKind); {
	case k == KindShardEnd && r.Chunk == -1, k == KindChunk && r.Chunk >= 0:
	default:
		return r, fmt.Errorf("output header %s=%q with chunk %d: inconsistent", HeaderKind, k, r.Chunk)
	}
	return r, nil
}
