package assembly

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// Batch is what the trainer gets: BatchSize samples of one epoch (fewer in
// an epoch's last batch), their keys in row order, and one tensor per name
// found in the chunks, stacked on dim 0.
type Batch struct {
	Epoch int
	Keys  []string
	// Sources, in a mixed job, are each row's source: an index into the
	// job spec's sources (nil for a job of one dataset).
	Sources []int
	Tensors []safetensors.Tensor
	// Runs, when set, holds each tensor's data as runs of rows in the
	// chunks they came from, and Tensors have no Data yet: a batch served
	// over HTTP is written from the chunks' own bytes, never copied
	// (materialize makes the tensors whole, for a caller in process).
	Runs [][]Run
}

// Run is consecutive rows of one tensor as a chunk holds them, with the
// expansion that makes them the trainer's (nil: they are as they are).
type Run struct {
	Data   []byte
	Expand *wire.Expansion
}

// Len is the size of r as the trainer gets it.
func (r Run) Len() int {
	if r.Expand == nil {
		return len(r.Data)
	}
	return len(r.Data) * r.Expand.Size()
}

// Materialize makes b's tensors whole (copying its runs into one buffer
// each, expanded), once.
func (b *Batch) Materialize() {
	if b.Runs == nil {
		return
	}
	tensors := make([]safetensors.Tensor, len(b.Tensors))
	for j, t := range b.Tensors {
		data := make([]byte, b.DataLen(j))
		off := 0
		for _, r := range b.Runs[j] {
			off += r.put(data[off:], rowElems(t))
		}
		t.Data = data
		tensors[j] = t
	}
	b.Tensors, b.Runs = tensors, nil
}

// put writes r as the trainer gets it to dst, returning its length; rows
// of an expanded run are rowBytes bytes.
func (r Run) put(dst []byte, rowBytes int) int {
	if r.Expand == nil {
		return copy(dst, r.Data)
	}
	n := r.Len()
	r.Expand.Expand(dst[:n], r.Data, rowBytes)
	return n
}

// rowElems is the elements of one row of stacked tensor t: the bytes of
// the row of an expanded run (a U8 per element).
func rowElems(t safetensors.Tensor) int { return safetensors.Elements(t.Shape[1:]) }

// DataLen is the size of tensor j's data, as the trainer gets it.
func (b *Batch) DataLen(j int) int {
	if b.Runs == nil {
		return len(b.Tensors[j].Data)
	}
	n := 0
	for _, r := range b.Runs[j] {
		n += r.Len()
	}
	return n
}

// Data is tensor j's data, as one buffer or as runs.
func (b *Batch) Data(j int) []Run {
	if b.Runs == nil {
		return []Run{{Data: b.Tensors[j].Data}}
	}
	return b.Runs[j]
}

// Sample is one row of a chunk: its key, its index in the chunk and its
// bytes in each tensor of the job's schema (aliasing the chunk's payload;
// nil for a chunk another agent of the reader holds), each tensor's
// data in the chunk (shared by its rows), and the chunk it came from.
type Sample struct {
	Key  string
	idx  int
	rows [][]byte
	cols [][]byte
	exp  []*wire.Expansion // per tensor, shared by the chunk's rows (nil: none)
	src  *HeldChunk
}

// expand is the expansion of the sample's tensor j (nil: none).
func (s Sample) expand(j int) *wire.Expansion {
	if s.exp == nil {
		return nil
	}
	return s.exp[j]
}

// Schema is the tensor layout all samples of a job share, so that they can
// be stacked. Names are sorted; shapes exclude the sample dimension.
type Schema struct {
	Names  []string
	Dtypes []safetensors.DType
	Shapes [][]int
}

// Equal reports whether s and o have the same tensors: names, dtypes and
// shapes.
func (s *Schema) Equal(o *Schema) bool {
	return slices.Equal(s.Names, o.Names) && slices.Equal(s.Dtypes, o.Dtypes) &&
		slices.EqualFunc(s.Shapes, o.Shapes, func(a, b []int) bool { return slices.Equal(a, b) })
}

// String names the tensors of s for messages.
func (s *Schema) String() string {
	out := ""
	for i, n := range s.Names {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s:%s%v", n, s.Dtypes[i], s.Shapes[i])
	}
	return out
}

// SplitChunk decodes a chunk into samples. The payload must outlive them.
func SplitChunk(data []byte) ([]Sample, *Schema, error) {
	samples, sc, _, err := SplitChunkAt(data)
	return samples, sc, err
}

// SplitChunkAt is SplitChunk that also returns the shard row of the
// chunk's first row (wire.MetaFirst; -1 when the chunk does not say).
func SplitChunkAt(data []byte) ([]Sample, *Schema, int, error) {
	f, err := safetensors.Decode(data)
	if err != nil {
		return nil, nil, -1, err
	}
	first := -1
	if v, ok := f.Metadata[wire.MetaFirst]; ok {
		if first, err = strconv.Atoi(v); err != nil || first < 0 || first > MaxRowsPerShard {
			return nil, nil, -1, fmt.Errorf("metadata %q: %q: want 0..%d", wire.MetaFirst, v, MaxRowsPerShard)
		}
	}
	samples, sc, err := splitDecoded(f)
	return samples, sc, first, err
}

