package traineragent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/wire"
)

// member is a reader's side on an agent of its team that does not plan
// (team.go): it tells the planner each chunk it receives and keeps the
// bytes, asks it for its ranks' parts and cuts them, and settles the
// tasks it holds once the planner's position has their shards complete.
type member struct {
	nc       *nats.Conn
	job      wire.Job
	reader   string
	name     string
	ranks    []int
	world    int
	dropLast bool
	log      *slog.Logger
	settle   func(epoch, shard int)
	arrived  func(samples int) // counts the samples of a chunk it keeps

	mu      sync.Mutex
	queue   []chunkNote   // notes not yet told, in order (keepNotes takes from its head)
	again   bool          // tell the planner everything again (it restarted)
	kick    chan struct{} // wakes keepNotes
	planner string        // the planner's run that last answered ("" none)
	joined  bool
	want    bool
	store   map[wire.ChunkRef]*storedChunk
	bytes   int64
	ends    map[shardRef]chunkNote  // shard ends and failures told, to tell a new planner run again
	held    map[shardRef]bool       // shards it received output of, not settled
	cursor  map[shardRef]sendCursor // per shard, where its send's next chunk starts (for chunks that do not say)
}

// storedChunk is a chunk a member holds: what it told the planner, the
// bytes, how many of its rows it has cut into parts, and whether its
// shard is settled (every row handed out: the rest went to other agents'
// ranks, or to parts of this agent's ranks it has not cut yet).
type storedChunk struct {
	note    chunkNote
	data    []byte
	cut     int
	settled bool
}

func newMember(nc *nats.Conn, job wire.Job, reader, name string, ranks []int, world int, dropLast bool, log *slog.Logger) *member {
	return &member{nc: nc, job: job, reader: reader, name: name, ranks: ranks, world: world, dropLast: dropLast,
		log: log.With("team", "member"), settle: func(int, int) {}, arrived: func(int) {},
		store: map[wire.ChunkRef]*storedChunk{}, ends: map[shardRef]chunkNote{}, held: map[shardRef]bool{}, cursor: map[shardRef]sendCursor{},
		kick: make(chan struct{}, 1)}
}

// ask sends a request to the planner and reads its reply; a reply from
// another run of the planner than the last makes the member join again.
func (m *member) ask(ctx context.Context, op string, v any, timeout time.Duration) (teamReply, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return teamReply{}, fmt.Errorf("encoding a %s request: %w", op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := m.nc.RequestWithContext(ctx, wire.TeamSubject(m.job.Spec.ID, m.reader, op), data)
	if err != nil {
		return teamReply{}, fmt.Errorf("asking reader %s's planner (%s): %w", m.reader, op, err)
	}
	var r teamReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return teamReply{}, fmt.Errorf("reading the planner's %s reply: %w", op, err)
	}
	m.mu.Lock()
	if r.Planner != m.planner || r.Status == statusNotMember {
		m.joined = false
	}
	m.mu.Unlock()
	return r, nil
}

// askUntil repeats a request until the planner answers it (with a
// retry between tries) or ctx ends, joining first when needed.
func (m *member) askUntil(ctx context.Context, op string, v any, timeout time.Duration) (teamReply, error) {
	warned := false
	for {
		err := m.join(ctx)
		var r teamReply
		if err == nil {
			r, err = m.ask(ctx, op, v, timeout)
		}
		if err == nil && r.Status != statusNotMember {
			return r, nil
		}
		if ctx.Err() != nil {
			return teamReply{}, ctx.Err()
		}
		if !warned {
			m.log.Warn("the reader's planner does not answer yet; retrying", "op", op, "err", err)
			warned = true
		}
		if err := sleepCtx(ctx, teamRetry); err != nil {
			return teamReply{}, err
		}
	}
}

// join joins the planner's team if this member has not (or the planner
// restarted), and then tells it again every chunk, end and failure it
// holds.
func (m *member) join(ctx context.Context) error {
	m.mu.Lock()
	joined := m.joined
	m.mu.Unlock()
	if joined {
		return nil
	}
	// A short wait: before the planner runs, another subscriber (a `nats
	// sub`) would hold the request until its timeout.
	r, err := m.ask(ctx, opJoin, joinRequest{Agent: m.name, Ranks: m.ranks, World: m.world, DropLast: m.dropLast}, time.Second)
	if err != nil {
		return err
	}
	if r.Status != statusOK {
		return fmt.Errorf("joining reader %s's team: %s", m.reader, r.Error)
	}
	m.mu.Lock()
	fresh := m.planner != r.Planner
	m.planner, m.joined = r.Planner, true
	if fresh {
		// A new planner run knows nothing of what this member holds:
		// keepNotes tells it all again.
		m.again = true
		m.log.Info("joined the reader's team", "planner", r.Planner, "ranks", m.ranks, "chunks_held", len(m.store))
		m.kickNotes()
	}
	m.mu.Unlock()
	return nil
}

