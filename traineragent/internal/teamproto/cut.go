package teamproto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/wire"
)

// Cutting a part given as spans (readerstate's team.go): each span's rows are cut from
// its chunk, which the agent holds or has produced again.

// CutRows is the batch of epoch e made of spans' rows, whose keys must be
// keys where those are known ("" where a member holds the row: functions
// are deterministic, so a shard produced again has the same rows); rows
// gives each span's rows. A part of no rows has sc's tensors with no rows
// (stack makes them).
func CutRows(ctx context.Context, e int, keys []string, spans []assembly.RowSpan, sc *assembly.Schema, rows func(context.Context, assembly.RowSpan) ([]assembly.Sample, *assembly.Schema, error)) (assembly.Batch, error) {
	var samples []assembly.Sample
	for _, sp := range spans {
		got, csc, err := rows(ctx, sp)
		switch {
		case err != nil:
			return assembly.Batch{}, err
		case len(got) != sp.N:
			return assembly.Batch{}, fmt.Errorf("chunk %s: %d rows for a span of %d", sp.Ref, len(got), sp.N)
		case sp.N == 0:
		case sc == nil:
			sc = csc
		case !sc.Equal(csc):
			return assembly.Batch{}, fmt.Errorf("chunk %s has tensors %s, the job's %s: cannot stack", sp.Ref, csc, sc)
		}
		samples = append(samples, got...)
	}
	if len(samples) != len(keys) {
		return assembly.Batch{}, fmt.Errorf("the chunks give %d rows, the part has %d", len(samples), len(keys))
	}
	for i, s := range samples {
		if keys[i] != "" && keys[i] != s.Key {
			return assembly.Batch{}, fmt.Errorf("row %d of the part is sample %q, its chunk's %q (produced again differently?)", i, keys[i], s.Key)
		}
	}
	if sc == nil {
		return assembly.Batch{Epoch: e, Keys: keys}, nil
	}
	return assembly.Stack(e, sc, samples).Batch, nil
}

// SpanRows is span sp's rows of its chunk data.
func SpanRows(sp assembly.RowSpan, data []byte) ([]assembly.Sample, *assembly.Schema, error) {
	rows, sc, err := assembly.SplitChunk(data)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("chunk %s: %w", sp.Ref, err)
	case sp.Lo < 0 || sp.N < 0 || sp.Lo+sp.N > len(rows):
		return nil, nil, fmt.Errorf("chunk %s has %d rows, the part wants rows %d..%d", sp.Ref, len(rows), sp.Lo, sp.Lo+sp.N-1)
	}
	return rows[sp.Lo : sp.Lo+sp.N], sc, nil
}

// Producer has shards produced again for the chunks an agent needs and
// does not hold, one send per shard however many parts wait for it, and
// keeps the last few shards produced (the ranks of one step often need
// the same one).
type Producer struct {
	job     wire.Job
	produce func(ctx context.Context, task wire.ShardTask, chunk func(int, []byte)) (wire.ShardEnd, error)
	ctx     context.Context // the agent's run: a production outlives the part that asked for it

	// maxBytes bounds the bytes of the shards kept beyond the one being
	// produced last (0: none): they count in the job's output buffer.
	maxBytes int64

	mu     sync.Mutex // a leaf (see Reader): nothing is locked under it
	shards map[assembly.ShardRef]*production
	order  []assembly.ShardRef
}

type production struct {
	done   chan struct{}
	chunks map[int][]byte
	// firsts has each chunk's first shard row (-1: not known), so that a
	// span is found by its rows whatever chunks this send cut.
	firsts map[int]int
	err    error
	bytes  int64 // of its chunks so far (producer.mu)
}

// keepProduced is how many shards produced again a producer keeps.
const keepProduced = 8

// HeldBytes is the size of the shards the producer keeps (nil: none).
func (p *Producer) HeldBytes() int64 {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var n int64
	for _, pr := range p.shards {
		n += pr.bytes
	}
	return n
}

// evict drops the oldest shards kept beyond keepProduced or maxBytes,
// never the newest; p.mu must be held.
func (p *Producer) evict() {
	total := int64(0)
	for _, pr := range p.shards {
		total += pr.bytes
	}
	for len(p.order) > 1 && (len(p.order) > keepProduced || p.maxBytes > 0 && total > p.maxBytes) {
		total -= p.shards[p.order[0]].bytes
		delete(p.shards, p.order[0])
		p.order = p.order[1:]
	}
}

