package assembly

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"

	"github.com/sluice-project/sluice/wire"
)

// HeldChunk is a chunk the reader received and has not handed out in full:
// its shard's task stays unsettled (the dispatcher keeps it alive) until
// the shard's last row is in a batch the trainer took.
type HeldChunk struct {
	ref    wire.ChunkRef // as the send that brought it numbered it
	first  int           // the shard row of its row 0
	Rows   int           // rows of the chunk
	take   int           // rows of it this reader hands out: those it had not received before
	Handed int           // of those, handed out
	bytes  int           // size of the chunk
	data   []byte        // the chunk, which its rows not handed out point into
	// Holder is the agent of the reader that holds the chunk's bytes
	// ("" this one; see readerstate's team.go): the reader knows only its rows' keys.
	Holder string
}

// ShardRef names one shard of one epoch: the unit a task is settled in.
type ShardRef struct{ Epoch, Shard int }

// A shard's rows are placed by their shard row (a chunk's first row plus
// its row in the chunk), never by chunk index: a retry may cut the same
// rows into other chunks (another function version), and every send
// starts at row 0.

// ShardState is a shard of an unfinished epoch that is not complete yet.
type ShardState struct {
	// Total is the rows the shard has: its end's sample count (or the rows
	// that came, should those be more), or what a failed shard got; -1
	// until known.
	Total  int
	got    Bitset       // rows received (held or handed out), those handed out before a restart included
	handed Bitset       // rows handed out, before a restart too
	Held   []*HeldChunk // in arrival order
	// cursor is, per holder, where its current send's next chunk starts,
	// for chunks that do not say (older functions).
	cursor map[string]SendCursor
	// legacyFull and legacyRows are what a position of format 1 recorded
	// as handed out by chunk index: chunks in full, and leading rows of
	// others; applied when that chunk comes (format 1 assumed the same
	// chunks every time).
	legacyFull Bitset
	legacyRows map[int]int
	arrivedAll bool // every row is received
	samples    int  // rows that arrived in this agent's run
}

// SendCursor is the next chunk of a send and its first shard row, and the
// first chunk of the send this assembler saw (a rewind replaces the
// assembler while sends go on).
type SendCursor struct{ from, Next, Row int }

func newShardState() *ShardState {
	return &ShardState{Total: -1, cursor: map[string]SendCursor{}}
}

// arrivedEvery reports whether every row of the shard was received.
func (s *ShardState) arrivedEvery() bool {
	return s.Total >= 0 && s.got.countBelow(s.Total) == s.Total
}

// handedEvery reports whether every row of the shard was handed out.
func (s *ShardState) handedEvery() bool {
	return s.Total >= 0 && len(s.Held) == 0 && s.handed.countBelow(s.Total) == s.Total
}

// lastGot is one past the highest row received (0 if none).
func (s *ShardState) lastGot() int {
	for w := len(s.got) - 1; w >= 0; w-- {
		if s.got[w] != 0 {
			return w*64 + 64 - bits.LeadingZeros64(s.got[w])
		}
	}
	return 0
}

// empty reports whether nothing of the shard was received, handed out or announced.
func (s *ShardState) empty() bool {
	return s.Total < 0 && len(s.Held) == 0 && s.lastGot() == 0 && len(s.legacyRows) == 0 && s.legacyFull.countBelow(len(s.legacyFull)*64) == 0
}

// EpochState is an epoch not finished yet (or finished out of order).
type EpochState struct {
	Complete  Bitset // shards whose every chunk was handed out, shard end seen
	nComplete int
	Replayed  Bitset              // shards asked to be re-produced (a resume, or owed: see position)
	owed      Bitset              // shards a lagging reader did not keep (see lag.go)
	Shards    map[int]*ShardState // shards with anything recorded, not complete
	arrived   int                 // shards complete or arrivedAll
	pending   map[string][]Sample // not yet a full batch, per holder
	Cut       bool                // every shard arrived; the last batches are cut
	// A mixed job's (mix.go): per holder, rows not yet in its batch
	// stream; per source, its shards arrived (complete or every row
	// received).
	staged     map[string]*mixQueue
	srcArrived []int
	// handedBySrc are the rows of each source handed out, recorded in the
	// position: a stream formed after a restore goes on from them.
	handedBySrc []int
}

