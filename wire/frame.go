package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// A function answers a shard task with its output in the HTTP response
// body: 200 with Content-Type ShardStreamMediaType, then a stream of
// frames, each written and flushed as soon as it is ready so that a caller
// can hand out samples before the shard is finished:
//
//	frame  = kind (1 byte) | chunk index (uint32, big endian) | length (uint32, big endian) | payload
//	kind   'C' chunk: payload is a safetensors file holding some of the
//	           shard's samples (tensors stacked by row, metadata MetaJob,
//	           MetaEpoch, MetaShard, MetaChunk, MetaFirst and MetaKeys);
//	           chunks come in index order from 0, each at most
//	           ChunkFrameMax(task) bytes.
//	       'E' shard end: payload is a JSON ShardEnd; the last frame of a
//	           complete shard. Only the end makes the shard complete.
//	       'X' error: payload is a JSON ShardError; the last frame of a
//	           shard that failed after the 200 was sent.
//	       'H' heartbeat: no payload; a function sends one whenever it sent
//	           nothing for ShardHeartbeatInterval (a long download, a slow
//	           chunk), so that a caller can take a silent replica for lost
//	           after a few intervals rather than wait for a whole shard.
//
// The chunk index is 0 in end, error and heartbeat frames. A body that stops before
// an end or error frame (a killed replica, a cut connection) means "shard
// incomplete": the caller sends the task again, and because functions are
// deterministic (per-sample seeds, chunk boundaries that depend only on
// the samples) the rows it already holds come again. A caller places rows
// by their shard row (MetaFirst), not by chunk index: another function
// version may cut the same rows into other chunks. Failures found before
// the first frame are plain HTTP statuses (see functions/server).
const ShardStreamMediaType = "application/vnd.sluice.shard-stream.v1"

// HeaderTaskRejected ("true") marks a function's 4xx that rejects the task
// itself (malformed, no such shard, too large, not a CloudEvent). An agent
// gives a task up at once only on a reply so marked: the address of a
// replica that died may be taken by another process, whose 404 says
// nothing about the shard.
const HeaderTaskRejected = "Sluice-Task-Rejected"

// FrameKind is the first byte of a frame.
type FrameKind byte

// Frame kinds.
const (
	FrameChunk     FrameKind = 'C'
	FrameEnd       FrameKind = 'E'
	FrameError     FrameKind = 'X'
	FrameHeartbeat FrameKind = 'H'
)

// ShardHeartbeatInterval is the longest a function stays silent in a
// shard's stream: after it, it sends a heartbeat frame.
const ShardHeartbeatInterval = 5 * time.Second

func (k FrameKind) String() string {
	switch k {
	case FrameChunk:
		return "chunk"
	case FrameEnd:
		return "shard end"
	case FrameError:
		return "error"
	case FrameHeartbeat:
		return "heartbeat"
	}
	return fmt.Sprintf("frame kind 0x%02x", byte(k))
}

// FrameHeaderLen is the size of a frame's header.
const FrameHeaderLen = 9

// Bounds on frame payloads: a reader refuses a longer frame before reading
// it, so a broken or hostile function cannot make it allocate more.
const (
	// ChunkHeadroom is what a chunk frame may carry beyond the task's
	// ChunkMaxBytes: the safetensors header with its sample keys.
	ChunkHeadroom = 1 << 20
	// MaxEndFrameBytes bounds a shard end (its failed samples are capped
	// at MaxFailedListed, each reason at MaxReasonBytes).
	MaxEndFrameBytes = 1 << 20
	// MaxErrorFrameBytes bounds an error frame.
	MaxErrorFrameBytes = 64 << 10
)

// ChunkFrameMax is the largest chunk frame a task's function may send.
func ChunkFrameMax(chunkMaxBytes int) int { return chunkMaxBytes + ChunkHeadroom }

// ShardError is the payload of an error frame: why a shard could not be
// finished after its output had started.
type ShardError struct {
	// Permanent says that retrying cannot help (the task itself is wrong).
	Permanent bool   `json:"permanent,omitempty"`
	Message   string `json:"message"`
}

// Frame is one decoded frame; Data is the caller's to keep (a chunk's
// samples are handed out from it).
type Frame struct {
	Kind  FrameKind
	Chunk int
	Data  []byte
}

// WriteFrame writes one frame to w.
func WriteFrame(w io.Writer, kind FrameKind, chunk int, payload []byte) error {
	if chunk < 0 || uint64(chunk) > 0xffffffff || uint64(len(payload)) > 0xffffffff {
		return fmt.Errorf("writing %s frame: chunk %d, %d bytes: out of range", kind, chunk, len(payload))
	}
	var h [FrameHeaderLen]byte
	h[0] = byte(kind)
	binary.BigEndian.PutUint32(h[1:5], uint32(chunk))
	binary.BigEndian.PutUint32(h[5:9], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return fmt.Errorf("writing %s frame: %w", kind, err)
	}
	if _, err := w.Write(payload); err != nil {
		return fmt.Errorf("writing %s frame: %w", kind, err)
	}
	return nil
}

// ErrFrame marks a frame stream that breaks the format (unknown kind, a
// frame over its bound): the function, not the connection, is at fault.
var ErrFrame = errors.New("malformed frame stream")

// FrameReader reads the frames of one shard's response.
type FrameReader struct {
	r        *bufio.Reader
	maxChunk int
}

// NewFrameReader reads frames from r, refusing chunk frames over
// ChunkFrameMax(chunkMaxBytes).
func NewFrameReader(r io.Reader, chunkMaxBytes int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 64<<10), maxChunk: ChunkFrameMax(chunkMaxBytes)}
}

// Next returns the next frame, passing over heartbeats. At a clean end of
// the body (no byte of a next frame) it returns io.EOF, in a cut frame
// io.ErrUnexpectedEOF, and an error wrapping ErrFrame for a frame that
// breaks the format.
func (fr *FrameReader) Next() (Frame, error) {
	for {
		f, err := fr.next()
		if err != nil || f.Kind != FrameHeartbeat {
			return f, err
		}
	}
}

func (fr *FrameReader) next() (Frame, error) {
	var h [FrameHeaderLen]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Kind: FrameKind(h[0]), Chunk: int(binary.BigEndian.Uint32(h[1:5]))}
	n := int64(binary.BigEndian.Uint32(h[5:9]))
	var limit int64
	switch f.Kind {
	case FrameHeartbeat:
		limit = 0
	case FrameChunk:
		limit = int64(fr.maxChunk)
	case FrameEnd:
		limit = MaxEndFrameBytes
	case FrameError:
		limit = MaxErrorFrameBytes
	default:
		return Frame{}, fmt.Errorf("%w: unknown %s", ErrFrame, f.Kind)
	}
	if n > limit {
		return Frame{}, fmt.Errorf("%w: %s frame of %d bytes, over its bound of %d", ErrFrame, f.Kind, n, limit)
	}
	// A buffer per frame: the receiver keeps chunks, and copying each
	// into a buffer of its own would cost more than allocating.
	f.Data = make([]byte, n)
	if _, err := io.ReadFull(fr.r, f.Data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}
