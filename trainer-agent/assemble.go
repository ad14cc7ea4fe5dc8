package traineragent

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/sluice-project/sluice/internal/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// Batch is what the trainer gets: BatchSize samples of one epoch (fewer in
// an epoch's last batch), their keys in row order, and one tensor per name
// found in the chunks, stacked on dim 0.
type Batch struct {
	Epoch   int
	Keys    []string
	Tensors []safetensors.Tensor
}

// sample is one row of a chunk: its key and its bytes in each tensor of the
// job's schema (aliasing the chunk's payload).
type sample struct {
	key  string
	rows [][]byte
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
	f, err := safetensors.Decode(data)
	if err != nil {
		return nil, nil, err
	}
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
	for i := range samples {
		samples[i] = sample{key: keys[i], rows: make([][]byte, len(sc.names))}
	}
	for j, name := range sc.names {
		t := f.Tensors[name]
		if len(t.Shape) == 0 || t.Shape[0] != n {
			return nil, nil, fmt.Errorf("tensor %q has shape %v, want %d rows (one per key)", name, t.Shape, n)
		}
		sc.dtypes = append(sc.dtypes, t.DType)
		sc.shapes = append(sc.shapes, slices.Clone(t.Shape[1:]))
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

// stack copies samples into one batch.
func stack(epoch int, sc *schema, samples []sample) Batch {
	b := Batch{Epoch: epoch, Keys: make([]string, len(samples))}
	for i, s := range samples {
		b.Keys[i] = s.key
	}
	for j, name := range sc.names {
		size := 0
		for _, s := range samples {
			size += len(s.rows[j])
		}
		data := make([]byte, 0, size)
		for _, s := range samples {
			data = append(data, s.rows[j]...)
		}
		shape := append([]int{len(samples)}, sc.shapes[j]...)
		b.Tensors = append(b.Tensors, safetensors.Tensor{Name: name, DType: sc.dtypes[j], Shape: shape, Data: data})
	}
	return b
}

// shardProgress tracks one shard of one epoch.
type shardProgress struct {
	chunks map[int]bool
	end    *wire.ShardEnd
	done   bool
}

func (p *shardProgress) complete() bool {
	if p.end == nil {
		return false
	}
	seen := 0
	for c := range p.chunks {
		if c < p.end.Chunks {
			seen++
		}
	}
	return seen == p.end.Chunks
}

// epochProgress tracks one epoch that is not complete yet.
type epochProgress struct {
	shards   map[int]*shardProgress
	complete int
	pending  []sample // not yet a full batch
}

// assembler turns output messages into batches: it dedupes by ChunkRef,
// tracks shard and epoch completion and cuts batches per epoch. It does no
// I/O and no locking; the agent serialises calls.
type assembler struct {
	job       string
	epochs    int
	shards    int
	batchSize int
	schema    *schema
	open      map[int]*epochProgress
	done      map[int]bool
	pending   int // samples in partial batches over all open epochs
}

func newAssembler(job wire.Job) *assembler {
	a := &assembler{
		job:       job.Spec.ID,
		epochs:    job.Spec.Epochs,
		shards:    len(job.Shards),
		batchSize: job.Spec.BatchSize,
		open:      map[int]*epochProgress{},
		done:      map[int]bool{},
	}
	return a
}

// outcome is what one output message changed.
type outcome struct {
	duplicate bool
	arrived   int
	failed    []wire.FailedSample
	batches   []Batch
	completed []int // epochs that became complete; their last batch is in batches
}

// allComplete reports whether every epoch is complete.
func (a *assembler) allComplete() bool { return len(a.done) == a.epochs }

// start completes the epochs of a job without shards, which have nothing to wait for.
func (a *assembler) start() []int {
	if a.shards > 0 {
		return nil
	}
	var out []int
	for e := range a.epochs {
		if !a.done[e] {
			a.done[e] = true
			out = append(out, e)
		}
	}
	return out
}

// add applies one output message. An error means the message was rejected
// and left unrecorded (it names the problem); a corrupt chunk is recorded
// as seen and its loss reported as a failed sample instead, so that its
// shard can still complete.
func (a *assembler) add(ref wire.ChunkRef, data []byte) (outcome, error) {
	var out outcome
	if ref.Epoch < 0 || ref.Epoch >= a.epochs {
		return out, fmt.Errorf("output %s: epoch %d: want 0..%d", ref.MsgID(), ref.Epoch, a.epochs-1)
	}
	if ref.Shard < 0 || ref.Shard >= a.shards {
		return out, fmt.Errorf("output %s: shard %d: want 0..%d", ref.MsgID(), ref.Shard, a.shards-1)
	}
	if a.done[ref.Epoch] {
		out.duplicate = true
		return out, nil
	}
	ep := a.open[ref.Epoch]
	if ep == nil {
		ep = &epochProgress{shards: map[int]*shardProgress{}}
		a.open[ref.Epoch] = ep
	}
	sh := ep.shards[ref.Shard]
	if sh == nil {
		sh = &shardProgress{chunks: map[int]bool{}}
		ep.shards[ref.Shard] = sh
	}

	if ref.Chunk < 0 {
		if sh.end != nil {
			out.duplicate = true
			return out, nil
		}
		var end wire.ShardEnd
		if err := json.Unmarshal(data, &end); err != nil {
			return out, fmt.Errorf("output %s: shard end: %w", ref.MsgID(), err)
		}
		if end.Chunks < 0 {
			return out, fmt.Errorf("output %s: shard end: chunks %d: want >= 0", ref.MsgID(), end.Chunks)
		}
		sh.end = &end
		for _, f := range end.Failed {
			f.Epoch = ref.Epoch
			out.failed = append(out.failed, f)
		}
	} else {
		if sh.chunks[ref.Chunk] {
			out.duplicate = true
			return out, nil
		}
		sh.chunks[ref.Chunk] = true
		samples, sc, err := splitChunk(data)
		switch {
		case err != nil:
			out.failed = append(out.failed, wire.FailedSample{Key: ref.MsgID(), Reason: "corrupt chunk: " + err.Error(), Epoch: ref.Epoch})
		case len(samples) == 0:
		case a.schema != nil && !a.schema.equal(sc):
			reason := fmt.Sprintf("chunk %s has tensors %s, the job's first chunk %s: cannot stack", ref.MsgID(), sc, a.schema)
			for _, s := range samples {
				out.failed = append(out.failed, wire.FailedSample{Key: s.key, Reason: reason, Epoch: ref.Epoch})
			}
		default:
			if a.schema == nil {
				a.schema = sc
			}
			out.arrived = len(samples)
			ep.pending = append(ep.pending, samples...)
			a.pending += len(samples)
			for len(ep.pending) >= a.batchSize {
				out.batches = append(out.batches, stack(ref.Epoch, a.schema, ep.pending[:a.batchSize]))
				// Copy the rest so the batched samples' payloads can be collected.
				ep.pending = append([]sample(nil), ep.pending[a.batchSize:]...)
				a.pending -= a.batchSize
			}
		}
	}

	if sh.done || !sh.complete() {
		return out, nil
	}
	sh.done = true
	ep.complete++
	if ep.complete < a.shards {
		return out, nil
	}
	if len(ep.pending) > 0 {
		out.batches = append(out.batches, stack(ref.Epoch, a.schema, ep.pending))
		a.pending -= len(ep.pending)
	}
	delete(a.open, ref.Epoch)
	a.done[ref.Epoch] = true
	out.completed = append(out.completed, ref.Epoch)
	return out, nil
}