// Assembler turns a reader's chunks into batches and keeps its position:
// which samples were handed out. It dedupes by ChunkRef, tracks shard and
// epoch completion, cuts batches per epoch and collects the shards that
// completed, whose tasks may be settled once the position is recorded. It
// does no I/O and no locking; the reader serialises calls.
//
// Two notions of done: an epoch is cut once every chunk of it arrived (its
// last, partial batch is then cut), and finished once every row of it was
// handed out. Only what was handed out is part of the position.
type Assembler struct {
	job       string
	epochs    int
	Shards    int
	batchSize int
	Schema    *Schema
	mix       *mixer              // a mixed job's sources (nil: one dataset)
	Finished  int                 // epochs 0..finished-1 are finished
	Open      map[int]*EpochState // epochs >= finished with anything recorded or held
	Pending   int                 // samples in partial batches over all open epochs
	HeldBytes int64               // bytes of the chunks held
	// Completed are shards that completed since the last TakeCompleted:
	// their tasks may be settled once the position is written.
	Completed []ShardRef
	// Version counts changes to the position.
	Version uint64
}

// NewAssembler is the assembler of a reader of job, before its position is
// restored.
func NewAssembler(job wire.Job) *Assembler {
	return &Assembler{
		job:       job.Spec.ID,
		epochs:    job.Spec.Epochs,
		Shards:    len(job.Shards),
		batchSize: job.Spec.BatchSize,
		mix:       newMixer(job),
		Open:      map[int]*EpochState{},
	}
}

// Outcome is what one chunk or shard end changed.
type Outcome struct {
	Duplicate bool
	HeldThere bool // a copy of a chunk its holder told of before: it keeps it
	Arrived   int
	Failed    []wire.FailedSample
	Omitted   int // failed samples of the epoch beyond those listed (one entry in failed stands for them)
	Batches   []ReadyBatch
	Cut       []int // epochs whose last batch is in batches
	Finished  []int // epochs whose every row was handed out
}

// AllCut reports whether every chunk of every epoch arrived.
func (a *Assembler) AllCut() bool {
	for e := a.Finished; e < a.epochs; e++ {
		if ep := a.Open[e]; ep == nil || !ep.Cut {
			return false
		}
	}
	return true
}

// AllFinished reports whether every sample of every epoch was handed out.
func (a *Assembler) AllFinished() bool { return a.Finished == a.epochs }

// FinishedCount is the number of finished epochs, those finished out of order included.
func (a *Assembler) FinishedCount() int {
	n := a.Finished
	for _, ep := range a.Open {
		if ep.nComplete == a.Shards {
			n++
		}
	}
	return n
}

// Start finishes the epochs of a job without shards, which have nothing to
// wait for, and those a restored position says are complete.
func (a *Assembler) Start() []int {
	var out []int
	if a.Shards == 0 {
		for e := a.Finished; e < a.epochs; e++ {
			out = append(out, e)
		}
		a.Finished = a.epochs
		clear(a.Open)
		return out
	}
	for e := a.Finished; e < a.epochs; e++ {
		if ep := a.Open[e]; ep != nil && ep.nComplete == a.Shards {
			out = append(out, e)
		}
	}
	a.compact()
	return out
}

// Epoch is epoch e's state, opened when first asked for.
func (a *Assembler) Epoch(e int) *EpochState {
	ep := a.Open[e]
	if ep == nil {
		ep = &EpochState{Shards: map[int]*ShardState{}, pending: map[string][]Sample{}}
		if a.mix != nil {
			ep.staged, ep.srcArrived, ep.handedBySrc = map[string]*mixQueue{}, make([]int, len(a.mix.slots)), make([]int, len(a.mix.slots))
		}
		a.Open[e] = ep
	}
	return ep
}

