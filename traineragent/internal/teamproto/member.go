package teamproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/ratelog"
	"github.com/sluice-project/sluice/internal/retry"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// Member is a reader's side on an agent of its team that does not plan
// (readerstate's team.go): it tells the planner each chunk it receives and keeps the
// bytes, asks it for its ranks' parts and cuts them, and settles the
// tasks it holds once the planner's position has their shards complete.
type Member struct {
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
	auth     *Auth
	refused  prometheus.Counter // team replies refused (Metrics.teamRefused)
	// nodeRefused counts those refused for their node seal, by reason
	// (Metrics.nodeRefused).
	nodeRefused *prometheus.CounterVec
	// nonce is what its joins carry (one per run of the agent).
	nonce string
	seq   atomic.Uint64
	// runCtx ends when the agent stops: a rank's poll for a part outlives
	// the request that started it.
	runCtx  context.Context
	stopRun context.CancelFunc
	// logs bounds the log lines of refused replies.
	logs ratelog.Limiter
	// takenLogged: a join refused for its name was logged.
	takenLogged atomic.Bool

	// mu guards what follows, and each teamWait's refusal. It is a leaf:
	// nothing else is locked while it is held (see Reader for the lock
	// order); the Reader's mu may be held when it is taken.
	mu      sync.Mutex
	Queue   []wire.TeamNote // notes not yet told, in order (keepNotes takes from its head)
	again   bool            // tell the planner everything again (it restarted)
	kick    chan struct{}   // wakes keepNotes
	planner string          // the planner's run it joined ("" none)
	session string          // the session that run gave it
	// plannerNode is the node that sealed the join's answer: every reply
	// of that run must be sealed by it.
	plannerNode string
	// replanned is closed when the member joins another planner run:
	// requests still waiting on the one before give up.
	replanned chan struct{}
	joined    bool
	want      bool
	store     map[wire.ChunkRef]*storedChunk
	bytes     int64
	ends      map[assembly.ShardRef]wire.TeamNote       // shard ends and failures told, to tell a new planner run again
	held      map[assembly.ShardRef]bool                // shards it received output of, not settled
	cursor    map[assembly.ShardRef]assembly.SendCursor // per shard, where its send's next chunk starts (for chunks that do not say)
	inbox     string                                    // where replies come (inbox.SEQ), once subscribed
	waits     map[uint64]*teamWait                      // requests waiting for a reply, by sequence number
	polls     map[int]*RankPoll                         // per rank, its poll for the next part
	// resumes counts the resumes forwarded; resumePlanner and resumeGen
	// are the planner run that answered the last and its generation of
	// ranks (a part asked for before it is of an earlier generation
	// unless that run says otherwise).
	resumes       uint64
	resumePlanner string
	resumeGen     uint64
}

// storedChunk is a chunk a member holds: what it told the planner, the
// bytes, how many of its rows it has cut into parts, and whether its
// shard is settled (every row handed out: the rest went to other agents'
// ranks, or to parts of this agent's ranks it has not cut yet).
type storedChunk struct {
	note    wire.TeamNote
	data    []byte
	cut     int
	settled bool
}

// NewMember is agent name's member side of reader's team, serving ranks
// of a world of world ranks.
func NewMember(nc *nats.Conn, job wire.Job, reader, name string, ranks []int, world int, dropLast bool, log *slog.Logger) *Member {
	ctx, stop := context.WithCancel(context.Background())
	return &Member{nc: nc, job: job, reader: reader, name: name, ranks: ranks, world: world, dropLast: dropLast,
		log: log.With("team", "member"), settle: func(int, int) {}, arrived: func(int) {},
		auth: &Auth{Job: job.Spec.ID, Reader: reader}, // Secure sets its node and check
		// The agent counts refusals in its own series (Agent: m.refused); this one is no registry's.
		refused:     prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_agent_team_refused_total"}),
		nodeRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_agent_node_refused_total"}, []string{"reason"}),
		nonce:       readerstate.NewNonce(), runCtx: ctx, stopRun: stop,
		store: map[wire.ChunkRef]*storedChunk{}, ends: map[assembly.ShardRef]wire.TeamNote{}, held: map[assembly.ShardRef]bool{}, cursor: map[assembly.ShardRef]assembly.SendCursor{},
		waits: map[uint64]*teamWait{}, polls: map[int]*RankPoll{}, replanned: make(chan struct{}),
		kick: make(chan struct{}, 1)}
}

