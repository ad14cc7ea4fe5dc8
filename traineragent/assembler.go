package traineragent

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/sluice-project/sluice/wire"
)

// heldChunk is a chunk the reader received and has not handed out in full:
// its shard's task stays unsettled (the dispatcher keeps it alive) until
// the shard's last row is in a batch the trainer took.
type heldChunk struct {
	ref    wire.ChunkRef
	rows   int    // rows of the chunk, those handed out before a restart included
	handed int    // leading rows handed out
	bytes  int    // size of the chunk
	data   []byte // the chunk, which its rows not handed out point into
	// holder is the agent of the reader that holds the chunk's bytes
	// ("" this one; see team.go): the reader knows only its rows' keys.
	holder string
}

// shardRef names one shard of one epoch: the unit a task is settled in.
type shardRef struct{ epoch, shard int }

// shardState is a shard of an unfinished epoch that is not complete yet.
type shardState struct {
	end        int    // chunks the shard end announced; -1 until it was seen
	delivered  bitset // chunks whose every row was handed out (before a restart too)
	held       map[int]*heldChunk
	skip       map[int]int // leading rows of a chunk handed out before a restart, until it comes again
	arrivedAll bool        // every chunk is delivered or held
	samples    int         // rows of its chunks that arrived in this agent's run
}

func newShardState() *shardState {
	return &shardState{end: -1, held: map[int]*heldChunk{}, skip: map[int]int{}}
}

// hasAll reports whether every chunk below the end is delivered or, with
// held, held.
func (s *shardState) hasAll(held bool) bool {
	if s.end < 0 {
		return false
	}
	n := s.delivered.countBelow(s.end)
	if held {
		for c := range s.held {
			if c < s.end {
				n++
			}
		}
	}
	return n == s.end
}

// epochState is an epoch not finished yet (or finished out of order).
type epochState struct {
	complete  bitset // shards whose every chunk was handed out, shard end seen
	nComplete int
	replayed  bitset              // shards asked to be re-produced (a resume, or owed: see position)
	owed      bitset              // shards a lagging reader did not keep (see lag.go)
	shards    map[int]*shardState // shards with anything recorded, not complete
	arrived   int                 // shards complete or arrivedAll
	pending   map[string][]sample // not yet a full batch, per holder
	cut       bool                // every shard arrived; the last batches are cut
}

// assembler turns a reader's chunks into batches and keeps its position:
// which samples were handed out. It dedupes by ChunkRef, tracks shard and
// epoch completion, cuts batches per epoch and collects the shards that
// completed, whose tasks may be settled once the position is recorded. It
// does no I/O and no locking; the reader serialises calls.
//
// Two notions of done: an epoch is cut once every chunk of it arrived (its
// last, partial batch is then cut), and finished once every row of it was
// handed out. Only what was handed out is part of the position.
type assembler struct {
	job       string
	epochs    int
	shards    int
	batchSize int
	schema    *schema
	finished  int                 // epochs 0..finished-1 are finished
	open      map[int]*epochState // epochs >= finished with anything recorded or held
	pending   int                 // samples in partial batches over all open epochs
	heldBytes int64               // bytes of the chunks held
	// completed are shards that completed since the last takeCompleted:
	// their tasks may be settled once the position is written.
	completed []shardRef
	// version counts changes to the position.
	version uint64
}

func newAssembler(job wire.Job) *assembler {
	return &assembler{
		job:       job.Spec.ID,
		epochs:    job.Spec.Epochs,
		shards:    len(job.Shards),
		batchSize: job.Spec.BatchSize,
		open:      map[int]*epochState{},
	}
}

// outcome is what one chunk or shard end changed.
type outcome struct {
	duplicate bool
	heldThere bool // a copy of a chunk its holder told of before: it keeps it
	arrived   int
	failed    []wire.FailedSample
	omitted   int // failed samples of the epoch beyond those listed (one entry in failed stands for them)
	batches   []readyBatch
	cut       []int // epochs whose last batch is in batches
	finished  []int // epochs whose every row was handed out
}

