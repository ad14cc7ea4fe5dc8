package traineragent

import (
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-project/sluice/wire"
)

// heldChunk is a chunk the agent received and has not handed out in full:
// its message stays unacked (and is kept alive with progress pings) until
// its last row is in a batch the trainer took.
type heldChunk struct {
	ref    wire.ChunkRef
	msg    jetstream.Msg // nil in tests of the assembler alone
	rows   int           // rows of the chunk, those handed out before a restart included
	handed int           // leading rows handed out
	bytes  int           // size of the message
}

// shardState is a shard of an unfinished epoch that is not complete yet.
type shardState struct {
	end        int    // chunks the shard end announced; -1 until it was seen
	delivered  bitset // chunks whose every row was handed out (before a restart too)
	held       map[int]*heldChunk
	skip       map[int]int // leading rows of a chunk handed out before a restart, until it comes again
	arrivedAll bool        // every chunk is delivered or held
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
	replayed  bitset              // shards a resume asked to be re-produced (see position)
	owed      bitset              // shards a lagging reader shed messages of (see lag.go)
	shards    map[int]*shardState // shards with anything recorded, not complete
	arrived   int                 // shards complete or arrivedAll
	pending   []sample            // not yet a full batch
	cut       bool                // every shard arrived; the last batch is cut
}

// assembler turns output messages into batches and keeps the reader's
// position: which samples were handed out. It dedupes by ChunkRef, tracks
// shard and epoch completion, cuts batches per epoch and collects the
// messages that may be acked once the position is recorded. It does no I/O
// and no locking; the agent serialises calls.
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
	heldBytes int64               // message bytes of the chunks held
	// acks are messages to ack once the position is written.
	acks []jetstream.Msg
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

// outcome is what one output message changed.
type outcome struct {
	duplicate bool
	arrived   int
	failed    []wire.FailedSample
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
		ep = &epochState{shards: map[int]*shardState{}}
		a.open[e] = ep
	}
	return ep
}

func (ep *epochState) shard(s int) *shardState {
	sh := ep.shards[s]
	if sh == nil {
		sh = newShardState()
		ep.shards[s] = sh
	}
	return sh
}

// add applies one output message, msg its JetStream message (kept to ack
// later). An error means the message was rejected and left unrecorded (it
// names the problem); a corrupt chunk is recorded as delivered and its loss
// reported as a failed sample instead, so that its shard can still complete.
func (a *assembler) add(ref wire.ChunkRef, data []byte, msg jetstream.Msg) (outcome, error) {
	var out outcome
	if ref.Epoch < 0 || ref.Epoch >= a.epochs {
		return out, fmt.Errorf("output %s: epoch %d: want 0..%d", ref.MsgID(), ref.Epoch, a.epochs-1)
	}
	if ref.Shard < 0 || ref.Shard >= a.shards {
		return out, fmt.Errorf("output %s: shard %d: want 0..%d", ref.MsgID(), ref.Shard, a.shards-1)
	}
	var ep *epochState
	if ref.Epoch >= a.finished {
		ep = a.epoch(ref.Epoch)
	}
	if ep == nil || ep.complete.has(ref.Shard) {
		out.duplicate = true
		a.ackLater(msg)
		return out, nil
	}
	sh := ep.shard(ref.Shard)

	if ref.Chunk < 0 {
		if sh.end >= 0 {
			out.duplicate = true
			a.ackLater(msg)
			return out, nil
		}
		var end wire.ShardEnd
		if err := json.Unmarshal(data, &end); err != nil {
			return out, fmt.Errorf("output %s: shard end: %w", ref.MsgID(), err)
		}
		if end.Chunks < 0 {
			return out, fmt.Errorf("output %s: shard end: chunks %d: want >= 0", ref.MsgID(), end.Chunks)
		}
		sh.end = end.Chunks
		a.version++
		a.ackLater(msg)
		for _, f := range end.Failed {
			f.Epoch = ref.Epoch
			out.failed = append(out.failed, f)
		}
	} else {
		if h := sh.held[ref.Chunk]; h != nil || sh.delivered.has(ref.Chunk) {
			out.duplicate = true
			if h == nil || !sameMessage(h.msg, msg) {
				// A copy of a chunk held or handed out: ack it once the
				// position is written. The copy the server redelivered
				// for the held message itself must stay unacked.
				a.ackLater(msg)
			}
			return out, nil
		}
		h := &heldChunk{ref: ref, msg: msg, handed: sh.skip[ref.Chunk]}
		delete(sh.skip, ref.Chunk)
		samples, sc, err := splitChunk(data)
		switch {
		case err != nil:
			out.failed = append(out.failed, wire.FailedSample{Key: ref.MsgID(), Reason: "corrupt chunk: " + err.Error(), Epoch: ref.Epoch})
		case len(samples) == 0:
		case a.schema != nil && !a.schema.equal(sc):
			reason := fmt.Sprintf("chunk %s has tensors %s, the job's first chunk %s: cannot stack", ref.MsgID(), sc, a.schema)
			for _, s := range samples[min(h.handed, len(samples)):] {
				out.failed = append(out.failed, wire.FailedSample{Key: s.key, Reason: reason, Epoch: ref.Epoch})
			}
		default:
			if a.schema == nil {
				a.schema = sc
			}
			h.rows = len(samples)
			samples = samples[min(h.handed, len(samples)):]
			for i := range samples {
				samples[i].src = h
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
		if h.handed >= h.rows {
			// Nothing (more) to hand out: delivered as it arrives.
			sh.delivered.add(ref.Chunk)
			a.version++
			a.ackLater(msg)
		} else {
			h.bytes = len(data)
			a.heldBytes += int64(h.bytes)
			sh.held[ref.Chunk] = h
		}
	}

	if !sh.arrivedAll && sh.hasAll(true) {
		sh.arrivedAll = true
		ep.arrived++
		if ep.arrived == a.shards {
			if len(ep.pending) > 0 {
				out.batches = append(out.batches, stack(ref.Epoch, a.schema, ep.pending))
				a.pending -= len(ep.pending)
				ep.pending = nil
			}
			ep.cut = true
			out.cut = append(out.cut, ref.Epoch)
		}
	}
	out.finished = a.checkShard(ref.Epoch, ref.Shard)
	return out, nil
}

// sameMessage reports whether two deliveries are of one stream message.
func sameMessage(a, b jetstream.Msg) bool {
	if a == nil || b == nil {
		return false
	}
	ma, err := a.Metadata()
	if err != nil {
		return false
	}
	mb, err := b.Metadata()
	if err != nil {
		return false
	}
	return ma.Sequence.Stream == mb.Sequence.Stream
}

func (a *assembler) ackLater(msg jetstream.Msg) {
	if msg != nil {
		a.acks = append(a.acks, msg)
	}
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
		a.ackLater(h.msg)
		finished = append(finished, a.checkShard(h.ref.Epoch, h.ref.Shard)...)
	}
	return finished
}

// takeAcks returns the messages to ack once the current position is written.
func (a *assembler) takeAcks() []jetstream.Msg {
	acks := a.acks
	a.acks = nil
	return acks
}

// held returns the messages of chunks not handed out in full.
func (a *assembler) held() []jetstream.Msg {
	var out []jetstream.Msg
	for _, ep := range a.open {
		for _, sh := range ep.shards {
			for _, h := range sh.held {
				if h.msg != nil {
					out = append(out, h.msg)
				}
			}
		}
	}
	return out
}