// chunk stores chunk index of task's shard and queues its note for the
// planner (the dispatcher's sink does not wait for it). A corrupt chunk,
// or one whose rows' place in the shard is not known, is refused: its
// send fails, and the shard comes again.
func (m *member) chunk(task wire.ShardTask, index int, data []byte) error {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: index}
	samples, sc, first, err := splitChunkAt(data)
	if err != nil {
		return fmt.Errorf("output %s: corrupt chunk: %w", ref, err)
	}
	k := shardRef{task.Epoch, task.Shard}
	m.mu.Lock()
	defer m.mu.Unlock()
	if first < 0 {
		c, ok := m.cursor[k]
		switch {
		case index == 0:
			first = 0
		case ok && c.next == index:
			first = c.row
		default:
			return fmt.Errorf("output %s: where its rows fall in the shard is not known: it does not say, and chunk %d of its send did not come", ref, index-1)
		}
	}
	m.cursor[k] = sendCursor{next: index + 1, row: first + len(samples)}
	n := chunkNote{Epoch: task.Epoch, Shard: task.Shard, Chunk: index, First: &first, Rows: len(samples), Schema: noteOf(sc)}
	m.held[k] = true
	if c := m.store[ref]; c != nil {
		if c.note.firstRow() == first && c.note.Rows == n.Rows {
			return nil // a copy: the planner is told of the first
		}
		// The same index with other rows: a retry chunked differently
		// (another function version). Stored under an index no function
		// sends, unless a copy of it is stored already; the planner takes
		// the rows it lacks.
		alt := altChunks
		for r, c := range m.store {
			switch {
			case r.Epoch != ref.Epoch || r.Shard != ref.Shard || r.Chunk < altChunks:
			case c.note.firstRow() == first && c.note.Rows == n.Rows:
				return nil
			default:
				alt = max(alt, r.Chunk+1)
			}
		}
		if alt >= maxChunksPerShard {
			return fmt.Errorf("output %s: too many chunks of the shard chunked differently", ref)
		}
		ref.Chunk, n.Chunk = alt, alt
	}
	m.store[ref] = &storedChunk{note: n, data: data}
	m.bytes += int64(len(data))
	m.queue = append(m.queue, n)
	m.kickNotes()
	return nil
}

// altChunks is the first chunk index a member gives a chunk of a retry
// chunked differently whose index it holds already (functions send far
// fewer chunks a shard).
const altChunks = maxChunksPerShard / 2

// end queues task's shard end, or (end nil) that it failed for good.
func (m *member) end(task wire.ShardTask, end *wire.ShardEnd, reason string) {
	n := chunkNote{Epoch: task.Epoch, Shard: task.Shard, Chunk: -1, End: end, Reason: reason, Key: task.Key}
	k := shardRef{task.Epoch, task.Shard}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held[k] = true
	m.ends[k] = n
	m.queue = append(m.queue, n)
	m.kickNotes()
}

// kickNotes wakes keepNotes; m.mu must be held.
func (m *member) kickNotes() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// maxNotes bounds the notes of one request (a chunk's note is about 200
// bytes: well within a NATS message).
const maxNotes = 512

// keepNotes tells the planner the queued notes until ctx ends: all that
// queued while the last request was on its way go in the next, so a busy
// member asks about once per round trip, not once per chunk.
func (m *member) keepNotes(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		for {
			m.mu.Lock()
			if m.again {
				// Every queued note is of a chunk stored or an end kept:
				// the queue becomes all of them.
				m.queue, m.again = m.queue[:0:0], false
				for _, c := range m.store {
					m.queue = append(m.queue, c.note)
				}
				for _, n := range m.ends {
					m.queue = append(m.queue, n)
				}
			}
			batch := m.queue[:min(len(m.queue), maxNotes)]
			m.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			r, err := m.askUntil(ctx, opNotes, notesRequest{Agent: m.name, Notes: batch}, 5*time.Second)
			if err != nil {
				return // the agent stops
			}
			m.told(batch, r)
		}
	}
}