// allCut reports whether every chunk of every epoch arrived.
func (a *assembler) allCut() bool {
	for e := a.finished; e < a.epochs; e++ {
		if ep := a.open[e]; ep == nil || !ep.cut {
			return false
		}
	}
	return true
}

// allFinished reports whether every sample of every epoch was handed out.
func (a *assembler) allFinished() bool { return a.finished == a.epochs }

// finishedCount is the number of finished epochs, those finished out of order included.
func (a *assembler) finishedCount() int {
	n := a.finished
	for _, ep := range a.open {
		if ep.nComplete == a.shards {
			n++
		}
	}
	return n
}

// start finishes the epochs of a job without shards, which have nothing to
// wait for, and those a restored position says are complete.
func (a *assembler) start() []int {
	var out []int
	if a.shards == 0 {
		for e := a.finished; e < a.epochs; e++ {
			out = append(out, e)
		}
		a.finished = a.epochs
		clear(a.open)
		return out
	}
	for e := a.finished; e < a.epochs; e++ {
		if ep := a.open[e]; ep != nil && ep.nComplete == a.shards {
			out = append(out, e)
		}
	}
	a.compact()
	return out
}

func (a *assembler) epoch(e int) *epochState {
	ep := a.open[e]
	if ep == nil {
		ep = &epochState{shards: map[int]*shardState{}, pending: map[string][]sample{}}
		a.open[e] = ep
	}
	return ep
}

// pendingRows counts the samples waiting in the epoch's partial batches.
func (ep *epochState) pendingRows() int {
	n := 0
	for _, p := range ep.pending {
		n += len(p)
	}
	return n
}

func (ep *epochState) shard(s int) *shardState {
	sh := ep.shards[s]
	if sh == nil {
		sh = newShardState()
		ep.shards[s] = sh
	}
	return sh
}

// add applies one chunk. An error means it was rejected and left
// unrecorded (it names the problem); a corrupt chunk is recorded as
// delivered and its loss reported as a failed sample instead, so that its
// shard can still complete. data is not kept beyond the call unless the
// chunk's rows are (splitChunk copies nothing: pass a buffer the caller
// does not reuse).
func (a *assembler) add(ref wire.ChunkRef, data []byte) (outcome, error) {
	return a.addChunk(ref, "", data, func() ([]sample, *schema, error) { return splitChunk(data) })
}

// addRemote applies a chunk that agent holder of the reader holds (see
// team.go): how many samples it has and their schema, or why it is
// corrupt. Its samples' keys stay with the holder ("" here).
func (a *assembler) addRemote(ref wire.ChunkRef, holder string, rows int, sc *schema, corrupt string) (outcome, error) {
	switch {
	case holder == "":
		return outcome{}, fmt.Errorf("output %s: a remote chunk needs its holder", ref)
	case rows < 0 || rows > maxRowsPerChunk:
		return outcome{}, fmt.Errorf("output %s: %d rows: want 0..%d", ref, rows, maxRowsPerChunk)
	}
	return a.addChunk(ref, holder, nil, func() ([]sample, *schema, error) {
		if corrupt != "" {
			return nil, nil, errors.New(corrupt)
		}
		samples := make([]sample, rows)
		for i := range samples {
			samples[i].idx = i
		}
		return samples, sc, nil
	})
}

// maxRowsPerChunk bounds the rows a member may say a chunk has: a chunk
// is at most a few MiB of at least a byte a sample.
const maxRowsPerChunk = 1 << 24