// teamWait is a request waiting for its reply.
type teamWait struct {
	op, session string
	planner     string // the run it was sent to ("" a join: any)
	plannerNode string // the node of that run ("" a join: any)
	node        string // the node that sealed the reply taken (guarded by member.mu)
	ch          chan wire.TeamReply
	other       chan struct{} // another planner run says the member has not joined it
	none        chan struct{} // no planner runs
	// refusal is the last refusal heard (a join's, or an unsigned one),
	// joinReply a join's refusal by a planner run (guarded by member.mu).
	refusal   string
	joinReply *wire.TeamReply
}

// maxTeamReply bounds a reply's body.
const maxTeamReply = 1 << 20

// onReply takes a reply on the member's inbox: one that is not signed
// with the job's key, for a request waiting, by the planner run it was
// sent to, is dropped (counted, and logged at most once a second).
func (m *Member) onReply(msg *nats.Msg) {
	seq, err := strconv.ParseUint(msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:], 10, 64)
	m.mu.Lock()
	w := m.waits[seq]
	m.mu.Unlock()
	if err != nil || w == nil {
		return // late, or not a reply to this member
	}
	if msg.Header.Get("Status") == "503" {
		// No responders: no planner runs (yet). Said at once, so the
		// member tries again soon.
		select {
		case w.none <- struct{}{}:
		default:
		}
		return
	}
	if why := msg.Header.Get(wire.TeamHeaderRefused); why != "" {
		m.mu.Lock()
		w.refusal = readerstate.CutText(why)
		m.mu.Unlock()
		return
	}
	refuse := func(err error) {
		m.refused.Inc()
		why := NodeRefusal(err, KindReply)
		if why != "" {
			m.nodeRefused.WithLabelValues(why).Inc()
		}
		if ok, left := m.logs.Allow(why, time.Now()); ok {
			m.log.Warn("dropped a reply that is not the planner's", "op", w.op, "reason", why, "unlogged_since", left, "err", err)
		}
	}
	h, err := m.auth.Open(msg, KindReply, w.op)
	switch {
	case err != nil:
		refuse(err)
		return
	case h.Member != m.name || h.Session != w.session || h.Seq != seq:
		refuse(fmt.Errorf("%w: a reply to another request", ErrAuth))
		return
	case len(msg.Data) > maxTeamReply:
		refuse(fmt.Errorf("%w: a reply of %d bytes", ErrAuth, len(msg.Data)))
		return
	case w.plannerNode != "" && h.Planner == w.planner && h.Node != w.plannerNode:
		refuse(fmt.Errorf("%w: %w: a reply of planner run %.32q sealed by node %s, but node %s answered the join", ErrAuth, ErrOtherNode, h.Planner, h.Node, w.plannerNode))
		return
	}
	var r wire.TeamReply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Planner != h.Planner {
		refuse(fmt.Errorf("%w: reading the planner's %s reply: %v", ErrAuth, w.op, err))
		return
	}
	switch {
	case w.op == wire.TeamOpJoin && r.Status != StatusOK:
		// Another planner run (one stopping, of another world) may refuse
		// first: wait for one that takes the member.
		m.mu.Lock()
		w.refusal, w.joinReply = r.Error, &r
		m.mu.Unlock()
		return
	case w.op != wire.TeamOpJoin && h.Planner != w.planner:
		if r.Status == StatusNotMember {
			select {
			case w.other <- struct{}{}:
			default:
			}
		}
		return
	}
	m.mu.Lock()
	w.node = h.Node
	m.mu.Unlock()
	select {
	case w.ch <- r:
	default:
	}
}

// ask sends a request to the planner it joined (a join: to any) and
// returns the planner's reply. Replies from another planner run are not
// taken; if one of them says the member has not joined it and the joined
// one does not answer within a second, the planner restarted: the member
// joins again.
func (m *Member) ask(ctx context.Context, op string, v any, timeout time.Duration) (wire.TeamReply, error) {
	r, _, err := m.askNode(ctx, op, v, timeout)
	return r, err
}

