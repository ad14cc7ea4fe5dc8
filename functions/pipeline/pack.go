package pipeline

import (
	"encoding/binary"
	"fmt"

	"github.com/sluice-project/sluice/format/safetensors"
)

// Packing for causal LM training: a shard's documents, each one's ids
// followed by EOS, concatenated in shard order and cut into rows of
// SeqLen tokens. A row is many documents (and a document may span rows),
// so packing is a stage over a whole shard: Packer is its state, fed one
// document at a time by whoever reads the shard (the server), and holds at
// most one open row.

// Tail says what becomes of a shard's last, partial row.
const (
	TailPad  = "pad"  // padded to SeqLen with PadID; attention_mask 0 there
	TailDrop = "drop" // dropped, its tokens counted in PackStats.Dropped
)

// MaxSeqLen bounds a packed row's length.
const MaxSeqLen = 1 << 18

// PackOptions configure a Packer.
type PackOptions struct {
	SeqLen int
	Tail   string // TailPad or TailDrop
	// EOS follows every document, unless the document already ends with
	// it (a post-processor that adds EOS).
	EOS   int32
	PadID int32
}

// The packed row's fields, in this order. Every row has the same
// shapes, so rows stack into batches.
const (
	FieldInputIDs    = "input_ids"      // I32 [seq_len]
	FieldPositionIDs = "position_ids"   // I32 [seq_len]: 0 at the start of each sequence
	FieldCuSeqlens   = "cu_seqlens"     // I32 [seq_len+1]: sequence starts, then seq_len repeated
	FieldNumSeqs     = "num_seqs"       // I32 []: sequences in the row, padding's included
	FieldAttnMask    = "attention_mask" // I32 [seq_len]: 1 a token, 0 padding
)

// RowBytes is a packed row's tensor data: input_ids, position_ids and
// attention_mask of SeqLen, cu_seqlens of SeqLen+1, num_seqs of one, all
// int32. A chunk holds it plus its header (keys, shapes: about a KiB).
func (o PackOptions) RowBytes() int { return 4 * (4*o.SeqLen + 2) }

// PackStats counts what a Packer took and gave.
type PackStats struct {
	Docs    int64 // documents added
	Tokens  int64 // their tokens, EOS included
	Rows    int64 // rows made
	Pad     int64 // padding tokens in those rows
	Dropped int64 // tokens of a dropped tail
}

// Packer packs one shard's documents into rows. It is not safe for
// concurrent use; its rows depend only on the documents added, in order,
// so a shard packed again gives the same rows byte for byte.
type Packer struct {
	o      PackOptions
	prefix string

	// The open row: its tokens, their positions, and where each
	// sequence in it starts. A sequence is a document, or the part of
	// one that continues from the row before.
	ids, pos []int32
	starts   []int32
	// newDoc: the next token starts a document; open: a document was
	// begun and not ended; last: its last id so far.
	newDoc, open bool
	last         int32
	segPos       int32

	rows  []Output // made and not yet taken
	stats PackStats
}

// NewPacker returns a packer whose rows are keyed keyPrefix/row00000000,
// keyPrefix/row00000001... (the prefix names the shard, as sample keys do).
func NewPacker(o PackOptions, keyPrefix string) (*Packer, error) {
	if o.SeqLen < 2 || o.SeqLen > MaxSeqLen {
		return nil, fmt.Errorf("seq_len %d: want 2..%d", o.SeqLen, MaxSeqLen)
	}
	if o.Tail != TailPad && o.Tail != TailDrop {
		return nil, fmt.Errorf("tail %q: want %s or %s", o.Tail, TailPad, TailDrop)
	}
	return &Packer{o: o, prefix: keyPrefix,
		ids: make([]int32, 0, o.SeqLen), pos: make([]int32, 0, o.SeqLen)}, nil
}

// Add appends a document: its ids, then EOS unless it ends with EOS.
// Rows it fills are held until Take.
func (p *Packer) Add(doc []int32) {
	p.Append(doc)
	p.EndDocument()
}

// Append appends ids to the open document, opening one if none is: a
// long document fed in parts, its rows taken between them, is not held
// whole as rows. Add is Append then EndDocument.
func (p *Packer) Append(ids []int32) {
	if !p.open {
		p.open, p.newDoc, p.last = true, true, -1
	}
	if len(ids) > 0 {
		p.last = ids[len(ids)-1]
	}
	p.push(ids)
}

// EndDocument closes the open document (an empty one if none is open)
// with EOS, unless its last id is EOS.
func (p *Packer) EndDocument() {
	if !p.open {
		p.open, p.newDoc, p.last = true, true, -1
	}
	if p.last != p.o.EOS || p.newDoc {
		p.push([]int32{p.o.EOS})
	}
	p.open = false
	p.stats.Docs++
}

