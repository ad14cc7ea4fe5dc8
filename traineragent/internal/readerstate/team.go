package readerstate

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/stepplan"
	"github.com/sluice-project/sluice/wire"
)

// A reader's team: the agents that serve its ranks, one per node (`sluice
// agent --ranks`). They share the job's task queue, and each keeps the
// bytes of the shards it took. One of them, the planner (the agent serving
// rank 0), runs the reader: it is told each chunk the others (members)
// receive (its row count and tensor layout, not its bytes), forms every global step with the
// team policy (teamplan.go), writes the position and answers each member
// rank's request with its part as chunk rows (spans), which the member
// cuts from the chunks it holds. Rows an agent does not hold (an epoch's
// tail the policy moved to its ranks, or chunks lost with a restarted
// member) are produced again there from a function (they are
// deterministic). The protocol runs over core NATS requests
// (traineragent's teamserve.go, teamproto's member.go); no preprocessed byte crosses it.

// unjoined marks a rank whose agent has not joined the team yet.
const unjoined = "\x00"

// TeamState is the planner's bookkeeping of its team, and the team's step
// policy (StepPolicy): which agent serves each rank, and the members that
// joined.
type TeamState struct {
	// Holders is, per rank, the agent serving it: "" for this one, a
	// member's name, or unjoined.
	Holders []string
	Members map[string]*TeamMember
}

// TeamMember is a member agent as the planner knows it (its ranks are
// those holders names it for).
type TeamMember struct {
	Seen time.Time // its last request
	// nonce is the one its join carried (a join that comes again with it,
	// its reply lost, gets the same session); session is what its requests
	// must carry, seqs their sequence numbers seen.
	nonce, Session string
	Seqs           seqWindow
	Busy           int // requests in progress
	Ranks          int // how many it serves
	// chunks and rows it holds at the planner, at least (memberRoom).
	chunks, Rows int
}

// NewTeamState is a team of world ranks of which this agent serves own.
func NewTeamState(world int, own []int) *TeamState {
	t := &TeamState{Holders: make([]string, world), Members: map[string]*TeamMember{}}
	for r := range t.Holders {
		t.Holders[r] = unjoined
	}
	for _, r := range own {
		t.Holders[r] = ""
	}
	return t
}

// agentName names holder h of a team in messages.
func agentName(h string) string {
	switch h {
	case "":
		return "this agent"
	case unjoined:
		return "an agent that has not joined yet"
	}
	return "agent " + h
}

// Complete reports whether every rank's agent joined.
func (t *TeamState) Complete() bool { return !slices.Contains(t.Holders, unjoined) }

// ranksOf counts the ranks agent h serves.
func (t *TeamState) ranksOf(h string) int {
	n := 0
	for _, x := range t.Holders {
		if x == h {
			n++
		}
	}
	return n
}

// MemberStale is how long a member may go without a request before
// another agent may take over its ranks, or another join its name (a
// member asks for its status every statusEvery).
const MemberStale = 10 * time.Second

// memberLive is how long after a member's last request a join under its
// name is refused: shorter than MemberStale, so that a member agent
// restarted under its name joins soon.
const memberLive = 3 * time.Second

// ErrNameTaken is a join under the name of a member that is still heard
// from: two agents started with one --name, or a forged join.
var ErrNameTaken = errors.New("another agent of the team has this name")