// told applies the planner's answer to a batch of notes, the queue's
// head: copies and refused chunks are dropped, the rest counted.
func (m *member) told(batch []chunkNote, r teamReply) {
	m.mu.Lock()
	m.queue = m.queue[len(batch):]
	m.want = r.Want
	m.mu.Unlock()
	if r.Status != statusOK {
		m.log.Warn("the planner refused notes", "notes", len(batch), "err", r.Error)
	}
	for i, reason := range r.Refused {
		if i >= 0 && i < len(batch) {
			m.log.Warn("the planner refused a note", "epoch", batch[i].Epoch, "shard", batch[i].Shard, "chunk", batch[i].Chunk, "err", reason)
		}
	}
	rows := 0
	for i, n := range batch {
		ref := wire.ChunkRef{Job: m.job.Spec.ID, Epoch: n.Epoch, Shard: n.Shard, Chunk: n.Chunk}
		_, refused := r.Refused[i]
		switch {
		case n.Chunk < 0:
		case r.Status != statusOK || refused || slices.Contains(r.Duplicates, i):
			m.drop(ref)
		default:
			rows += n.Rows
		}
	}
	m.arrived(rows)
}

func (m *member) drop(ref wire.ChunkRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.store[ref]; c != nil {
		m.bytes -= int64(len(c.data))
		delete(m.store, ref)
	}
}

// statusEvery is how often a member asks the planner which of its shards
// are settled and whether to take more tasks.
const statusEvery = 100 * time.Millisecond