// PendingRows counts the samples waiting in the epoch's partial batches
// (and a mixed job's, for their turn in one).
func (ep *EpochState) PendingRows() int {
	n := 0
	for _, p := range ep.pending {
		n += len(p)
	}
	for _, q := range ep.staged {
		n += q.n
	}
	return n
}

// PendingOf counts holder's samples waiting in the epoch's partial batch.
func (ep *EpochState) PendingOf(holder string) int {
	n := len(ep.pending[holder])
	if q := ep.staged[holder]; q != nil {
		n += q.n
	}
	return n
}

func (ep *EpochState) shard(s int) *ShardState {
	sh := ep.Shards[s]
	if sh == nil {
		sh = newShardState()
		ep.Shards[s] = sh
	}
	return sh
}

// Add applies one chunk of a send of this agent, in the send's order. An
// error means it was rejected and left unrecorded (it names the problem:
// a corrupt chunk, one whose place in the shard is not known); its send
// should fail, so that the shard comes again. Rows received before are
// copies, dropped; rows that cannot be stacked with the job's are
// reported failed. data is not kept beyond the call unless the chunk's
// rows are (SplitChunk copies nothing: pass a buffer the caller does not
// reuse).
func (a *Assembler) Add(ref wire.ChunkRef, data []byte) (Outcome, error) {
	return a.addAt(ref, -1, data)
}

// addAt is add of a chunk whose first shard row is first (< 0: as the
// chunk says, or after the send's previous chunk).
func (a *Assembler) addAt(ref wire.ChunkRef, first int, data []byte) (Outcome, error) {
	return a.addChunk(ref, "", first, data, func() ([]Sample, *Schema, int, error) { return SplitChunkAt(data) })
}

// AddRemote applies a chunk that agent holder of the reader holds (see
// readerstate's team.go): its first shard row (< 0: after the holder's previous chunk
// of the shard), how many samples it has and their schema, or why it is
// corrupt (refused: its rows' place is not known). Its samples' keys stay
// with the holder ("" here).
func (a *Assembler) AddRemote(ref wire.ChunkRef, holder string, first, rows int, sc *Schema, corrupt string) (Outcome, error) {
	switch {
	case holder == "":
		return Outcome{}, fmt.Errorf("output %s: a remote chunk needs its holder", ref)
	case rows < 0 || rows > MaxRowsPerChunk:
		return Outcome{}, fmt.Errorf("output %s: %d rows: want 0..%d", ref, rows, MaxRowsPerChunk)
	case first > MaxRowsPerShard:
		return Outcome{}, fmt.Errorf("output %s: first row %d: want 0..%d", ref, first, MaxRowsPerShard)
	}
	return a.addChunk(ref, holder, first, nil, func() ([]Sample, *Schema, int, error) {
		if corrupt != "" {
			return nil, nil, -1, errors.New(corrupt)
		}
		samples := make([]Sample, rows)
		for i := range samples {
			samples[i].idx = i
		}
		return samples, sc, -1, nil
	})
}

// MaxRowsPerChunk bounds the rows a member may say a chunk has: a chunk
// is at most a few MiB of at least a byte a sample.
const MaxRowsPerChunk = 1 << 24

// MaxRowsPerShard bounds a shard row (a chunk's first row plus its rows).
const MaxRowsPerShard = 1 << 26