// askNode is ask, also returning the node that sealed the reply.
func (m *Member) askNode(ctx context.Context, op string, v any, timeout time.Duration) (wire.TeamReply, string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return wire.TeamReply{}, "", fmt.Errorf("encoding a %s request: %w", op, err)
	}
	m.mu.Lock()
	if m.inbox == "" {
		inbox := m.nc.NewInbox()
		if _, err := m.nc.Subscribe(inbox+".*", m.onReply); err != nil {
			m.mu.Unlock()
			return wire.TeamReply{}, "", fmt.Errorf("subscribing to the team's replies: %w", err)
		}
		m.inbox = inbox
	}
	seq := m.seq.Add(1)
	w := &teamWait{op: op, session: m.session, planner: m.planner, plannerNode: m.plannerNode, ch: make(chan wire.TeamReply, 1), other: make(chan struct{}, 1), none: make(chan struct{}, 1)}
	if op == wire.TeamOpJoin {
		w.session, w.planner, w.plannerNode = m.nonce, "", ""
	}
	m.waits[seq] = w
	inbox, replanned := m.inbox, m.replanned
	if op == wire.TeamOpJoin {
		replanned = nil
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waits, seq)
		m.mu.Unlock()
	}()
	msg := nats.NewMsg(wire.TeamSubject(m.job.Spec.ID, m.reader, op))
	msg.Reply, msg.Data = inbox+"."+strconv.FormatUint(seq, 10), data
	m.auth.Seal(msg, KindRequest, Head{Op: op, Member: m.name, Session: w.session, Seq: seq})
	if err := m.nc.PublishMsg(msg); err != nil {
		return wire.TeamReply{}, "", fmt.Errorf("asking reader %s's planner (%s): %w", m.reader, op, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	other := false
	for {
		select {
		case r := <-w.ch:
			if op != wire.TeamOpJoin && r.Status == StatusNotMember {
				m.mu.Lock()
				m.joined = false
				m.mu.Unlock()
			}
			m.mu.Lock()
			node := w.node
			m.mu.Unlock()
			return r, node, nil
		case <-replanned:
			// The member joined another run of the planner (this one
			// stopped): ask that one.
			return wire.TeamReply{Status: StatusNotMember, Error: "the member joined another run of the planner"}, "", nil
		case <-w.none:
			m.mu.Lock()
			m.joined = false
			m.mu.Unlock()
			return wire.TeamReply{}, "", fmt.Errorf("asking reader %s's planner (%s): no planner runs", m.reader, op)
		case <-w.other:
			// Not a part: one the planner hands to a request given up
			// would be lost (it waits PartWait at most, well within the
			// timeout).
			if !other && op != wire.TeamOpPart {
				other = true
				timer.Reset(time.Second)
			}
		case <-timer.C:
			m.mu.Lock()
			refusal, joinReply := w.refusal, w.joinReply
			m.mu.Unlock()
			switch {
			case joinReply != nil:
				return *joinReply, "", nil
			case other:
				m.mu.Lock()
				m.joined = false
				m.mu.Unlock()
				return wire.TeamReply{Status: StatusNotMember, Error: "another run of the planner answers"}, "", nil
			case refusal != "":
				return wire.TeamReply{}, "", fmt.Errorf("asking reader %s's planner (%s): refused: %s", m.reader, op, refusal)
			}
			return wire.TeamReply{}, "", fmt.Errorf("asking reader %s's planner (%s): no answer within %v", m.reader, op, timeout)
		case <-ctx.Done():
			return wire.TeamReply{}, "", fmt.Errorf("asking reader %s's planner (%s): %w", m.reader, op, ctx.Err())
		}
	}
}

// askUntil repeats a request until the planner answers it (with a
// retry between tries) or ctx ends, joining first when needed.
func (m *Member) askUntil(ctx context.Context, op string, v any, timeout time.Duration) (wire.TeamReply, error) {
	warned := false
	for {
		err := m.join(ctx)
		var r wire.TeamReply
		if err == nil {
			r, err = m.ask(ctx, op, v, timeout)
		}
		if err == nil && r.Status != StatusNotMember && r.Status != StatusBusy {
			return r, nil
		}
		if ctx.Err() != nil {
			return wire.TeamReply{}, ctx.Err()
		}
		if !warned {
			if err == nil {
				err = errors.New(r.Error)
			}
			m.log.Warn("the reader's planner does not answer yet; retrying", "op", op, "err", err)
			warned = true
		}
		if err := retry.Sleep(ctx, teamRetry); err != nil {
			return wire.TeamReply{}, err
		}
	}
}

// join joins the planner's team if this member has not (or the planner
// restarted), and then tells it again every chunk, end and failure it
// holds.
func (m *Member) join(ctx context.Context) error {
	m.mu.Lock()
	joined := m.joined
	m.mu.Unlock()
	if joined {
		return nil
	}
	// A short wait: before the planner runs, another subscriber (a `nats
	// sub`) would hold the request until its timeout.
	r, node, err := m.askNode(ctx, wire.TeamOpJoin, wire.TeamJoin{Ranks: m.ranks, World: m.world, DropLast: m.dropLast}, time.Second)
	if err != nil {
		return err
	}
	if r.Status != StatusOK {
		if r.Status == StatusTaken && m.takenLogged.CompareAndSwap(false, true) {
			// Once: it asks again every teamRetry until the other is quiet.
			m.log.Warn("the reader's planner refuses this agent's name; asking again until the agent of that name is quiet", "err", r.Error)
		}
		return fmt.Errorf("joining reader %s's team: %s", m.reader, r.Error)
	}
	m.mu.Lock()
	fresh := m.planner != r.Planner
	m.planner, m.session, m.plannerNode, m.joined = r.Planner, r.Session, node, true
	if fresh {
		close(m.replanned)
		m.replanned = make(chan struct{})
		// A new planner run knows nothing of what this member holds:
		// keepNotes tells it all again.
		m.again = true
		m.log.Info("joined the reader's team", "planner", r.Planner, "planner_node", node, "ranks", m.ranks, "chunks_held", len(m.store))
		m.kickNotes()
	}
	m.mu.Unlock()
	return nil
}

// Chunk stores chunk index of task's shard and queues its note for the
// planner (the dispatcher's sink does not wait for it). A corrupt chunk,
// or one whose rows' place in the shard is not known, is refused: its
// send fails, and the shard comes again.
func (m *Member) Chunk(task wire.ShardTask, index int, data []byte) error {
	ref := wire.ChunkRef{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunk: index}
	samples, sc, first, err := assembly.SplitChunkAt(data)
	if err != nil {
		return fmt.Errorf("output %s: corrupt chunk: %w", ref, err)
	}
	k := assembly.ShardRef{Epoch: task.Epoch, Shard: task.Shard}
	m.mu.Lock()
	defer m.mu.Unlock()
	if first < 0 {
		c, ok := m.cursor[k]
		switch {
		case index == 0:
			first = 0
		case ok && c.Next == index:
			first = c.Row
		default:
			return fmt.Errorf("output %s: where its rows fall in the shard is not known: it does not say, and chunk %d of its send did not come", ref, index-1)
		}
	}
	m.cursor[k] = assembly.SendCursor{Next: index + 1, Row: first + len(samples)}
	n := wire.TeamNote{Epoch: task.Epoch, Shard: task.Shard, Chunk: index, First: &first, Rows: len(samples), Schema: NoteOf(sc)}
	m.held[k] = true
	if c := m.store[ref]; c != nil {
		if NoteFirstRow(c.note) == first && c.note.Rows == n.Rows {
			return nil // a copy: the planner is told of the first
		}
		// The same index with other rows: a retry chunked differently
		// (another function version). Stored under an index no function
		// sends, unless a copy of it is stored already; the planner takes
		// the rows it lacks.
		alt := AltChunks
		for r, c := range m.store {
			switch {
			case r.Epoch != ref.Epoch || r.Shard != ref.Shard || r.Chunk < AltChunks:
			case NoteFirstRow(c.note) == first && c.note.Rows == n.Rows:
				return nil
			default:
				alt = max(alt, r.Chunk+1)
			}
		}
		if alt >= assembly.MaxChunksPerShard {
			return fmt.Errorf("output %s: too many chunks of the shard chunked differently", ref)
		}
		ref.Chunk, n.Chunk = alt, alt
	}
	m.store[ref] = &storedChunk{note: n, data: data}
	m.bytes += int64(len(data))
	m.Queue = append(m.Queue, n)
	m.kickNotes()
	return nil
}

// AltChunks is the first chunk index a member gives a chunk of a retry
// chunked differently whose index it holds already (functions send far
// fewer chunks a shard).
const AltChunks = assembly.MaxChunksPerShard / 2

// End queues task's shard end, or (end nil) that it failed for good.
func (m *Member) End(task wire.ShardTask, end *wire.ShardEnd, reason string) {
	n := wire.TeamNote{Epoch: task.Epoch, Shard: task.Shard, Chunk: -1, End: end, Reason: reason, Key: task.Key}
	k := assembly.ShardRef{Epoch: task.Epoch, Shard: task.Shard}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held[k] = true
	m.ends[k] = n
	m.Queue = append(m.Queue, n)
	m.kickNotes()
}

// kickNotes wakes keepNotes; m.mu must be held.
func (m *Member) kickNotes() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// MaxNotes bounds the notes of one request (a chunk's note is about 200
// bytes: well within a NATS message).
const MaxNotes = 512

// KeepNotes tells the planner the queued notes until ctx ends: all that
// queued while the last request was on its way go in the next, so a busy
// member asks about once per round trip, not once per chunk.
func (m *Member) KeepNotes(ctx context.Context) {
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
				m.Queue, m.again = m.Queue[:0:0], false
				for _, c := range m.store {
					m.Queue = append(m.Queue, c.note)
				}
				for _, n := range m.ends {
					m.Queue = append(m.Queue, n)
				}
			}
			batch := m.Queue[:min(len(m.Queue), MaxNotes)]
			m.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			r, err := m.askUntil(ctx, wire.TeamOpNotes, wire.TeamNotes{Notes: batch}, 5*time.Second)
			if err != nil {
				return // the agent stops
			}
			if m.told(batch, r) {
				// The planner holds enough of this member's rows: tell
				// the rest once some are handed out.
				if err := retry.Sleep(ctx, teamRetry); err != nil {
					return
				}
			}
		}
	}
}