// JoinMember records member name serving ranks, joining with nonce, and
// returns the session its requests must carry. A join
// under the name of a member heard from within memberLive is refused
// (ErrNameTaken) unless it carries that member's nonce (its reply was
// lost): the live member keeps its ranks and its session.
func (t *TeamState) JoinMember(st *State, name, nonce string, ranks []int, world int, dropLast bool, now time.Time) (string, error) {
	if m := t.Members[name]; m != nil && now.Sub(m.Seen) < memberLive && m.nonce != nonce {
		return "", fmt.Errorf("%w: agent %.64q was heard from %.1fs ago; give each agent its own --name (a restarted agent joins once the old one is quiet for %v)",
			ErrNameTaken, name, now.Sub(m.Seen).Seconds(), memberLive)
	}
	if err := t.checkJoin(st, name, nonce, ranks, world, dropLast, now); err != nil {
		return "", err
	}
	for r, h := range t.Holders {
		if h == name && !slices.Contains(ranks, r) {
			t.Holders[r] = unjoined
		}
	}
	for _, r := range ranks {
		if h := t.Holders[r]; h != unjoined && h != name {
			st.note(slog.LevelWarn, "a member takes over ranks of a member gone quiet", "rank", r, "from", h, "to", name)
		}
		t.Holders[r] = name
	}
	for h := range t.Members {
		if h != name && t.ranksOf(h) == 0 {
			delete(t.Members, h) // every rank of it taken over: its session ends
		}
	}
	m := t.Members[name]
	if m == nil || m.nonce != nonce {
		m = &TeamMember{nonce: nonce, Session: NewNonce()}
		t.Members[name] = m
	}
	m.Seen, m.Ranks = now, len(ranks)
	st.note(slog.LevelInfo, "a member joined the reader's team", "agent", name, "ranks", ranks, "complete", t.Complete())
	st.Changed = true
	return m.Session, nil
}

// checkJoin checks a join.
func (t *TeamState) checkJoin(st *State, name, nonce string, ranks []int, world int, dropLast bool, now time.Time) error {
	s := &st.Ranks
	switch {
	case name == "" || name == unjoined:
		return fmt.Errorf("%w: a member needs a name", ErrWorldMismatch)
	case len(nonce) < 16:
		return fmt.Errorf("%w: a join needs a nonce", ErrWorldMismatch)
	case world != s.World:
		return fmt.Errorf("%w: world size %d, but the reader's planner serves a world of %d", ErrWorldMismatch, world, s.World)
	case dropLast != s.dropLast:
		return fmt.Errorf("%w: drop_last %t, but the reader's planner has %t", ErrWorldMismatch, dropLast, s.dropLast)
	case len(ranks) == 0:
		return fmt.Errorf("%w: agent %s serves no rank", ErrWorldMismatch, name)
	}
	for _, r := range ranks {
		if r < 0 || r >= world {
			return fmt.Errorf("%w: rank %d: want 0..%d", ErrWorldMismatch, r, world-1)
		}
		switch h := t.Holders[r]; {
		case h == "":
			return fmt.Errorf("%w: rank %d is served by the planner", ErrWorldMismatch, r)
		case h != unjoined && h != name:
			if m := t.Members[h]; m != nil && now.Sub(m.Seen) < MemberStale {
				return fmt.Errorf("%w: rank %d is served by agent %s", ErrWorldMismatch, r, h)
			}
		}
	}
	return nil
}

// supply is what the team policy sees of epoch e.
func (t *TeamState) supply(st *State, e int) stepplan.TeamSupply {
	var sup stepplan.TeamSupply
	for _, b := range st.ready[e] {
		sup.Ready = append(sup.Ready, stepplan.TeamBatch{Holder: b.Holder(), Rows: len(b.Keys)})
	}
	if e < st.Asm.Finished {
		sup.Cut = true
	} else if ep := st.Asm.Open[e]; ep != nil {
		sup.Pending, sup.Cut = ep.PendingRows(), ep.Cut
	}
	return sup
}

// serves checks that agent ("": this one) serves rank r.
func (t *TeamState) serves(r int, agent string) error {
	if t.Holders[r] != agent {
		return fmt.Errorf("%w: rank %d is served by %s", ErrWorldMismatch, r, agentName(t.Holders[r]))
	}
	return nil
}

// Pull: the planner's own ranks want its rows, and wait for them.
func (t *TeamState) Pull(st *State) (wants, starved bool) {
	w := t.Wants(st, "")
	return w, w
}