func (a *Assembler) addChunk(ref wire.ChunkRef, holder string, first int, data []byte, split func() ([]Sample, *Schema, int, error)) (Outcome, error) {
	var out Outcome
	if ref.Chunk < 0 {
		return out, fmt.Errorf("output %s: a shard end goes through end", ref)
	}
	ep, sh, dup, err := a.shardOf(ref)
	if err != nil || dup {
		out.Duplicate = dup
		return out, err
	}
	samples, sc, said, err := split()
	if err != nil {
		return out, fmt.Errorf("output %s: corrupt chunk: %w", ref, err)
	}
	n := len(samples)
	if first < 0 {
		first = said
	}
	if first < 0 {
		c, ok := sh.cursor[holder]
		switch {
		case ref.Chunk == 0:
			first = 0
		case ok && c.Next == ref.Chunk:
			first = c.Row
		default:
			return out, fmt.Errorf("output %s: where its rows fall in the shard is not known: it does not say (a function older than metadata %q), and chunk %d of its send did not come",
				ref, wire.MetaFirst, ref.Chunk-1)
		}
	}
	if first > MaxRowsPerShard-n {
		return out, fmt.Errorf("output %s: rows %d..%d: want below %d", ref, first, first+n-1, MaxRowsPerShard)
	}
	from := ref.Chunk
	if c, ok := sh.cursor[holder]; ok && c.Next == ref.Chunk && ref.Chunk > 0 {
		from = c.from
	}
	sh.cursor[holder] = SendCursor{from: from, Next: ref.Chunk + 1, Row: first + n}
	if l, ok := sh.legacyRows[ref.Chunk]; ok || sh.legacyFull.Has(ref.Chunk) {
		// A format 1 position's rows of this chunk, handed out before.
		if !ok {
			l = n
		}
		for i := range min(l, n) {
			sh.got.Add(first + i)
			sh.handed.Add(first + i)
		}
		delete(sh.legacyRows, ref.Chunk)
		sh.legacyFull.remove(ref.Chunk)
		a.Version++
	}

	// The rows not received before; rows beyond the shard's end are a
	// contradiction, reported.
	var fresh []Sample
	beyond := 0
	for i := range samples {
		switch r := first + i; {
		case sh.Total >= 0 && r >= sh.Total:
			beyond++
			out.Failed = append(out.Failed, wire.FailedSample{Key: rowName(ref, samples[i]), Epoch: ref.Epoch,
				Reason: fmt.Sprintf("row %d of the shard, beyond the %d its end announced (its object changed, or its function is not deterministic)", r, sh.Total)})
		case !sh.got.Has(r):
			fresh = append(fresh, samples[i])
		}
	}
	if len(fresh) == 0 {
		out.Duplicate = beyond == 0 && n > 0
		for _, h := range sh.Held {
			out.HeldThere = out.HeldThere || h.Holder == holder && h.ref.Chunk == ref.Chunk && h.first == first && h.Rows == n
		}
		a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
		return out, nil
	}
	for _, smp := range fresh {
		sh.got.Add(first + smp.idx)
	}
	a.Version++
	if a.Schema != nil && !a.Schema.Equal(sc) {
		reason := fmt.Sprintf("chunk %s has tensors %s, the job's first chunk %s: cannot stack", ref, sc, a.Schema)
		for _, smp := range fresh {
			sh.handed.Add(first + smp.idx) // lost, reported: the shard can complete
			out.Failed = append(out.Failed, wire.FailedSample{Key: rowName(ref, smp), Reason: reason, Epoch: ref.Epoch})
		}
		a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
		return out, nil
	}
	if a.Schema == nil {
		a.Schema = sc
	}
	h := &HeldChunk{ref: ref, first: first, Rows: n, take: len(fresh), Holder: holder}
	sh.samples += len(fresh)
	for i := range fresh {
		fresh[i].src = h
	}
	if holder == "" { // a member counts its own
		out.Arrived = len(fresh)
		h.bytes, h.data = len(data), data
		a.HeldBytes += int64(h.bytes)
	}
	sh.Held = append(sh.Held, h)
	a.Pending += len(fresh)
	if a.mix != nil {
		a.stage(ep, holder, ref.Shard, fresh)
		a.release(ref.Epoch, ep, holder, &out)
		a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
		return out, nil
	}
	pending := append(ep.pending[holder], fresh...)
	for len(pending) >= a.batchSize {
		out.Batches = append(out.Batches, a.stack(ref.Epoch, pending[:a.batchSize]))
		// Copy the rest so the batched samples' payloads can be collected.
		pending = append([]Sample(nil), pending[a.batchSize:]...)
		a.Pending -= a.batchSize
	}
	ep.pending[holder] = pending
	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// rowName is a row's key, or where a member holds it, its chunk and row.
func rowName(ref wire.ChunkRef, s Sample) string {
	if s.Key != "" {
		return s.Key
	}
	return fmt.Sprintf("%s row %d", ref, s.idx)
}

// End applies a shard's end: how many rows it has, and its failed
// samples. sent says the end closes a send of this agent (Sink.End): if
// this assembler saw every chunk of that send, rows it announced that did
// not come never will, and are reported lost. A member's end (its chunks
// may be told later) and a rewind's are not sent.
func (a *Assembler) End(ref wire.ChunkRef, end wire.ShardEnd, sent bool) (Outcome, error) {
	var out Outcome
	if end.Chunks < 0 || end.Samples < 0 || end.Samples > MaxRowsPerShard {
		return out, fmt.Errorf("output %s: shard end: %d chunks, %d samples: want >= 0 (samples at most %d)", ref, end.Chunks, end.Samples, MaxRowsPerShard)
	}
	ep, sh, dup, err := a.shardOf(ref)
	if err != nil || dup {
		out.Duplicate = dup
		return out, err
	}
	if sh.Total >= 0 {
		out.Duplicate = true
		return out, nil
	}
	sh.Total = end.Samples
	a.Version++
	for _, f := range end.Failed {
		f.Epoch = ref.Epoch
		out.Failed = append(out.Failed, f)
	}
	if end.FailedOmitted > 0 {
		out.Failed = append(out.Failed, wire.FailedSample{Key: ref.String(), Epoch: ref.Epoch,
			Reason: fmt.Sprintf("%d more failed samples, not listed", end.FailedOmitted)})
		out.Omitted = end.FailedOmitted
	}
	if last := sh.lastGot(); last > sh.Total {
		// Rows handed out cannot be taken back: the shard has what came.
		out.Failed = append(out.Failed, wire.FailedSample{Key: ref.String(), Epoch: ref.Epoch,
			Reason: fmt.Sprintf("the shard end says %d samples, but %d rows came (its object changed, or its function is not deterministic): the rows that came are kept", end.Samples, last)})
		sh.Total = last
	}
	c, ok := sh.cursor[""]
	whole := sent && ok && c.from == 0 && c.Next == end.Chunks
	if missing := sh.Total - sh.got.countBelow(sh.Total); whole && missing > 0 {
		for r := range sh.Total {
			if !sh.got.Has(r) {
				sh.got.Add(r)
				sh.handed.Add(r)
			}
		}
		out.Failed = append(out.Failed, wire.FailedSample{Key: ref.String(), Epoch: ref.Epoch,
			Reason: fmt.Sprintf("the shard end says %d samples, %d of them never came (its function sent fewer rows than it counted)", end.Samples, missing)})
	}
	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// Fail ends a shard that failed for good: the rows it has so far are all
// it will have, and the rest of its samples are reported failed under the
// shard's key.
func (a *Assembler) Fail(ref wire.ChunkRef, key, reason string) (Outcome, error) {
	var out Outcome
	ep, sh, dup, err := a.shardOf(ref)
	if err != nil || dup || sh.Total >= 0 {
		out.Duplicate = dup || (err == nil && sh.Total >= 0)
		return out, err
	}
	sh.Total = sh.lastGot()
	for r := range sh.Total {
		if !sh.got.Has(r) { // lost with the shard
			sh.got.Add(r)
			sh.handed.Add(r)
		}
	}
	a.Version++
	// How many samples the shard had is not known (its object may be
	// gone): say how many came.
	out.Failed = append(out.Failed, wire.FailedSample{Key: key, Epoch: ref.Epoch,
		Reason: fmt.Sprintf("shard failed for good after %d rows (%d samples of it came in this run, how many more it had is not known): %s", sh.Total, sh.samples, reason)})
	a.arrived(ref.Epoch, ref.Shard, ep, sh, &out)
	return out, nil
}

// shardOf checks ref and returns its epoch's and shard's state; dup says
// the shard is complete already.
func (a *Assembler) shardOf(ref wire.ChunkRef) (*EpochState, *ShardState, bool, error) {
	if ref.Epoch < 0 || ref.Epoch >= a.epochs {
		return nil, nil, false, fmt.Errorf("output %s: epoch %d: want 0..%d", ref, ref.Epoch, a.epochs-1)
	}
	if ref.Shard < 0 || ref.Shard >= a.Shards {
		return nil, nil, false, fmt.Errorf("output %s: shard %d: want 0..%d", ref, ref.Shard, a.Shards-1)
	}
	if ref.Epoch < a.Finished {
		return nil, nil, true, nil
	}
	ep := a.Epoch(ref.Epoch)
	if ep.Complete.Has(ref.Shard) {
		return nil, nil, true, nil
	}
	return ep, ep.shard(ref.Shard), false, nil
}

// ShardComplete reports whether every row of shard s of epoch e was handed
// out (its end seen).
func (a *Assembler) ShardComplete(e, s int) bool {
	if e < a.Finished {
		return true
	}
	ep := a.Open[e]
	return ep != nil && ep.Complete.Has(s)
}

// arrived notes a shard whose every chunk may now be here, cuts the epoch
// once all are, and completes the shard if all was handed out.
func (a *Assembler) arrived(e, s int, ep *EpochState, sh *ShardState, out *Outcome) {
	if !sh.arrivedAll && sh.arrivedEvery() {
		sh.arrivedAll = true
		ep.arrived++
		a.sourceArrived(e, ep, s, out) // every source's rows are released at the cut
		if ep.arrived == a.Shards {
			// Each holder's partial batch, this agent's first.
			for _, h := range slices.Sorted(maps.Keys(ep.pending)) {
				if p := ep.pending[h]; len(p) > 0 {
					out.Batches = append(out.Batches, a.stack(e, p))
					a.Pending -= len(p)
				}
			}
			clear(ep.pending)
			ep.Cut = true
			out.Cut = append(out.Cut, e)
		}
	}
	out.Finished = a.checkShard(e, s)
}

// checkShard marks shard s of epoch e complete if every chunk of it was
// handed out and its end seen, and returns the epochs that finished.
func (a *Assembler) checkShard(e, s int) []int {
	ep := a.Open[e]
	sh := ep.Shards[s]
	if sh == nil || !sh.handedEvery() {
		return nil
	}
	delete(ep.Shards, s)
	ep.Complete.Add(s)
	ep.nComplete++
	a.Version++
	a.Completed = append(a.Completed, ShardRef{e, s})
	if ep.nComplete < a.Shards {
		return nil
	}
	a.compact()
	return []int{e}
}

// compact folds leading finished epochs into the count.
func (a *Assembler) compact() {
	for {
		ep := a.Open[a.Finished]
		if ep == nil || ep.nComplete < a.Shards {
			return
		}
		delete(a.Open, a.Finished)
		a.Finished++
	}
}

// HandOut records that batch b went to the trainer and returns the epochs
// it finished.
func (a *Assembler) HandOut(b ReadyBatch) []int {
	var finished []int
	for _, f := range b.From {
		h := f.C
		h.Handed += f.N
		a.Version++
		ep := a.Open[h.ref.Epoch]
		if ep == nil || ep.Shards[h.ref.Shard] == nil {
			continue // its shard is complete: nothing of it can be handed out (a bug)
		}
		sh := ep.Shards[h.ref.Shard]
		for i := range f.N {
			sh.handed.Add(h.first + f.Lo + i)
		}
		if a.mix != nil {
			ep.handedBySrc[a.mix.sourceOf(h.ref.Shard)] += f.N
		}
		if h.Handed < h.take {
			continue
		}
		if i := slices.Index(sh.Held, h); i >= 0 {
			sh.Held = slices.Delete(sh.Held, i, i+1)
			a.HeldBytes -= int64(h.bytes)
		}
		finished = append(finished, a.checkShard(h.ref.Epoch, h.ref.Shard)...)
	}
	return finished
}

// TakeCompleted returns the shards completed since the last call: their
// tasks may be settled once the current position is written.
func (a *Assembler) TakeCompleted() []ShardRef {
	c := a.Completed
	a.Completed = nil
	return c
}