// told applies the planner's answer to a batch of notes, the queue's
// head: copies and refused chunks are dropped, deferred ones queued
// again (it reports whether there were), the rest counted.
func (m *Member) told(batch []wire.TeamNote, r wire.TeamReply) (deferred bool) {
	m.mu.Lock()
	m.Queue = m.Queue[len(batch):]
	for _, i := range r.Deferred {
		if i >= 0 && i < len(batch) && r.Status == StatusOK {
			m.Queue = append(m.Queue, batch[i])
			deferred = true
		}
	}
	m.want = r.Want
	m.mu.Unlock()
	if r.Status != StatusOK {
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
		case n.Chunk < 0 || slices.Contains(r.Deferred, i):
		case r.Status != StatusOK || refused || slices.Contains(r.Duplicates, i):
			m.drop(ref)
		default:
			rows += n.Rows
		}
	}
	m.arrived(rows)
	return deferred
}

func (m *Member) drop(ref wire.ChunkRef) {
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

// KeepStatus asks the planner for its status every statusEvery until ctx
// ends: it settles the tasks of shards the planner's position has
// complete and drops their chunks.
func (m *Member) KeepStatus(ctx context.Context) {
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		m.mu.Lock()
		held := make([][2]int, 0, len(m.held))
		for k := range m.held {
			held = append(held, [2]int{k.Epoch, k.Shard})
		}
		m.mu.Unlock()
		slices.SortFunc(held, func(x, y [2]int) int { return x[0]*1<<20 + x[1] - y[0]*1<<20 - y[1] })
		if err := m.join(ctx); err == nil {
			if r, err := m.ask(ctx, wire.TeamOpStatus, wire.TeamStatus{Held: held}, 5*time.Second); err == nil && r.Status == StatusOK {
				m.settled(r, held)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// settled settles the shards the planner says are complete, of those the
// member asked about (asked nil: every one).
func (m *Member) settled(r wire.TeamReply, asked [][2]int) {
	if asked != nil {
		var ok [][2]int
		for _, c := range r.Complete {
			if slices.Contains(asked, c) {
				ok = append(ok, c)
			}
		}
		r.Complete = ok
	}
	m.mu.Lock()
	m.want = r.Want
	for _, c := range r.Complete {
		k := assembly.ShardRef{Epoch: c[0], Shard: c[1]}
		delete(m.held, k)
		delete(m.ends, k)
		delete(m.cursor, k)
		for ref, sc := range m.store {
			if ref.Epoch == k.Epoch && ref.Shard == k.Shard {
				sc.settled = true
			}
		}
	}
	m.mu.Unlock()
	for _, c := range r.Complete {
		m.settle(c[0], c[1])
	}
}

// DropSettled drops the chunks of settled shards of epochs before e:
// every rank of this member is past them, so no part will need them.
func (m *Member) DropSettled(e int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for ref, c := range m.store {
		if c.settled && ref.Epoch < e {
			m.bytes -= int64(len(c.data))
			delete(m.store, ref)
		}
	}
}

// SettleAll settles every task the member holds output of: every step
// of every epoch was recorded.
func (m *Member) SettleAll() {
	m.mu.Lock()
	var done [][2]int
	for k := range m.held {
		done = append(done, [2]int{k.Epoch, k.Shard})
	}
	m.mu.Unlock()
	m.settled(wire.TeamReply{Complete: done}, nil)
}

// RankPoll is a rank's poll of the planner for its next part, which
// outlives the request that started it: a trainer that goes away (killed,
// restarted by torchrun) leaves its part here for the rank's next
// request rather than on a closed connection.
type RankPoll struct {
	Done    chan struct{}
	asked   uint64 // the member's resumes when it last asked
	planner string // the planner run that gave its part, and its generation of ranks
	gen     uint64
	p       readerstate.RankPart
	Err     error
	taken   bool
}

// Part returns rank req.rank's next part: the part its last poll got if
// no request took it (unless a resume forwarded since rewound it), or
// that of a new poll.
func (m *Member) Part(ctx context.Context, req readerstate.RankRequest, prod func() *Producer) (readerstate.RankPart, error) {
	for {
		m.mu.Lock()
		pl := m.polls[req.Rank]
		if pl == nil {
			pl = &RankPoll{Done: make(chan struct{}), asked: m.resumes}
			m.polls[req.Rank] = pl
			go m.poll(pl, req, prod)
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return readerstate.RankPart{}, ctx.Err() // the poll goes on: its part waits for the rank's next request
		case <-pl.Done:
		}
		m.mu.Lock()
		if m.polls[req.Rank] == pl {
			delete(m.polls, req.Rank)
		}
		// Asked for before the last resume, its part is of an earlier
		// generation (rewound by the resume; its requester went away)
		// unless the run that answered the resume formed it since.
		taken := pl.taken
		stale := pl.asked < m.resumes && (pl.Err != nil || pl.planner != m.resumePlanner || pl.gen < m.resumeGen)
		pl.taken = true
		m.mu.Unlock()
		switch {
		case taken:
			continue
		case stale:
			if pl.Err == nil {
				m.log.Info("dropping a part of an earlier generation of ranks (its requester went away; the resume rewound it)",
					"rank", req.Rank, "epoch", pl.p.Epoch, "step", pl.p.Step)
			}
			continue
		}
		return pl.p, pl.Err
	}
}

// poll asks the planner for rank req.rank's next part until it has one,
// and cuts it.
func (m *Member) poll(pl *RankPoll, req readerstate.RankRequest, prod func() *Producer) {
	defer close(pl.Done)
	ctx := m.runCtx
	for {
		m.mu.Lock()
		pl.asked = m.resumes
		m.mu.Unlock()
		r, err := m.askUntil(ctx, wire.TeamOpPart, wire.TeamPartRequest{Rank: req.Rank, World: req.World, DropLast: req.DropLast}, PartWait+5*time.Second)
		if err != nil {
			pl.Err = fmt.Errorf("%w: %w", readerstate.ErrStopped, err)
			return
		}
		switch {
		case r.Status == StatusWait:
			continue
		case r.Status != StatusOK:
			pl.Err = errOf(r.Status, r.Error)
			return
		case r.Part == nil:
			pl.Err = fmt.Errorf("%w: the planner's part has no rows", readerstate.ErrStopped)
			return
		}
		if err := m.CheckPart(*r.Part); err != nil {
			pl.Err = fmt.Errorf("%w: the planner's part of rank %d: %w", readerstate.ErrStopped, req.Rank, err)
			return
		}
		m.mu.Lock()
		pl.planner, pl.gen = r.Planner, r.Part.Gen
		m.mu.Unlock()
		pl.p, pl.Err = m.cut(ctx, *r.Part, prod)
		return
	}
}

// CheckPart checks the sizes of a part the planner gave: a rank's part is
// at most a batch, in spans of chunks within the job's bounds.
func (m *Member) CheckPart(n wire.TeamPart) error {
	switch {
	case n.Epoch < 0 || n.Epoch >= m.job.Spec.Epochs:
		return fmt.Errorf("epoch %d: want 0..%d", n.Epoch, m.job.Spec.Epochs-1)
	case n.World != m.world:
		return fmt.Errorf("world size %d: want %d", n.World, m.world)
	case n.Rows < 0 || n.Rows > m.job.Spec.BatchSize:
		return fmt.Errorf("%d rows: want 0..%d (the batch size)", n.Rows, m.job.Spec.BatchSize)
	case len(n.Spans) > n.Rows:
		return fmt.Errorf("%d spans for %d rows", len(n.Spans), n.Rows)
	case n.Step < 0 || n.Failed < 0:
		return fmt.Errorf("step %d, %d failed: want >= 0", n.Step, n.Failed)
	}
	rows := 0
	for _, sp := range n.Spans {
		if sp.Shard < 0 || sp.Shard >= len(m.job.Shards) || sp.Chunk < 0 || sp.Chunk >= assembly.MaxChunksPerShard ||
			sp.Lo < 0 || sp.N < 1 || sp.Lo > assembly.MaxRowsPerChunk || sp.N > assembly.MaxRowsPerChunk-sp.Lo {
			return fmt.Errorf("span %+v out of range", sp)
		}
		if sp.Row != nil && (*sp.Row < 0 || *sp.Row > assembly.MaxRowsPerShard) {
			return fmt.Errorf("span %+v: shard row %d out of range", sp, *sp.Row)
		}
		rows += sp.N
	}
	if rows != n.Rows {
		return fmt.Errorf("its spans have %d rows, the part %d", rows, n.Rows)
	}
	if n.Schema != nil {
		if _, err := SchemaOf(n.Schema); err != nil {
			return err
		}
	}
	return nil
}

// cut makes the batch of a part the planner gave.
func (m *Member) cut(ctx context.Context, n wire.TeamPart, prod func() *Producer) (readerstate.RankPart, error) {
	p := readerstate.RankPart{Batch: assembly.Batch{Epoch: n.Epoch, Keys: make([]string, n.Rows)}, Step: n.Step, Last: n.Last, EpochFailed: n.Failed, World: n.World, Position: n.Position}
	for _, s := range n.Spans {
		row := -1
		if s.Row != nil && *s.Row >= 0 {
			row = *s.Row
		}
		p.Spans = append(p.Spans, assembly.RowSpan{Ref: wire.ChunkRef{Job: m.job.Spec.ID, Epoch: n.Epoch, Shard: s.Shard, Chunk: s.Chunk}, Lo: s.Lo, N: s.N, Row: row})
	}
	var sc *assembly.Schema
	if n.Schema != nil {
		sc, _ = SchemaOf(n.Schema)
	}
	b, err := CutRows(ctx, n.Epoch, p.Keys, p.Spans, sc, func(ctx context.Context, sp assembly.RowSpan) ([]assembly.Sample, *assembly.Schema, error) {
		m.mu.Lock()
		c := m.store[sp.Ref]
		m.mu.Unlock()
		if c != nil {
			return SpanRows(sp, c.data)
		}
		return prod().Rows(ctx, sp)
	})
	if err != nil {
		err = fmt.Errorf("%w: cutting a part of step %d: %w", readerstate.ErrStopped, n.Step, err)
		return readerstate.RankPart{Batch: assembly.Batch{Keys: p.Keys}, Spans: p.Spans}, err
	}
	m.mu.Lock()
	for _, sp := range p.Spans {
		if c := m.store[sp.Ref]; c != nil {
			if c.cut += sp.N; c.cut >= c.note.Rows {
				m.bytes -= int64(len(c.data))
				delete(m.store, sp.Ref)
			}
		}
	}
	m.mu.Unlock()
	b.Sources = assembly.SpanSources(m.job, p.Spans)
	p.Batch, p.Spans = b, nil
	return p, nil
}

// Serves checks that req is for a rank of this member's world (world 0:
// the member's), and returns it with its world set.
func (m *Member) Serves(req readerstate.RankRequest) (readerstate.RankRequest, error) {
	if req.World == 0 {
		req.World = m.world
	}
	switch {
	case req.World != m.world:
		return req, fmt.Errorf("%w: world size %d, but this agent serves ranks of a world of %d", readerstate.ErrWorldMismatch, req.World, m.world)
	case !slices.Contains(m.ranks, req.Rank):
		return req, fmt.Errorf("%w: rank %d: this agent serves ranks %v", readerstate.ErrWorldMismatch, req.Rank, m.ranks)
	}
	return req, nil
}

// Resume forwards a rank's resume to the planner, waiting up to timeout.
func (m *Member) Resume(ctx context.Context, req readerstate.ResumeRequest, timeout time.Duration) (readerstate.ResumeResult, error) {
	state, err := json.Marshal(req.State)
	if err != nil {
		return readerstate.ResumeResult{}, fmt.Errorf("%w: %w", readerstate.ErrBadState, err)
	}
	if !slices.Contains(m.ranks, req.Rank) {
		return readerstate.ResumeResult{}, fmt.Errorf("%w: rank %d: this agent serves ranks %v", readerstate.ErrBadState, req.Rank, m.ranks)
	}
	// An id for this resume: askUntil may send it again, and the planner
	// answers a copy as the first (a second resume of a rank would be a
	// new generation's).
	r, err := m.askUntil(ctx, wire.TeamOpResume, wire.TeamResume{State: state, World: req.World, Rank: req.Rank, Generation: req.Token, ID: readerstate.NewResumeID()}, timeout)
	if err != nil {
		return readerstate.ResumeResult{}, err
	}
	var res readerstate.ResumeResult
	if r.Status != StatusOK || r.Resume == nil {
		return readerstate.ResumeResult{}, errOf(r.Status, r.Error)
	}
	if err := json.Unmarshal(r.Resume, &res); err != nil {
		return readerstate.ResumeResult{}, fmt.Errorf("%w: the planner's resume answer: %w", readerstate.ErrStopped, err)
	}
	// Parts formed before this generation, which no request took, are
	// dropped (part).
	m.mu.Lock()
	m.resumes++
	m.resumePlanner, m.resumeGen = r.Planner, r.Gen
	m.mu.Unlock()
	return res, nil
}

// Secure gives the member its reader's seals (auth: its node's credential,
// the job's node key) and the agent's count of refused replies.
func (m *Member) Secure(auth *Auth, refused prometheus.Counter, nodeRefused *prometheus.CounterVec) {
	m.auth, m.refused, m.nodeRefused = auth, refused, nodeRefused
}

// Dispatching wires the member to its dispatcher: settle acks a shard's
// tasks once settled, arrived counts the samples of a chunk it keeps.
func (m *Member) Dispatching(settle func(epoch, shard int), arrived func(samples int)) {
	m.settle, m.arrived = settle, arrived
}

// Stop ends the member's run: the ranks' polls for parts.
func (m *Member) Stop() { m.stopRun() }

// Running ends when the member's run does (a poll outlives its request).
func (m *Member) Running() context.Context { return m.runCtx }

// ServedRanks are the ranks the member serves, in order.
func (m *Member) ServedRanks() []int { return m.ranks }

// Buffer is the bytes of the chunks the member stores, and whether the
// planner wants its rows.
func (m *Member) Buffer() (held int64, wants bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes, m.want
}

// PollOf is rank r's poll for a part, in progress or done (nil: none).
func (m *Member) PollOf(r int) *RankPoll {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.polls[r]
}