// form is the team's StepPolicy.form: full steps of each rank's own
// agent's batches (stepplan.TeamStep) until the epoch is cut, then the rest
// of it as stepplan.Rest plans it.
func (t *TeamState) form(st *State, now time.Time) bool {
	s := &st.Ranks
	changed := false
	for s.epoch < st.job.Spec.Epochs {
		e := s.epoch
		if st.rest != nil && st.rest.epoch == e {
			st.formRestStep(t, now)
			return true
		}
		if !t.Complete() {
			return changed
		}
		plan := stepplan.TeamStep(t.supply(st, e), t.Holders, st.job.Spec.BatchSize, s.dropLast)
		switch plan.Action {
		case stepplan.StepWait:
			return changed
		case stepplan.StepEpochDone:
			s.epoch, s.step = e+1, 0
			changed = true
			continue
		case stepplan.StepRest:
			st.rest = st.planRestOf(t, e)
			changed = true
			continue
		}
		batches := st.takeReadyAt(e, plan.Take, now)
		parts := make([]RankPart, len(batches))
		for r, b := range batches {
			if t.Holders[r] == "" {
				parts[r].Batch = b.Batch
			} else {
				parts[r] = RankPart{Batch: assembly.Batch{Epoch: e, Keys: b.Keys}, Spans: assembly.SpansOf(b.From, false)}
			}
		}
		st.queueStep(parts, false)
		return true
	}
	return changed
}

