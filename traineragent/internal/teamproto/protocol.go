package teamproto

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// The team protocol: JSON requests from a member agent to its reader's
// planner on wire.TeamSubject(job, reader, op), each answered with a
// wire.TeamReply, both in the envelope of teamauth.go (who sent it, the
// session, a sequence number, a MAC under the job's team key).
const (
	PartWait  = 5 * time.Second // the longest a part request waits
	teamRetry = 250 * time.Millisecond
)

// Outcomes of a team request (wire.TeamReply.Status).
const (
	StatusOK        = "ok"
	StatusWait      = "wait"       // no part yet: ask again
	statusEOF       = "eof"        // the rank got every step
	StatusMismatch  = "mismatch"   // ErrWorldMismatch
	StatusNotMember = "not_member" // the asking agent has not joined this planner run (or its session is not the member's)
	StatusTaken     = "name_taken" // a join under the name of a member that is still heard from
	StatusBusy      = "busy"       // the member has too many requests in progress: ask again
	StatusBadState  = "bad_state"
	statusConflict  = "conflict"
	statusEnded     = "ended" // readerstate.ErrJobEnded
	StatusStopped   = "stopped"
)

// Bounds on what a member may ask of the planner: requests in progress per
// member (two per rank: its long poll and its resume, plus notes and
// status), joins in progress, and a request's body (the chunks and rows a
// member may hold at the planner are the team state's: readerstate.MaxMemberRows).
const (
	MaxMemberRequests = 8 // and 2 per rank
	MaxJoins          = 4
	MaxTeamRequest    = 1 << 20 // bytes of a request body
)

// NoteFirstRow is a note's first shard row, -1 when it does not say.
func NoteFirstRow(n wire.TeamNote) int {
	if n.First == nil || *n.First < 0 {
		return -1
	}
	return *n.First
}

// NoteOf is schema sc as a note tells it (nil: none).
func NoteOf(sc *assembly.Schema) *wire.TeamSchema {
	if sc == nil {
		return nil
	}
	n := &wire.TeamSchema{Names: sc.Names, DTypes: make([]string, len(sc.Dtypes)), Shapes: sc.Shapes}
	for i, d := range sc.Dtypes {
		n.DTypes[i] = string(d)
	}
	return n
}

// maxNoteTensors and maxNoteDims bound a schema note.
const (
	maxNoteTensors = 64
	maxNoteDims    = 8
)

// SchemaOf is the schema a note gives, checked.
func SchemaOf(n *wire.TeamSchema) (*assembly.Schema, error) {
	if n == nil || len(n.Names) == 0 || len(n.DTypes) != len(n.Names) || len(n.Shapes) != len(n.Names) {
		return nil, errors.New("a chunk's schema needs a dtype and a shape per tensor")
	}
	if len(n.Names) > maxNoteTensors {
		return nil, fmt.Errorf("a chunk's schema has %d tensors: want at most %d", len(n.Names), maxNoteTensors)
	}
	for i, sh := range n.Shapes { // a row's shape
		if len(sh) > maxNoteDims {
			return nil, fmt.Errorf("tensor %.64q has %d dimensions a row: want at most %d", n.Names[i], len(sh), maxNoteDims)
		}
		if safetensors.DType(n.DTypes[i]).Bytes(sh) < 0 {
			return nil, fmt.Errorf("tensor %.64q: dtype %.16q, shape %v: not a tensor this agent can stack", n.Names[i], n.DTypes[i], sh)
		}
	}
	dtypes := make([]safetensors.DType, len(n.DTypes))
	for i, d := range n.DTypes {
		dtypes[i] = safetensors.DType(d)
	}
	return &assembly.Schema{Names: n.Names, Dtypes: dtypes, Shapes: n.Shapes}, nil
}

// RowBound is how many rows a chunk of schema sc can have within the
// job's chunk size limit: each row takes its tensors' bytes and at least 3
// bytes of its key in the chunk's metadata.
func RowBound(sc *assembly.Schema, chunkMax int) int {
	row := 3
	for i, d := range sc.Dtypes {
		row += max(d.Bytes(sc.Shapes[i]), 0)
	}
	return min(chunkMax/row, assembly.MaxRowsPerChunk)
}

// NotMember is the reply to a request of an agent that has not joined.
func NotMember(name string) wire.TeamReply {
	return wire.TeamReply{Status: StatusNotMember, Error: fmt.Sprintf("agent %.64q has not joined (or this is not its session)", name)}
}

// StatusOf is the team status of a reader's error.
func StatusOf(err error) string {
	switch {
	case errors.Is(err, io.EOF):
		return statusEOF
	case errors.Is(err, readerstate.ErrJobEnded):
		return statusEnded
	case errors.Is(err, readerstate.ErrWorldMismatch):
		return StatusMismatch
	case errors.Is(err, readerstate.ErrBadState):
		return StatusBadState
	case errors.Is(err, readerstate.ErrResumeConflict):
		return statusConflict
	}
	return StatusStopped
}

// ErrOf is the reader's error of a team status, for the member's caller.
func errOf(status, msg string) error {
	switch status {
	case statusEOF:
		return io.EOF
	case statusEnded:
		return fmt.Errorf("%w: %s", readerstate.ErrJobEnded, msg)
	case StatusMismatch:
		return fmt.Errorf("%w: the reader's planner says: %s", readerstate.ErrWorldMismatch, msg)
	case StatusBadState:
		return fmt.Errorf("%w: the reader's planner says: %s", readerstate.ErrBadState, msg)
	case statusConflict:
		return fmt.Errorf("%w: the reader's planner says: %s", readerstate.ErrResumeConflict, msg)
	}
	return fmt.Errorf("%w: the reader's planner says: %s", readerstate.ErrStopped, msg)
}
