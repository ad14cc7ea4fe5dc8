package jobspec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/wire"
)

// ErrInvalid means a job spec has problems; the error is a *Error
// listing all of them.
var ErrInvalid = errors.New("invalid job spec")

// Problem is one thing wrong with a job spec.
type Problem struct {
	// Line is the 1-based line in the spec file; 0 when the spec did not
	// come from a file or the key is not in it.
	Line int `json:"line,omitempty"`
	// Field is the JSON (and YAML) key, as in wire.JobSpec; empty for a
	// problem of the document as a whole.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`

	// docLine is a pipeline problem's line in the pipeline document, and
	// bare its message without it, for a spec file to place it in.
	docLine int
	bare    string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error lists every problem of a job spec, found before anything is
// created. It matches ErrInvalid.
type Error struct {
	Job      string
	Problems []Problem
}

func (e *Error) Error() string {
	name := ""
	if e.Job != "" {
		name = fmt.Sprintf(" %q", e.Job)
	}
	if len(e.Problems) == 1 {
		return fmt.Sprintf("invalid job spec%s: %s", name, e.Problems[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "invalid job spec%s (%d problems):", name, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Check returns every problem of spec as one *Error, or nil:
// the fields' ranges (wire.JobSpec.Problems) and the pipeline, which must
// be a built-in name or a pipeline spec document that builds. It checks
// spec as given: apply WithDefaults first.
func Check(spec wire.JobSpec) error {
	if ps := specProblems(spec); len(ps) > 0 {
		return &Error{Job: spec.ID, Problems: ps}
	}
	return nil
}

func specProblems(spec wire.JobSpec) []Problem {
	var ps []Problem
	for _, p := range spec.Problems() {
		ps = append(ps, Problem{Field: p.Field, Message: p.Message})
	}
	if strings.TrimSpace(spec.Pipeline) != "" {
		for _, p := range pipelineProblems(spec.Pipeline) {
			sp := Problem{Field: "pipeline", Message: p.Msg, docLine: p.Line, bare: p.Msg}
			if p.Line > 0 {
				sp.Message = fmt.Sprintf("line %d: %s", p.Line, p.Msg)
			}
			ps = append(ps, sp)
		}
		if len(ps) == 0 {
			ps = append(ps, packProblems(spec)...)
		}
	}
	for i, src := range spec.Sources {
		if strings.TrimSpace(src.Pipeline) == "" {
			continue
		}
		for _, p := range pipelineProblems(src.Pipeline) {
			msg := p.Msg
			if p.Line > 0 {
				msg = fmt.Sprintf("line %d of its document: %s", p.Line, p.Msg)
			}
			ps = append(ps, Problem{Field: fmt.Sprintf("sources[%d].pipeline", i), Message: msg})
		}
	}
	return ps
}

// rowHeaderBytes is room enough for a packed row's chunk header (its key,
// the tensors' names and shapes, the metadata); the replica checks the
// exact size and refuses the task when the row does not fit.
const rowHeaderBytes = 4 << 10

// packProblems: a packing pipeline's rows must each fit a chunk.
func packProblems(spec wire.JobSpec) []Problem {
	p, err := pipeline.Lookup(spec.Pipeline, pipeline.CheckOnly())
	if err != nil || spec.ChunkMaxBytes == 0 {
		return nil
	}
	po, ok := pipeline.PackingOf(p)
	if need := po.RowBytes() + rowHeaderBytes; ok && need > spec.ChunkMaxBytes {
		return []Problem{{Field: "chunk_max_bytes", Message: fmt.Sprintf("%d: a packed row of seq_len %d takes %d bytes; want at least %d (or a shorter seq_len)",
			spec.ChunkMaxBytes, po.SeqLen, po.RowBytes(), need)}}
	}
	return nil
}

// pipelineProblems checks the pipeline a job names as a replica will
// build it, but reads no file it names (a vocab file is the replicas'),
// and lists what is wrong with it, each with its line in the document
// (0 for a name). An unknown name's problem lists the built-in pipelines.
func pipelineProblems(nameOrDoc string) []pipeline.Problem {
	err := pipeline.Check(nameOrDoc)
	if err == nil {
		return nil
	}
	var ve *pipeline.ValidationError
	if !errors.As(err, &ve) {
		return []pipeline.Problem{{Op: -1, Msg: err.Error()}}
	}
	out := make([]pipeline.Problem, len(ve.Problems))
	for i, p := range ve.Problems {
		line := p.Line
		p.Line = 0 // String without the line: the caller places it
		out[i] = pipeline.Problem{Line: line, Op: -1, Msg: p.String()}
	}
	return out
}