func (a *assembler) addChunk(ref wire.ChunkRef, holder string, data []byte, split func() ([]sample, *schema, error)) (outcome, error) {
	var out outcome
	if ref.Epoch < 0 || ref.Epoch >= a.epochs {
		return out, fmt.Errorf("output %s: epoch %d: want 0..%d", ref, ref.Epoch, a.epochs-1)
	}
	if ref.Shard < 0 || ref.Shard >= a.shards {
		return out, fmt.Errorf("output %s: shard %d: want 0..%d", ref, ref.Shard, a.shards-1)
	}
	var ep *epochState
	if ref.Epoch >= a.finished {
		ep = a.epoch(ref.Epoch)
	}
	if ep == nil || ep.complete.has(ref.Shard) {
		out.duplicate = true
		return out, nil
	}
	sh := ep.shard(ref.Shard)

	if ref.Chunk < 0 {
		return out, fmt.Errorf("output %s: a shard end goes through end", ref)
	} else {
		if h := sh.held[ref.Chunk]; h != nil || sh.delivered.has(ref.Chunk) {
			out.duplicate = true // a copy of a chunk held or handed out
			out.heldThere = h != nil && h.holder == holder
			return out, nil
		}
		h := &heldChunk{ref: ref, handed: sh.skip[ref.Chunk], holder: holder}
		delete(sh.skip, ref.Chunk)
		samples, sc, err := split()
		switch {
		case err != nil:
			out.failed = append(out.failed, wire.FailedSample{Key: ref.String(), Reason: "corrupt chunk: " + err.Error(), Epoch: ref.Epoch})
		case len(samples) == 0:
		case a.schema != nil && !a.schema.equal(sc):
			reason := fmt.Sprintf("chunk %s has tensors %s, the job's first chunk %s: cannot stack", ref, sc, a.schema)
			for _, s := range samples[min(h.handed, len(samples)):] {
				key := s.key
				if key == "" { // a member holds it: name the row
					key = fmt.Sprintf("%s row %d", ref, s.idx)
				}
				out.failed = append(out.failed, wire.FailedSample{Key: key, Reason: reason, Epoch: ref.Epoch})
			}
		default:
			if a.schema == nil {
				a.schema = sc
			}
			h.rows = len(samples)
			sh.samples += len(samples)
			samples = samples[min(h.handed, len(samples)):]
			for i := range samples {
				samples[i].src = h
			}
			if holder == "" { // a member counts its own
				out.arrived = len(samples)
			}
			pending := append(ep.pending[holder], samples...)
			a.pending += len(samples)
			for len(pending) >= a.batchSize {
				out.batches = append(out.batches, stack(ref.Epoch, a.schema, pending[:a.batchSize]))
				// Copy the rest so the batched samples' payloads can be collected.
				pending = append([]sample(nil), pending[a.batchSize:]...)
				a.pending -= a.batchSize
			}
			ep.pending[holder] = pending
		}
		if h.handed >= h.rows {
			// Nothing (more) to hand out: delivered as it arrives.
			sh.delivered.add(ref.Chunk)
			a.version++
		} else {
			if holder == "" {
				h.bytes, h.data = len(data), data
				a.heldBytes += int64(h.bytes)
			}
			sh.held[ref.Chunk] = h
		}
	}

	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// end applies a shard's end: how many chunks it has, and its failed samples.
func (a *assembler) end(ref wire.ChunkRef, end wire.ShardEnd) (outcome, error) {
	var out outcome
	ep, sh, dup, err := a.shardOf(ref)
	if err != nil || dup {
		out.duplicate = dup
		return out, err
	}
	if sh.end >= 0 {
		out.duplicate = true
		return out, nil
	}
	if end.Chunks < 0 {
		return out, fmt.Errorf("output %s: shard end: chunks %d: want >= 0", ref, end.Chunks)
	}
	sh.end = end.Chunks
	a.version++
	for _, f := range end.Failed {
		f.Epoch = ref.Epoch
		out.failed = append(out.failed, f)
	}
	if end.FailedOmitted > 0 {
		out.failed = append(out.failed, wire.FailedSample{Key: ref.String(), Epoch: ref.Epoch,
			Reason: fmt.Sprintf("%d more failed samples, not listed", end.FailedOmitted)})
		out.omitted = end.FailedOmitted
	}
	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// fail ends a shard that failed for good: the chunks it has so far (a
// prefix, as every send starts at chunk 0) are all it will have, and the
// rest of its samples are reported failed under the shard's key.
func (a *assembler) fail(ref wire.ChunkRef, key, reason string) (outcome, error) {
	var out outcome
	ep, sh, dup, err := a.shardOf(ref)
	if err != nil || dup || sh.end >= 0 {
		out.duplicate = dup || (err == nil && sh.end >= 0)
		return out, err
	}
	n := 0
	for sh.delivered.has(n) || sh.held[n] != nil {
		n++
	}
	sh.end = n
	a.version++
	// How many samples the shard had is not known (its object may be
	// gone): say how many came.
	out.failed = append(out.failed, wire.FailedSample{Key: key, Epoch: ref.Epoch,
		Reason: fmt.Sprintf("shard failed for good after %d chunks (%d samples of it came, how many more it had is not known): %s", n, sh.samples, reason)})
	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// shardOf checks ref and returns its epoch's and shard's state; dup says
// the shard is complete already.
func (a *assembler) shardOf(ref wire.ChunkRef) (*epochState, *shardState, bool, error) {
	if ref.Epoch < 0 || ref.Epoch >= a.epochs {
		return nil, nil, false, fmt.Errorf("output %s: epoch %d: want 0..%d", ref, ref.Epoch, a.epochs-1)
	}
	if ref.Shard < 0 || ref.Shard >= a.shards {
		return nil, nil, false, fmt.Errorf("output %s: shard %d: want 0..%d", ref, ref.Shard, a.shards-1)
	}
	if ref.Epoch < a.finished {
		return nil, nil, true, nil
	}
	ep := a.epoch(ref.Epoch)
	if ep.complete.has(ref.Shard) {
		return nil, nil, true, nil
	}
	return ep, ep.shard(ref.Shard), false, nil
}

// shardComplete reports whether every row of shard s of epoch e was handed
// out (its end seen).
func (a *assembler) shardComplete(e, s int) bool {
	if e < a.finished {
		return true
	}
	ep := a.open[e]
	return ep != nil && ep.complete.has(s)
}

// arrived notes a shard whose every chunk may now be here, cuts the epoch
// once all are, and completes the shard if all was handed out.
func (a *assembler) arrived(e, s int, ep *epochState, sh *shardState, out *outcome) {
	if !sh.arrivedAll && sh.hasAll(true) {
		sh.arrivedAll = true
		ep.arrived++
		if ep.arrived == a.shards {
			// Each holder's partial batch, this agent's first.
			for _, h := range slices.Sorted(maps.Keys(ep.pending)) {
				if p := ep.pending[h]; len(p) > 0 {
					out.batches = append(out.batches, stack(e, a.schema, p))
					a.pending -= len(p)
				}
			}
			clear(ep.pending)
			ep.cut = true
			out.cut = append(out.cut, e)
		}
	}
	out.finished = a.checkShard(e, s)
}

// checkShard marks shard s of epoch e complete if every chunk of it was
// handed out and its end seen, and returns the epochs that finished.
func (a *assembler) checkShard(e, s int) []int {
	ep := a.open[e]
	sh := ep.shards[s]
	if sh == nil || !sh.hasAll(false) {
		return nil
	}
	delete(ep.shards, s)
	ep.complete.add(s)
	ep.nComplete++
	a.version++
	a.completed = append(a.completed, shardRef{e, s})
	if ep.nComplete < a.shards {
		return nil
	}
	a.compact()
	return []int{e}
}

// compact folds leading finished epochs into the count.
func (a *assembler) compact() {
	for {
		ep := a.open[a.finished]
		if ep == nil || ep.nComplete < a.shards {
			return
		}
		delete(a.open, a.finished)
		a.finished++
	}
}

// handOut records that batch b went to the trainer and returns the epochs
// it finished.
func (a *assembler) handOut(b readyBatch) []int {
	var finished []int
	for _, f := range b.from {
		h := f.c
		h.handed += f.n
		a.version++
		if h.handed < h.rows {
			continue
		}
		ep := a.open[h.ref.Epoch]
		sh := ep.shards[h.ref.Shard]
		delete(sh.held, h.ref.Chunk)
		a.heldBytes -= int64(h.bytes)
		sh.delivered.add(h.ref.Chunk)
		finished = append(finished, a.checkShard(h.ref.Epoch, h.ref.Shard)...)
	}
	return finished
}

// takeCompleted returns the shards completed since the last call: their
// tasks may be settled once the current position is written.
func (a *assembler) takeCompleted() []shardRef {
	c := a.completed
	a.completed = nil
	return c
}