// keepStatus asks the planner for its status every statusEvery until ctx
// ends: it settles the tasks of shards the planner's position has
// complete and drops their chunks.
func (m *member) keepStatus(ctx context.Context) {
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		m.mu.Lock()
		held := make([][2]int, 0, len(m.held))
		for k := range m.held {
			held = append(held, [2]int{k.epoch, k.shard})
		}
		m.mu.Unlock()
		slices.SortFunc(held, func(x, y [2]int) int { return x[0]*1<<20 + x[1] - y[0]*1<<20 - y[1] })
		if err := m.join(ctx); err == nil {
			if r, err := m.ask(ctx, opStatus, statusRequest{Agent: m.name, Held: held}, 5*time.Second); err == nil && r.Status == statusOK {
				m.settled(r)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *member) settled(r teamReply) {
	m.mu.Lock()
	m.want = r.Want
	for _, c := range r.Complete {
		k := shardRef{c[0], c[1]}
		delete(m.held, k)
		delete(m.ends, k)
		delete(m.cursor, k)
		for ref, sc := range m.store {
			if ref.Epoch == k.epoch && ref.Shard == k.shard {
				sc.settled = true
			}
		}
	}
	m.mu.Unlock()
	for _, c := range r.Complete {
		m.settle(c[0], c[1])
	}
}

// dropSettled drops the chunks of settled shards of epochs before e:
// every rank of this member is past them, so no part will need them.
func (m *member) dropSettled(e int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref, c := range m.store {
		if c.settled && ref.Epoch < e {
			m.bytes -= int64(len(c.data))
			delete(m.store, ref)
		}
	}
}

// settleAll settles every task the member holds output of: every step
// of every epoch was recorded.
func (m *member) settleAll() {
	m.mu.Lock()
	var done [][2]int
	for k := range m.held {
		done = append(done, [2]int{k.epoch, k.shard})
	}
	m.mu.Unlock()
	m.settled(teamReply{Complete: done})
}

// room says whether the agent should take another task: the planner wants
// this member's rows and its chunks fit the job's output buffer.
// intakeRoom says whether a chunk may be taken in (buffer.go): the chunks
// stored are below buffer, or the planner wants this member's rows.
func (m *member) intakeRoom(buffer int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return buffer <= 0 || m.bytes < buffer || m.want
}

func (m *member) room(buffer int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.want && (buffer <= 0 || m.bytes < buffer)
}

// part asks the planner for rank req.rank's next part until it has one,
// and cuts it.
func (m *member) part(ctx context.Context, req rankRequest, prod func() *producer) (rankPart, error) {
	for {
		r, err := m.askUntil(ctx, opPart, partRequest{Agent: m.name, Rank: req.rank, World: req.world, DropLast: req.dropLast}, partWait+5*time.Second)
		if err != nil {
			return rankPart{}, err
		}
		switch {
		case r.Status == statusWait:
			continue
		case r.Status != statusOK:
			return rankPart{}, errOf(r.Status, r.Error)
		case r.Part == nil:
			return rankPart{}, fmt.Errorf("%w: the planner's part has no rows", ErrStopped)
		}
		return m.cut(ctx, *r.Part, prod)
	}
}

// cut makes the batch of a part the planner gave.
func (m *member) cut(ctx context.Context, n partNote, prod func() *producer) (rankPart, error) {
	p := rankPart{Batch: Batch{Epoch: n.Epoch, Keys: make([]string, n.Rows)}, Step: n.Step, Last: n.Last, EpochFailed: n.Failed, World: n.World, Position: n.Position}
	for _, s := range n.Spans {
		row := -1
		if s.Row != nil && *s.Row >= 0 {
			row = *s.Row
		}
		p.Spans = append(p.Spans, rowSpan{ref: wire.ChunkRef{Job: m.job.Spec.ID, Epoch: n.Epoch, Shard: s.Shard, Chunk: s.Chunk}, lo: s.Lo, n: s.N, row: row})
	}
	var sc *schema
	if n.Schema != nil {
		sc, _ = n.Schema.schema()
	}
	b, err := cutRows(ctx, n.Epoch, p.Keys, p.Spans, sc, func(ctx context.Context, sp rowSpan) ([]sample, *schema, error) {
		m.mu.Lock()
		c := m.store[sp.ref]
		m.mu.Unlock()
		if c != nil {
			return spanRows(sp, c.data)
		}
		return prod().rows(ctx, sp)
	})
	if err != nil {
		err = fmt.Errorf("%w: cutting a part of step %d: %w", ErrStopped, n.Step, err)
		return rankPart{Batch: Batch{Keys: p.Keys}, Spans: p.Spans}, err
	}
	m.mu.Lock()
	for _, sp := range p.Spans {
		if c := m.store[sp.ref]; c != nil {
			if c.cut += sp.n; c.cut >= c.note.Rows {
				m.bytes -= int64(len(c.data))
				delete(m.store, sp.ref)
			}
		}
	}
	m.mu.Unlock()
	p.Batch, p.Spans = b, nil
	return p, nil
}

// memberPart is nextPart on a member: the planner's part for the rank,
// cut here; the wait counts as the trainer's.
func (a *Reader) memberPart(ctx context.Context, req rankRequest) (rankPart, error) {
	m := a.member
	if req.world == 0 {
		req.world = m.world
	}
	switch {
	case req.world != m.world:
		return rankPart{}, fmt.Errorf("%w: world size %d, but this agent serves ranks of a world of %d", ErrWorldMismatch, req.world, m.world)
	case !slices.Contains(m.ranks, req.rank):
		return rankPart{}, fmt.Errorf("%w: rank %d: this agent serves ranks %v", ErrWorldMismatch, req.rank, m.ranks)
	}
	a.mu.Lock()
	a.block(time.Now())
	a.mu.Unlock()
	p, err := m.part(ctx, req, func() *producer {
		// A rank may ask before the agent dispatches: wait for it.
		_ = a.waitFor(ctx, func() bool { return a.producer != nil || a.runEnded })
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.producer
	})
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unblock(now)
	if errors.Is(err, io.EOF) {
		if c := &a.ranks.counts[req.rank]; !c.ended {
			c.ended = true
			a.ranks.nEnded++
			if a.memberDone() {
				// The planner recorded every step before it told a rank
				// the end: every shard is complete. (Settled before the
				// agent sees it is done and returns what it holds.)
				m.settleAll()
			}
			a.notify()
		}
		return rankPart{}, err
	}
	if err != nil {
		if len(p.Keys) > 0 && ctx.Err() == nil {
			a.lost(p, err) // the planner counts the part as handed out
		}
		return rankPart{}, err
	}
	a.delivered(req.rank, p, now)
	past := a.job.Spec.Epochs
	for _, r := range m.ranks {
		past = min(past, a.ranks.counts[r].epoch)
	}
	go m.dropSettled(past)
	return p, nil
}

// memberDone reports whether every rank of the member got its end.
func (a *Reader) memberDone() bool {
	for _, r := range a.member.ranks {
		if !a.ranks.counts[r].ended {
			return false
		}
	}
	return true
}

// memberResume forwards a rank's resume to the planner.
func (a *Reader) memberResume(ctx context.Context, st State, world int) (ResumeResult, error) {
	r, err := a.member.askUntil(ctx, opResume, resumeRequest{Agent: a.member.name, State: st, World: world}, positionWriteTimeout+10*time.Second)
	if err != nil {
		return ResumeResult{}, err
	}
	if r.Status != statusOK || r.Resume == nil {
		return ResumeResult{}, errOf(r.Status, r.Error)
	}
	return *r.Resume, nil
}