func (p *Packer) push(ids []int32) {
	p.stats.Tokens += int64(len(ids))
	for len(ids) > 0 {
		if p.newDoc || len(p.ids) == 0 {
			p.starts = append(p.starts, int32(len(p.ids)))
			p.newDoc, p.segPos = false, 0
		}
		n := min(len(ids), p.o.SeqLen-len(p.ids))
		for _, id := range ids[:n] {
			p.ids = append(p.ids, id)
			p.pos = append(p.pos, p.segPos)
			p.segPos++
		}
		ids = ids[n:]
		if len(p.ids) == p.o.SeqLen {
			p.emit()
		}
	}
}

// Take returns the full rows made since the last Take.
func (p *Packer) Take() []Output {
	r := p.rows
	p.rows = nil
	return r
}

// Close ends the shard: the open row, if any, is padded or dropped as
// Tail says; it returns the rows not yet taken.
func (p *Packer) Close() []Output {
	if len(p.ids) > 0 {
		if p.o.Tail == TailPad {
			p.emit()
		} else {
			p.stats.Dropped += int64(len(p.ids))
			p.reset()
		}
	}
	return p.Take()
}

// Options are the packer's options.
func (p *Packer) Options() PackOptions { return p.o }

// Stats returns the counts so far.
func (p *Packer) Stats() PackStats { return p.stats }

// emit turns the open row into an Output, padding it: the padding is a
// sequence of its own (cu_seqlens covers the whole row, so the rows of a
// batch concatenate into one varlen batch), positions from 0, mask 0.
func (p *Packer) emit() {
	n, real := p.o.SeqLen, len(p.ids)
	ids, pos := make([]byte, 4*n), make([]byte, 4*n)
	cu, mask := make([]byte, 4*(n+1)), make([]byte, 4*n)
	for i := range n {
		id, ps, m := p.o.PadID, int32(i-real), int32(0)
		if i < real {
			id, ps, m = p.ids[i], p.pos[i], 1
		}
		binary.LittleEndian.PutUint32(ids[4*i:], uint32(id))
		binary.LittleEndian.PutUint32(pos[4*i:], uint32(ps))
		binary.LittleEndian.PutUint32(mask[4*i:], uint32(m))
	}
	starts := p.starts
	if real < n {
		starts = append(starts, int32(real))
	}
	for i := range n + 1 {
		v := int32(n)
		if i < len(starts) {
			v = starts[i]
		}
		binary.LittleEndian.PutUint32(cu[4*i:], uint32(v))
	}
	count := make([]byte, 4)
	binary.LittleEndian.PutUint32(count, uint32(len(starts)))
	p.rows = append(p.rows, Output{
		Key: fmt.Sprintf("%s/row%08d", p.prefix, p.stats.Rows),
		Fields: []Field{
			{Name: FieldInputIDs, DType: safetensors.I32, Shape: []int{n}, Data: ids},
			{Name: FieldPositionIDs, DType: safetensors.I32, Shape: []int{n}, Data: pos},
			{Name: FieldCuSeqlens, DType: safetensors.I32, Shape: []int{n + 1}, Data: cu},
			{Name: FieldNumSeqs, DType: safetensors.I32, Shape: []int{}, Data: count},
			{Name: FieldAttnMask, DType: safetensors.I32, Shape: []int{n}, Data: mask},
		},
	})
	p.stats.Rows++
	p.stats.Pad += int64(n - real)
	p.reset()
}

func (p *Packer) reset() {
	p.ids, p.pos, p.starts = p.ids[:0], p.pos[:0], p.starts[:0]
}

// DocIDs reads the document a packing pipeline's Process gives (its one
// "ids" field, I32 [n]) as ids.
func DocIDs(o Output) ([]int32, error) { return AppendDocIDs(nil, o) }

// AppendDocIDs is DocIDs appending to dst, so a caller reuses one buffer.
func AppendDocIDs(dst []int32, o Output) ([]int32, error) {
	if len(o.Fields) != 1 || o.Fields[0].Name != FieldDocIDs || o.Fields[0].DType != safetensors.I32 || len(o.Fields[0].Data)%4 != 0 {
		return dst, fmt.Errorf("output of %d fields: want a document's %q I32 [n]", len(o.Fields), FieldDocIDs)
	}
	b := o.Fields[0].Data
	for i := 0; i < len(b); i += 4 {
		dst = append(dst, int32(binary.LittleEndian.Uint32(b[i:])))
	}
	return dst, nil
}

// FieldDocIDs is the field of a document a packing pipeline's Process
// gives, before packing: its ids, I32 [n].
const FieldDocIDs = "ids"
