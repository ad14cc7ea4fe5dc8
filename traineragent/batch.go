package traineragent

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
	// runs, when set, holds each tensor's data as runs of rows in the
	// chunks they came from, and Tensors have no Data yet: a batch served
	// over HTTP is written from the chunks' own bytes, never copied
	// (materialize makes the tensors whole, for a caller in process).
	runs [][][]byte
}

// materialize makes b's tensors whole (copying its runs into one buffer
// each), once.
func (b *Batch) materialize() {
	if b.runs == nil {
		return
	}
	tensors := make([]safetensors.Tensor, len(b.Tensors))
	for j, t := range b.Tensors {
		size := 0
		for _, r := range b.runs[j] {
			size += len(r)
		}
		data := make([]byte, 0, size)
		for _, r := range b.runs[j] {
			data = append(data, r...)
		}
		t.Data = data
		tensors[j] = t
	}
	b.Tensors, b.runs = tensors, nil
}

// dataLen is the size of tensor j's data.
func (b *Batch) dataLen(j int) int {
	if b.runs == nil {
		return len(b.Tensors[j].Data)
	}
	n := 0
	for _, r := range b.runs[j] {
		n += len(r)
	}
	return n
}

// data is tensor j's data, as one buffer or as runs.
func (b *Batch) data(j int) [][]byte {
	if b.runs == nil {
		return [][]byte{b.Tensors[j].Data}
	}
	return b.runs[j]
}

// sample is one row of a chunk: its key, its index in the chunk and its
// bytes in each tensor of the job's schema (aliasing the chunk's payload;
// nil for a chunk another agent of the reader holds), each tensor's
// data in the chunk (shared by its rows), and the chunk it came from.
type sample struct {
	key  string
	idx  int
	rows [][]byte
	cols [][]byte
	src  *heldChunk
}

// schema is the tensor layout all samples of a job share, so that they can
// be stacked. Names are sorted; shapes exclude the sample dimension.
type schema struct {
	names  []string
	dtypes []safetensors.DType
	shapes [][]int
}

func (s *schema) equal(o *schema) bool {
	return slices.Equal(s.names, o.names) && slices.Equal(s.dtypes, o.dtypes) &&
		slices.EqualFunc(s.shapes, o.shapes, func(a, b []int) bool { return slices.Equal(a, b) })
}

func (s *schema) String() string {
	out := ""
	for i, n := range s.names {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s:%s%v", n, s.dtypes[i], s.shapes[i])
	}
	return out
}

// splitChunk decodes a chunk into samples. The payload must outlive them.
func splitChunk(data []byte) ([]sample, *schema, error) {
	samples, sc, _, err := splitChunkAt(data)
	return samples, sc, err
}

// splitChunkAt is splitChunk that also returns the shard row of the
// chunk's first row (wire.MetaFirst; -1 when the chunk does not say).
func splitChunkAt(data []byte) ([]sample, *schema, int, error) {
	f, err := safetensors.Decode(data)
	if err != nil {
		return nil, nil, -1, err
	}
	first := -1
	if v, ok := f.Metadata[wire.MetaFirst]; ok {
		if first, err = strconv.Atoi(v); err != nil || first < 0 || first > maxRowsPerShard {
			return nil, nil, -1, fmt.Errorf("metadata %q: %q: want 0..%d", wire.MetaFirst, v, maxRowsPerShard)
		}
	}
	samples, sc, err := splitDecoded(f)
	return samples, sc, first, err
}

func splitDecoded(f safetensors.File) ([]sample, *schema, error) {
	var keys []string
	if err := json.Unmarshal([]byte(f.Metadata[wire.MetaKeys]), &keys); err != nil {
		return nil, nil, fmt.Errorf("metadata %q: %w", wire.MetaKeys, err)
	}
	if len(f.Tensors) == 0 {
		return nil, nil, fmt.Errorf("no tensors")
	}
	sc := &schema{}
	for name := range f.Tensors {
		sc.names = append(sc.names, name)
	}
	sort.Strings(sc.names)
	n := len(keys)
	samples := make([]sample, n)
	cols := make([][]byte, len(sc.names))
	for i := range samples {
		samples[i] = sample{key: keys[i], idx: i, rows: make([][]byte, len(sc.names)), cols: cols}
	}
	for j, name := range sc.names {
		t := f.Tensors[name]
		if len(t.Shape) == 0 || t.Shape[0] != n {
			return nil, nil, fmt.Errorf("tensor %q has shape %v, want %d rows (one per key)", name, t.Shape, n)
		}
		sc.dtypes = append(sc.dtypes, t.DType)
		sc.shapes = append(sc.shapes, slices.Clone(t.Shape[1:]))
		cols[j] = t.Data
		if n == 0 {
			continue
		}
		row := len(t.Data) / n
		for i := range samples {
			samples[i].rows[j] = t.Data[i*row : (i+1)*row : (i+1)*row]
		}
	}
	return samples, sc, nil
}

// readyBatch is a batch waiting for the trainer, with the chunks its rows
// came from, in order. The rows of one batch are all held by one agent of
// the reader (holder); a batch another agent holds has keys but no
// tensors.
type readyBatch struct {
	Batch
	from []chunkRows
}

// holder is the agent holding the batch's rows ("" this one).
func (b readyBatch) holder() string {
	if len(b.from) == 0 {
		return ""
	}
	return b.from[0].c.holder
}

// chunkRows says that n consecutive rows of a batch came from chunk c,
// starting at its row lo.
type chunkRows struct {
	c     *heldChunk
	lo, n int
}

// stack makes samples (all of one holder) one batch, its tensors' data
// the runs of consecutive rows of each chunk (no copy); samples of a chunk
// held elsewhere give keys and sources only.
func stack(epoch int, sc *schema, samples []sample) readyBatch {
	b := readyBatch{Batch: Batch{Epoch: epoch, Keys: make([]string, len(samples))}}
	for i, s := range samples {
		b.Keys[i] = s.key
		if k := len(b.from) - 1; k >= 0 && b.from[k].c == s.src && b.from[k].lo+b.from[k].n == s.idx {
			b.from[k].n++
		} else {
			b.from = append(b.from, chunkRows{s.src, s.idx, 1})
		}
	}
	if len(samples) > 0 && samples[0].rows == nil {
		return b
	}
	b.runs = make([][][]byte, len(sc.names))
	for j, name := range sc.names {
		shape := append([]int{len(samples)}, sc.shapes[j]...)
		b.Tensors = append(b.Tensors, safetensors.Tensor{Name: name, DType: sc.dtypes[j], Shape: shape})
		for i := 0; i < len(samples); {
			s := samples[i]
			row := len(s.rows[j])
			k := i + 1 // the run of s's chunk's consecutive rows
			for k < len(samples) && samples[k].src == s.src && samples[k].idx == s.idx+(k-i) && len(samples[k].cols) > j && &samples[k].cols[j] == &s.cols[j] {
				k++
			}
			if s.cols == nil || row == 0 {
				for _, r := range samples[i:k] {
					b.runs[j] = append(b.runs[j], r.rows[j])
				}
			} else {
				b.runs[j] = append(b.runs[j], s.cols[j][s.idx*row:(s.idx+k-i)*row:(s.idx+k-i)*row])
			}
			i = k
		}
	}
	return b
}