// takeReadyAt removes the ready batches of epoch e at idx (per rank) and
// records them as handed out, in rank order (each holder's in the order
// they were cut).
func (st *State) takeReadyAt(e int, idx []int, now time.Time) []assembly.ReadyBatch {
	out := make([]assembly.ReadyBatch, len(idx))
	taken := map[int]bool{}
	for r, i := range idx {
		out[r] = st.ready[e][i]
		taken[i] = true
	}
	var keep []assembly.ReadyBatch
	for i, b := range st.ready[e] {
		if !taken[i] {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		delete(st.ready, e)
	} else {
		st.ready[e] = keep
	}
	for _, b := range out {
		st.ReadySamples -= len(b.Keys)
		st.epochsFinished(st.Asm.HandOut(b), now)
	}
	return out
}

// rowItem is one row of a ready batch.
type rowItem struct {
	b   *assembly.ReadyBatch
	i   int // its row in b
	c   *assembly.HeldChunk
	idx int // its row in c
}

// restPlan is what is left of a cut epoch, planned by stepplan.Rest.
type restPlan struct {
	epoch   int
	steps   [][][]rowItem // per step, per rank
	dropped []rowItem
}

// planRestOf plans the rest of cut epoch e over team t. Its rows stay
// counted as ready until their step is formed.
func (st *State) planRestOf(t *TeamState, e int) *restPlan {
	batches := st.ready[e]
	delete(st.ready, e)
	rows := map[string][]rowItem{}
	for bi := range batches {
		b := &batches[bi]
		h, i := b.Holder(), 0
		for _, f := range b.From {
			for k := range f.N {
				rows[h] = append(rows[h], rowItem{b: b, i: i, c: f.C, idx: f.Lo + k})
				i++
			}
		}
	}
	counts := map[string]int{}
	for h, l := range rows {
		counts[h] = len(l)
	}
	steps, dropped := stepplan.Rest(counts, t.Holders, st.job.Spec.BatchSize, st.Ranks.dropLast)
	next := map[string]int{}
	takeRows := func(h string, n int) []rowItem {
		l := rows[h][next[h] : next[h]+n]
		next[h] += n
		return l
	}
	p := &restPlan{epoch: e}
	for _, step := range steps {
		ps := make([][]rowItem, len(step))
		for r, ds := range step {
			for _, d := range ds {
				ps[r] = append(ps[r], takeRows(d.Holder, d.N)...)
			}
		}
		p.steps = append(p.steps, ps)
	}
	for _, h := range slices.Sorted(maps.Keys(dropped)) {
		p.dropped = append(p.dropped, takeRows(h, dropped[h])...)
	}
	moved := 0
	for _, step := range p.steps {
		for r, items := range step {
			for _, it := range items {
				if it.c.Holder != t.Holders[r] {
					moved++
				}
			}
		}
	}
	st.note(slog.LevelInfo, "every chunk of the epoch arrived: its last steps planned over the team",
		"epoch", e, "steps", len(p.steps), "rows", len(rows[""])+sumOthers(counts), "moved_rows", moved, "dropped", len(p.dropped))
	return p
}

func sumOthers(counts map[string]int) int {
	n := 0
	for h, c := range counts {
		if h != "" {
			n += c
		}
	}
	return n
}

// formRestStep forms the next planned step of the cut epoch the ranks
// are in (with its drop_last rows after the last) over team t.
func (st *State) formRestStep(t *TeamState, now time.Time) {
	s := &st.Ranks
	p := st.rest
	if len(p.steps) == 0 {
		st.dropRows(p.epoch, p.dropped, now)
		st.rest = nil
		s.epoch, s.step = p.epoch+1, 0
		st.Changed = true
		return
	}
	step := p.steps[0]
	p.steps = p.steps[1:]
	last := len(p.steps) == 0
	parts := make([]RankPart, len(step))
	for r, items := range step {
		st.ReadySamples -= len(items)
		st.epochsFinished(st.Asm.HandOut(assembly.ReadyBatch{From: rowsFrom(items)}), now)
		parts[r] = partOf(p.epoch, items, t.Holders[r] == "", st.Asm.Schema)
	}
	if last {
		st.dropRows(p.epoch, p.dropped, now)
		st.rest = nil
	}
	st.queueStep(parts, last)
}

// dropRows hands out rows of epoch e to no rank (drop_last).
func (st *State) dropRows(e int, items []rowItem, now time.Time) {
	if len(items) == 0 {
		return
	}
	st.ReadySamples -= len(items)
	st.epochsFinished(st.Asm.HandOut(assembly.ReadyBatch{From: rowsFrom(items)}), now)
	st.Stats.DroppedSamples += int64(len(items))
	st.note(slog.LevelInfo, "dropping the epoch's last, partial step (drop_last)", "epoch", e, "samples", len(items))
}

// rowsFrom is items as chunk rows, consecutive rows of a chunk merged.
func rowsFrom(items []rowItem) []assembly.ChunkRows {
	var out []assembly.ChunkRows
	for _, it := range items {
		if k := len(out) - 1; k >= 0 && out[k].C == it.c && out[k].Lo+out[k].N == it.idx {
			out[k].N++
			continue
		}
		out = append(out, assembly.ChunkRows{C: it.c, Lo: it.idx, N: 1})
	}
	return out
}

// partOf makes a rank's part of rows: stacked from their batches when this
// agent serves the rank and holds them all (a part of no rows has sc's
// tensors with no rows), else as spans (with the chunks' bytes where this
// agent holds them and serves the rank).
func partOf(e int, items []rowItem, local bool, sc *assembly.Schema) RankPart {
	p := RankPart{Batch: assembly.Batch{Epoch: e, Keys: make([]string, len(items))}}
	allHeld := true
	for i, it := range items {
		p.Keys[i] = it.b.Keys[it.i]
		allHeld = allHeld && it.c.Holder == ""
		if it.b.Sources != nil {
			if p.Sources == nil {
				p.Sources = make([]int, len(items))
			}
			p.Sources[i] = it.b.Sources[it.i]
		}
	}
	if !local || !allHeld {
		p.Spans = assembly.SpansOf(rowsFrom(items), local)
		return p
	}
	if len(items) == 0 {
		if sc != nil {
			p.Batch = assembly.Stack(e, sc, nil).Batch
		}
		return p
	}
	for _, it := range items {
		it.b.Materialize()
	}
	for j, t := range items[0].b.Tensors {
		row := len(t.Data) / len(items[0].b.Keys)
		data := make([]byte, 0, len(items)*row)
		for _, it := range items {
			src := it.b.Tensors[j]
			data = append(data, src.Data[it.i*row:(it.i+1)*row]...)
		}
		p.Tensors = append(p.Tensors, safetensors.Tensor{Name: t.Name, DType: t.DType,
			Shape: append([]int{len(items)}, t.Shape[1:]...), Data: data})
	}
	return p
}

// Wants says whether agent h should take more tasks: the rows it
// holds are below its share of the prefetch, or the ranks' step waits
// for its rows (or for more rows of any agent, to know it is not the
// epoch's last).
func (t *TeamState) Wants(st *State, h string) bool {
	n := t.ranksOf(h)
	if n == 0 || st.Asm.AllCut() {
		return false
	}
	held := 0
	for _, bs := range st.ready {
		for _, b := range bs {
			if b.Holder() == h {
				held += len(b.Keys)
			}
		}
	}
	for _, ep := range st.Asm.Open {
		held += ep.PendingOf(h)
	}
	if held < st.prefetch()*n/max(st.Ranks.World, 1) {
		return true
	}
	e := st.Ranks.epoch
	if st.rest != nil || e >= st.job.Spec.Epochs {
		return false
	}
	sup := t.supply(st, e)
	if stepplan.TeamStep(sup, t.Holders, st.job.Spec.BatchSize, st.Ranks.dropLast).Action != stepplan.StepWait {
		return false
	}
	full := map[string]int{}
	for _, b := range sup.Ready {
		if b.Rows == st.job.Spec.BatchSize {
			full[b.Holder]++
		}
	}
	short := func(x string) bool { return full[x] < t.ranksOf(x) }
	return short(h) || !slices.ContainsFunc(t.Holders, short)
}

// AddRemote applies member's note of a chunk it holds, counting its rows
// at the planner (memberRoom).
func (t *TeamState) AddRemote(st *State, ref wire.ChunkRef, member string, first, rows int, sc *assembly.Schema, corrupt string) (assembly.Outcome, error) {
	out, err := st.Asm.AddRemote(ref, member, first, rows, sc, corrupt)
	if m := t.Members[member]; err == nil && !out.Duplicate && m != nil {
		m.chunks++
		m.Rows += rows
	}
	return out, err
}

// Ticket is what a part request of member takes: superseded says (the
// reader's lock held) that its session or generation of ranks ended, and
// is nil when member has not joined. A part goes only to a request of
// the member's current session and generation of ranks: one from before
// a resume or a re-join may have lost its requester (a trainer or a
// member agent restarted), and the part would be lost with it.
func (t *TeamState) Ticket(st *State, member string) (superseded func() bool) {
	gen, mem := st.Gens.N, t.Members[member]
	if mem == nil {
		return nil
	}
	session := mem.Session
	return func() bool { return st.Gens.N != gen || t.Members[member] != mem || mem.Session != session }
}

// MemberRoom says whether member may hold another chunk of rows at the
// planner. The counts only grow between recounts, which are made when
// they reach a bound (rows handed out or rewound leave them).
func (t *TeamState) MemberRoom(st *State, member string, rows int) bool {
	m := t.Members[member]
	if m == nil {
		return false
	}
	if m.chunks < maxMemberChunks && m.Rows+rows <= MaxMemberRows {
		return true
	}
	m.chunks, m.Rows = 0, 0
	for _, ep := range st.Asm.Open {
		for _, sh := range ep.Shards {
			for _, h := range sh.Held {
				if h.Holder == member {
					m.chunks++
					m.Rows += h.Rows - h.Handed
				}
			}
		}
	}
	return m.chunks < maxMemberChunks && m.Rows+rows <= MaxMemberRows
}

// seqWindow accepts each sequence number of a session once, within a
// window below the highest seen (requests of one member run concurrently
// and may arrive out of order): a copy of a message is refused.
type seqWindow struct {
	max  uint64
	seen map[uint64]bool
}

// teamSeqWindow is how far below the highest a sequence number may be.
const teamSeqWindow = 1024

// Accept reports whether seq is new within the window, and notes it.
func (w *seqWindow) Accept(seq uint64) bool {
	if seq == 0 || w.max >= teamSeqWindow && seq <= w.max-teamSeqWindow || w.seen[seq] {
		return false
	}
	if w.seen == nil {
		w.seen = map[uint64]bool{}
	}
	w.seen[seq] = true
	if seq > w.max {
		w.max = seq
		if len(w.seen) > 2*teamSeqWindow {
			for s := range w.seen {
				if w.max >= teamSeqWindow && s <= w.max-teamSeqWindow {
					delete(w.seen, s)
				}
			}
		}
	}
	return true
}

// maxMemberChunks and MaxMemberRows bound the chunks and rows a member may
// hold at the planner before its further notes are deferred (memberRoom).
const (
	maxMemberChunks = 1 << 16
	MaxMemberRows   = 1 << 21
)

// NewNonce is a random hex token.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