func splitDecoded(f safetensors.File) ([]Sample, *Schema, error) {
	var keys []string
	if err := json.Unmarshal([]byte(f.Metadata[wire.MetaKeys]), &keys); err != nil {
		return nil, nil, fmt.Errorf("metadata %q: %w", wire.MetaKeys, err)
	}
	if len(f.Tensors) == 0 {
		return nil, nil, fmt.Errorf("no tensors")
	}
	var exps map[string]*wire.Expansion
	if v, ok := f.Metadata[wire.MetaExpand]; ok {
		var err error
		if exps, err = wire.ParseExpansions(v); err != nil {
			return nil, nil, err
		}
	}
	sc := &Schema{}
	for name := range f.Tensors {
		sc.Names = append(sc.Names, name)
	}
	sort.Strings(sc.Names)
	n := len(keys)
	samples := make([]Sample, n)
	cols := make([][]byte, len(sc.Names))
	var exp []*wire.Expansion
	if exps != nil {
		exp = make([]*wire.Expansion, len(sc.Names))
	}
	for i := range samples {
		samples[i] = Sample{Key: keys[i], idx: i, rows: make([][]byte, len(sc.Names)), cols: cols, exp: exp}
	}
	for j, name := range sc.Names {
		t := f.Tensors[name]
		if len(t.Shape) == 0 || t.Shape[0] != n {
			return nil, nil, fmt.Errorf("tensor %q has shape %v, want %d rows (one per key)", name, t.Shape, n)
		}
		if e := exps[name]; e != nil {
			// The trainer's tensor is the expansion's: [C,H,W] of its dtype.
			if c := e.Channels(); t.DType != safetensors.U8 || len(t.Shape) != 4 || t.Shape[3] != c {
				return nil, nil, fmt.Errorf("tensor %q is %s%v: an expansion of %d channels takes U8 [n,H,W,%d]", name, t.DType, t.Shape, c, c)
			}
			exp[j] = e
			sc.Dtypes = append(sc.Dtypes, safetensors.DType(e.DType))
			sc.Shapes = append(sc.Shapes, []int{t.Shape[3], t.Shape[1], t.Shape[2]})
			delete(exps, name)
		} else {
			sc.Dtypes = append(sc.Dtypes, t.DType)
			sc.Shapes = append(sc.Shapes, slices.Clone(t.Shape[1:]))
		}
		cols[j] = t.Data
		if n == 0 {
			continue
		}
		row := len(t.Data) / n
		for i := range samples {
			samples[i].rows[j] = t.Data[i*row : (i+1)*row : (i+1)*row]
		}
	}
	for name := range exps {
		return nil, nil, fmt.Errorf("metadata %q names tensor %q, which the chunk does not have", wire.MetaExpand, name)
	}
	return samples, sc, nil
}

// ReadyBatch is a batch waiting for the trainer, with the chunks its rows
// came from, in order. The rows of one batch are all held by one agent of
// the reader (holder); a batch another agent holds has keys but no
// tensors.
type ReadyBatch struct {
	Batch
	From []ChunkRows
}

// Holder is the agent holding the batch's rows ("" this one).
func (b ReadyBatch) Holder() string {
	if len(b.From) == 0 {
		return ""
	}
	return b.From[0].C.Holder
}

// ChunkRows says that n consecutive rows of a batch came from chunk c,
// starting at its row lo.
type ChunkRows struct {
	C     *HeldChunk
	Lo, N int
}

// Stack makes samples (all of one holder) one batch, its tensors' data
// the runs of consecutive rows of each chunk (no copy); samples of a chunk
// held elsewhere give keys and sources only.
func Stack(epoch int, sc *Schema, samples []Sample) ReadyBatch {
	b := ReadyBatch{Batch: Batch{Epoch: epoch, Keys: make([]string, len(samples))}}
	for i, s := range samples {
		b.Keys[i] = s.Key
		if k := len(b.From) - 1; k >= 0 && b.From[k].C == s.src && b.From[k].Lo+b.From[k].N == s.idx {
			b.From[k].N++
		} else {
			b.From = append(b.From, ChunkRows{s.src, s.idx, 1})
		}
	}
	if len(samples) > 0 && samples[0].rows == nil {
		return b
	}
	b.Runs = make([][]Run, len(sc.Names))
	for j, name := range sc.Names {
		shape := append([]int{len(samples)}, sc.Shapes[j]...)
		b.Tensors = append(b.Tensors, safetensors.Tensor{Name: name, DType: sc.Dtypes[j], Shape: shape})
		for i := 0; i < len(samples); {
			s := samples[i]
			row := len(s.rows[j])
			k := i + 1 // the run of s's chunk's consecutive rows
			for k < len(samples) && samples[k].src == s.src && samples[k].idx == s.idx+(k-i) && len(samples[k].cols) > j && &samples[k].cols[j] == &s.cols[j] {
				k++
			}
			if s.cols == nil || row == 0 {
				for _, r := range samples[i:k] {
					b.Runs[j] = append(b.Runs[j], Run{r.rows[j], r.expand(j)})
				}
			} else {
				b.Runs[j] = append(b.Runs[j], Run{s.cols[j][s.idx*row : (s.idx+k-i)*row : (s.idx+k-i)*row], s.expand(j)})
			}
			i = k
		}
	}
	return b
}

// RowSpan is n rows of a chunk from its row lo: a part's rows as the agent
// that serves the rank cuts them. row is the shard row of the first (-1
// when not known): a shard produced again is found by it, whatever chunks
// the function cuts this time. data is the chunk when this agent holds
// it (nil: the agent looks it up, or has it produced again).
type RowSpan struct {
	Ref   wire.ChunkRef
	Lo, N int
	Row   int
	Data  []byte
}

// SpansOf is chunk rows as spans, with the bytes this agent holds when
// withData.
func SpansOf(from []ChunkRows, withData bool) []RowSpan {
	out := make([]RowSpan, len(from))
	for i, f := range from {
		out[i] = RowSpan{Ref: f.C.ref, Lo: f.Lo, N: f.N, Row: f.C.first + f.Lo}
		if withData && f.C.Holder == "" {
			out[i].Data = f.C.data
		}
	}
	return out
}
