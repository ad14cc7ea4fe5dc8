package assembly

import (
	"maps"
	"slices"

	"github.com/sluice-project/sluice/wire"
)

// Mixing (docs/mixing.md). A mixed job's shards come from several sources
// (wire.JobSpec.Sources), and a shard holds hundreds to thousands of
// samples: batched in arrival order, a window of 64 samples would come
// from one source. So the assembler places rows in the batch stream by
// sample: each holder's fresh rows wait in a queue per source (staged),
// and each slot of the stream takes the next row of the source
// wire.MixNext names. When that source has no row waiting but more of it
// is to come in the epoch, the stream waits for it (the ranks are then
// starved, and the agent takes tasks past its buffer: buffer.go), unless
// the chunks held fill the job's output buffer (mixFull); once every
// shard of a source has arrived, its share goes to the others. The
// broker queues the sources' tasks interleaved by weight
// (broker.MixedOrder), so a source's rows are seldom waited for long.
//
// Only the order rows enter batches changes: the position still records
// which rows of which shard were handed out, whatever batches took them,
// so a resume is exactly once as for a job of one dataset.

// mixer is what the assembler knows of a mixed job's sources.
type mixer struct {
	seed    uint64
	weights []float64
	slots   []int   // per source, its shards in an epoch
	source  []int32 // per shard, its source
	// holdBytes is the job's output buffer: the chunks held past which
	// no source is waited for.
	holdBytes int64
}

func newMixer(job wire.Job) *mixer {
	if len(job.Sources) == 0 {
		return nil
	}
	m := &mixer{seed: job.Spec.Seed, weights: job.SourceWeights(), slots: make([]int, len(job.Sources)), source: make([]int32, len(job.Shards)),
		holdBytes: job.Spec.OutputBufferBytes}
	for i, s := range job.Sources {
		m.slots[i] = s.Slots
		for k := s.First; k < s.First+s.Slots && k < len(m.source); k++ {
			m.source[k] = int32(i)
		}
	}
	return m
}

// sourceOf is shard s's source.
func (m *mixer) sourceOf(s int) int {
	if s < 0 || s >= len(m.source) {
		return 0
	}
	return int(m.source[s])
}

// mixQueue is one holder's rows of an epoch not yet in its batch stream,
// per source, and how many rows of each the stream took.
type mixQueue struct {
	bySource [][]Sample
	drawn    []int
	n        int // rows waiting
}

// stage queues fresh rows of shard s of epoch e that holder holds.
func (a *Assembler) stage(ep *EpochState, holder string, s int, fresh []Sample) {
	q := ep.staged[holder]
	if q == nil {
		n := len(a.mix.slots)
		q = &mixQueue{bySource: make([][]Sample, n), drawn: make([]int, n)}
		if holder == "" {
			// After a restore, this agent's stream goes on from what was
			// handed out (a lone agent's is exactly its stream so far).
			q.drawn = wire.MixResume(a.mix.weights, ep.handedBySrc)
		}
		ep.staged[holder] = q
	}
	src := a.mix.sourceOf(s)
	q.bySource[src] = append(q.bySource[src], fresh...)
	q.n += len(fresh)
}

// release moves holder's staged rows of epoch e into its batch stream in
// the schedule's order, as far as the sources the schedule names have
// rows, and cuts the full batches.
func (a *Assembler) release(e int, ep *EpochState, holder string, out *Outcome) {
	q := ep.staged[holder]
	if q == nil {
		return
	}
	open := make([]bool, len(q.bySource))
	pending := ep.pending[holder]
	for q.n > 0 {
		for i := range open {
			open[i] = len(q.bySource[i]) > 0 || ep.srcArrived[i] < a.mix.slots[i]
		}
		i := wire.MixNext(a.mix.seed, a.mix.weights, q.drawn, open)
		if i >= 0 && len(q.bySource[i]) == 0 && a.mixFull(q) {
			// Past the buffer the mixture bends rather than the memory:
			// the source furthest behind of those with rows.
			for k := range open {
				open[k] = len(q.bySource[k]) > 0
			}
			i = wire.MixNext(a.mix.seed, a.mix.weights, q.drawn, open)
		}
		if i < 0 || len(q.bySource[i]) == 0 {
			break // wait for source i's rows
		}
		pending = append(pending, q.bySource[i][0])
		q.bySource[i][0] = Sample{}
		q.bySource[i] = q.bySource[i][1:]
		q.drawn[i]++
		q.n--
		if len(pending) == a.batchSize {
			out.Batches = append(out.Batches, a.stack(e, pending))
			pending = nil
			a.Pending -= a.batchSize
		}
	}
	ep.pending[holder] = pending
}

// maxStagedRows bounds the rows one holder's stream may hold back for a
// source not there yet (a member's rows count no bytes here).
const maxStagedRows = 1 << 16

// mixFull reports whether waiting for a source would hold more than the
// job's output buffer (or maxStagedRows rows of one holder): a source
// whose shards hold far fewer samples than its weight asks for would
// otherwise have the agent hold the others' rows without bound (its
// ranks starved, it takes tasks past the buffer: buffer.go).
func (a *Assembler) mixFull(q *mixQueue) bool {
	return q.n >= maxStagedRows || a.mix.holdBytes > 0 && a.HeldBytes >= a.mix.holdBytes
}

// releaseAll releases every holder's staged rows of epoch e (a source's
// last shard arrived: the others may go on without it), holders in
// order.
func (a *Assembler) releaseAll(e int, ep *EpochState, out *Outcome) {
	for _, h := range slices.Sorted(maps.Keys(ep.staged)) {
		a.release(e, ep, h, out)
	}
}

// sourceArrived counts shard s of epoch e as arrived for its source and
// releases the rows that waited for the source, if it was its last.
func (a *Assembler) sourceArrived(e int, ep *EpochState, s int, out *Outcome) {
	if a.mix == nil {
		return
	}
	src := a.mix.sourceOf(s)
	ep.srcArrived[src]++
	if ep.srcArrived[src] == a.mix.slots[src] && out != nil {
		a.releaseAll(e, ep, out)
	}
}

// stack stacks samples into a batch of epoch e, noting each row's source
// in a mixed job.
func (a *Assembler) stack(e int, samples []Sample) ReadyBatch {
	b := Stack(e, a.Schema, samples)
	if a.mix != nil {
		b.Sources = make([]int, len(samples))
		for i, s := range samples {
			if s.src != nil {
				b.Sources[i] = a.mix.sourceOf(s.src.ref.Shard)
			}
		}
	}
	return b
}

// SpanSources are the sources of the rows of spans, in order (nil for a
// job of one dataset).
func SpanSources(job wire.Job, spans []RowSpan) []int {
	if len(job.Sources) == 0 {
		return nil
	}
	var out []int
	for _, sp := range spans {
		src := job.SourceOf(sp.Ref.Shard)
		for range sp.N {
			out = append(out, src)
		}
	}
	return out
}