// Rows is span sp's rows, produced again: found by their shard rows when
// the span says them, else by chunk index (as chunked the first time).
func (p *Producer) Rows(ctx context.Context, sp assembly.RowSpan) ([]assembly.Sample, *assembly.Schema, error) {
	if sp.Row < 0 {
		data, err := p.Chunk(ctx, sp.Ref)
		if err != nil {
			return nil, nil, err
		}
		return SpanRows(sp, data)
	}
	pr, err := p.produced(ctx, sp.Ref)
	if err != nil {
		return nil, nil, err
	}
	byRow := map[int]assembly.Sample{}
	var sc *assembly.Schema
	for i, data := range pr.chunks {
		first := pr.firsts[i]
		if first < 0 {
			continue
		}
		rows, csc, err := assembly.SplitChunk(data)
		if err != nil {
			return nil, nil, fmt.Errorf("chunk %d of shard %d of epoch %d produced again: %w", i, sp.Ref.Shard, sp.Ref.Epoch, err)
		}
		lo, hi := max(sp.Row, first), min(sp.Row+sp.N, first+len(rows))
		if lo >= hi {
			continue
		}
		if sc != nil && !sc.Equal(csc) {
			return nil, nil, fmt.Errorf("shard %d of epoch %d produced again: its chunks have tensors %s and %s", sp.Ref.Shard, sp.Ref.Epoch, sc, csc)
		}
		sc = csc
		for r := lo; r < hi; r++ {
			byRow[r] = rows[r-first]
		}
	}
	out := make([]assembly.Sample, 0, sp.N)
	for r := sp.Row; r < sp.Row+sp.N; r++ {
		s, ok := byRow[r]
		if !ok {
			return nil, nil, fmt.Errorf("shard %d of epoch %d produced again has no row %d", sp.Ref.Shard, sp.Ref.Epoch, r)
		}
		out = append(out, s)
	}
	return out, sc, nil
}

// Chunk is chunk ref, produced again.
func (p *Producer) Chunk(ctx context.Context, ref wire.ChunkRef) ([]byte, error) {
	pr, err := p.produced(ctx, ref)
	if err != nil {
		return nil, err
	}
	data, ok := pr.chunks[ref.Chunk]
	if !ok {
		return nil, fmt.Errorf("shard %d of epoch %d produced again has no chunk %d", ref.Shard, ref.Epoch, ref.Chunk)
	}
	return data, nil
}

// produced is ref's shard produced again, once done.
func (p *Producer) produced(ctx context.Context, ref wire.ChunkRef) (*production, error) {
	if p == nil {
		return nil, errors.New("no dispatcher to produce a chunk again")
	}
	k := assembly.ShardRef{Epoch: ref.Epoch, Shard: ref.Shard}
	p.mu.Lock()
	pr := p.shards[k]
	if pr == nil || isDone(pr) && pr.err != nil {
		pr = &production{done: make(chan struct{}), chunks: map[int][]byte{}, firsts: map[int]int{}}
		if i := slices.Index(p.order, k); i >= 0 { // a failed one, produced again
			p.order = slices.Delete(p.order, i, i+1)
		}
		p.shards[k] = pr
		p.order = append(p.order, k)
		p.evict()
		go p.run(k, pr)
	}
	p.mu.Unlock()
	select {
	case <-pr.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if pr.err != nil {
		return nil, pr.err
	}
	return pr, nil
}

func isDone(pr *production) bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

func (p *Producer) run(k assembly.ShardRef, pr *production) {
	defer close(pr.done)
	var mu sync.Mutex
	next := 0 // the next chunk's first row, for chunks that do not say
	_, err := p.produce(p.ctx, p.job.Task(k.Epoch, k.Shard), func(i int, data []byte) {
		rows, _, first, err := assembly.SplitChunkAt(data)
		if i == 0 {
			next = 0
		}
		if first < 0 && err == nil {
			first = next
		}
		if err != nil {
			first = -1
		}
		next = first + len(rows)
		mu.Lock()
		pr.chunks[i], pr.firsts[i] = data, first
		mu.Unlock()
		p.mu.Lock()
		pr.bytes += int64(len(data))
		p.mu.Unlock()
	})
	pr.err = err
}

// NewProducer produces chunks again for job with produce, within ctx,
// keeping a quarter of the job's output buffer.
func NewProducer(ctx context.Context, job wire.Job, produce func(context.Context, wire.ShardTask, func(int, []byte)) (wire.ShardEnd, error)) *Producer {
	return &Producer{job: job, produce: produce, ctx: ctx, shards: map[assembly.ShardRef]*production{}, maxBytes: job.Spec.OutputBufferBytes / 4}
}
