package traineragent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/stepplan"
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
// (teamserve.go, member.go); no preprocessed byte crosses it.

// unjoined marks a rank whose agent has not joined the team yet.
const unjoined = "\x00"

// team is the planner's side of its reader's team: what answers the
// members over NATS (teamserve.go). Its bookkeeping, teamState, is part
// of the reader's state.
type team struct {
	*teamState
	// id names this planner's run: members that see another id re-join
	// and announce again the chunks they hold.
	id   string
	auth *teamAuth
	// joins bounds the joins in progress.
	joins chan struct{}
	// refused counts team messages refused (envelope, session, copies,
	// joins under a live member's name); refusedLog is when one was last
	// logged (unix ns).
	refused, refusedLog atomic.Int64
}

// teamState is the planner's bookkeeping of its team, and the team's step
// policy (stepPolicy): which agent serves each rank, and the members that
// joined.
type teamState struct {
	// holders is, per rank, the agent serving it: "" for this one, a
	// member's name, or unjoined.
	holders []string
	members map[string]*teamMember
}

// teamMember is a member agent as the planner knows it (its ranks are
// those holders names it for).
type teamMember struct {
	seen time.Time // its last request
	// nonce is the one its join carried (a join that comes again with it,
	// its reply lost, gets the same session); session is what its requests
	// must carry, seqs their sequence numbers seen.
	nonce, session string
	seqs           seqWindow
	busy           int // requests in progress
	ranks          int // how many it serves
	// chunks and rows it holds at the planner, at least (memberRoom).
	chunks, rows int
}

func newTeam(world int, own []int, auth *teamAuth) *team {
	return &team{teamState: newTeamState(world, own), id: newTeamID(), auth: auth, joins: make(chan struct{}, maxJoins)}
}

// newTeamState is a team of world ranks of which this agent serves own.
func newTeamState(world int, own []int) *teamState {
	t := &teamState{holders: make([]string, world), members: map[string]*teamMember{}}
	for r := range t.holders {
		t.holders[r] = unjoined
	}
	for _, r := range own {
		t.holders[r] = ""
	}
	return t
}

func newTeamID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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

// complete reports whether every rank's agent joined.
func (t *teamState) complete() bool { return !slices.Contains(t.holders, unjoined) }

// ranksOf counts the ranks agent h serves.
func (t *teamState) ranksOf(h string) int {
	n := 0
	for _, x := range t.holders {
		if x == h {
			n++
		}
	}
	return n
}

// memberStale is how long a member may go without a request before
// another agent may take over its ranks, or another join its name (a
// member asks for its status every statusEvery).
const memberStale = 10 * time.Second

// memberLive is how long after a member's last request a join under its
// name is refused: shorter than memberStale, so that a member agent
// restarted under its name joins soon.
const memberLive = 3 * time.Second

// ErrNameTaken is a join under the name of a member that is still heard
// from: two agents started with one --name, or a forged join.
var ErrNameTaken = errors.New("another agent of the team has this name")

// joinMember records member name serving ranks, joining with nonce, and
// returns the session its requests must carry. A join
// under the name of a member heard from within memberLive is refused
// (ErrNameTaken) unless it carries that member's nonce (its reply was
// lost): the live member keeps its ranks and its session.
func (t *teamState) joinMember(st *readerState, name, nonce string, ranks []int, world int, dropLast bool, now time.Time) (string, error) {
	if m := t.members[name]; m != nil && now.Sub(m.seen) < memberLive && m.nonce != nonce {
		return "", fmt.Errorf("%w: agent %.64q was heard from %.1fs ago; give each agent its own --name (a restarted agent joins once the old one is quiet for %v)",
			ErrNameTaken, name, now.Sub(m.seen).Seconds(), memberLive)
	}
	if err := t.checkJoin(st, name, nonce, ranks, world, dropLast, now); err != nil {
		return "", err
	}
	for r, h := range t.holders {
		if h == name && !slices.Contains(ranks, r) {
			t.holders[r] = unjoined
		}
	}
	for _, r := range ranks {
		if h := t.holders[r]; h != unjoined && h != name {
			st.note(slog.LevelWarn, "a member takes over ranks of a member gone quiet", "rank", r, "from", h, "to", name)
		}
		t.holders[r] = name
	}
	for h := range t.members {
		if h != name && t.ranksOf(h) == 0 {
			delete(t.members, h) // every rank of it taken over: its session ends
		}
	}
	m := t.members[name]
	if m == nil || m.nonce != nonce {
		m = &teamMember{nonce: nonce, session: newNonce()}
		t.members[name] = m
	}
	m.seen, m.ranks = now, len(ranks)
	st.note(slog.LevelInfo, "a member joined the reader's team", "agent", name, "ranks", ranks, "complete", t.complete())
	st.changed = true
	return m.session, nil
}

// checkJoin checks a join.
func (t *teamState) checkJoin(st *readerState, name, nonce string, ranks []int, world int, dropLast bool, now time.Time) error {
	s := &st.ranks
	switch {
	case name == "" || name == unjoined:
		return fmt.Errorf("%w: a member needs a name", ErrWorldMismatch)
	case len(nonce) < 16:
		return fmt.Errorf("%w: a join needs a nonce", ErrWorldMismatch)
	case world != s.world:
		return fmt.Errorf("%w: world size %d, but the reader's planner serves a world of %d", ErrWorldMismatch, world, s.world)
	case dropLast != s.dropLast:
		return fmt.Errorf("%w: drop_last %t, but the reader's planner has %t", ErrWorldMismatch, dropLast, s.dropLast)
	case len(ranks) == 0:
		return fmt.Errorf("%w: agent %s serves no rank", ErrWorldMismatch, name)
	}
	for _, r := range ranks {
		if r < 0 || r >= world {
			return fmt.Errorf("%w: rank %d: want 0..%d", ErrWorldMismatch, r, world-1)
		}
		switch h := t.holders[r]; {
		case h == "":
			return fmt.Errorf("%w: rank %d is served by the planner", ErrWorldMismatch, r)
		case h != unjoined && h != name:
			if m := t.members[h]; m != nil && now.Sub(m.seen) < memberStale {
				return fmt.Errorf("%w: rank %d is served by agent %s", ErrWorldMismatch, r, h)
			}
		}
	}
	return nil
}

// supply is what the team policy sees of epoch e.
func (t *teamState) supply(st *readerState, e int) stepplan.TeamSupply {
	var sup stepplan.TeamSupply
	for _, b := range st.ready[e] {
		sup.Ready = append(sup.Ready, stepplan.TeamBatch{Holder: b.Holder(), Rows: len(b.Keys)})
	}
	if e < st.asm.Finished {
		sup.Cut = true
	} else if ep := st.asm.Open[e]; ep != nil {
		sup.Pending, sup.Cut = ep.PendingRows(), ep.Cut
	}
	return sup
}

// serves checks that agent ("": this one) serves rank r.
func (t *teamState) serves(r int, agent string) error {
	if t.holders[r] != agent {
		return fmt.Errorf("%w: rank %d is served by %s", ErrWorldMismatch, r, agentName(t.holders[r]))
	}
	return nil
}

// pull: the planner's own ranks want its rows, and wait for them.
func (t *teamState) pull(st *readerState) (wants, starved bool) {
	w := t.wants(st, "")
	return w, w
}

// form is the team's stepPolicy.form: full steps of each rank's own
// agent's batches (stepplan.TeamStep) until the epoch is cut, then the rest
// of it as stepplan.Rest plans it.
func (t *teamState) form(st *readerState, now time.Time) bool {
	s := &st.ranks
	changed := false
	for s.epoch < st.job.Spec.Epochs {
		e := s.epoch
		if st.rest != nil && st.rest.epoch == e {
			st.formRestStep(t, now)
			return true
		}
		if !t.complete() {
			return changed
		}
		plan := stepplan.TeamStep(t.supply(st, e), t.holders, st.job.Spec.BatchSize, s.dropLast)
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
		parts := make([]rankPart, len(batches))
		for r, b := range batches {
			if t.holders[r] == "" {
				parts[r].Batch = b.Batch
			} else {
				parts[r] = rankPart{Batch: Batch{Epoch: e, Keys: b.Keys}, Spans: assembly.SpansOf(b.From, false)}
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
func (st *readerState) takeReadyAt(e int, idx []int, now time.Time) []assembly.ReadyBatch {
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
		st.readySamples -= len(b.Keys)
		st.epochsFinished(st.asm.HandOut(b), now)
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
func (st *readerState) planRestOf(t *teamState, e int) *restPlan {
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
	steps, dropped := stepplan.Rest(counts, t.holders, st.job.Spec.BatchSize, st.ranks.dropLast)
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
				if it.c.Holder != t.holders[r] {
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
func (st *readerState) formRestStep(t *teamState, now time.Time) {
	s := &st.ranks
	p := st.rest
	if len(p.steps) == 0 {
		st.dropRows(p.epoch, p.dropped, now)
		st.rest = nil
		s.epoch, s.step = p.epoch+1, 0
		st.changed = true
		return
	}
	step := p.steps[0]
	p.steps = p.steps[1:]
	last := len(p.steps) == 0
	parts := make([]rankPart, len(step))
	for r, items := range step {
		st.readySamples -= len(items)
		st.epochsFinished(st.asm.HandOut(assembly.ReadyBatch{From: rowsFrom(items)}), now)
		parts[r] = partOf(p.epoch, items, t.holders[r] == "", st.asm.Schema)
	}
	if last {
		st.dropRows(p.epoch, p.dropped, now)
		st.rest = nil
	}
	st.queueStep(parts, last)
}

// dropRows hands out rows of epoch e to no rank (drop_last).
func (st *readerState) dropRows(e int, items []rowItem, now time.Time) {
	if len(items) == 0 {
		return
	}
	st.readySamples -= len(items)
	st.epochsFinished(st.asm.HandOut(assembly.ReadyBatch{From: rowsFrom(items)}), now)
	st.stats.DroppedSamples += int64(len(items))
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
func partOf(e int, items []rowItem, local bool, sc *assembly.Schema) rankPart {
	p := rankPart{Batch: Batch{Epoch: e, Keys: make([]string, len(items))}}
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

// wants says whether agent h should take more tasks: the rows it
// holds are below its share of the prefetch, or the ranks' step waits
// for its rows (or for more rows of any agent, to know it is not the
// epoch's last).
func (t *teamState) wants(st *readerState, h string) bool {
	n := t.ranksOf(h)
	if n == 0 || st.asm.AllCut() {
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
	for _, ep := range st.asm.Open {
		held += ep.PendingOf(h)
	}
	if held < st.prefetch()*n/max(st.ranks.world, 1) {
		return true
	}
	e := st.ranks.epoch
	if st.rest != nil || e >= st.job.Spec.Epochs {
		return false
	}
	sup := t.supply(st, e)
	if stepplan.TeamStep(sup, t.holders, st.job.Spec.BatchSize, st.ranks.dropLast).Action != stepplan.StepWait {
		return false
	}
	full := map[string]int{}
	for _, b := range sup.Ready {
		if b.Rows == st.job.Spec.BatchSize {
			full[b.Holder]++
		}
	}
	short := func(x string) bool { return full[x] < t.ranksOf(x) }
	return short(h) || !slices.ContainsFunc(t.holders, short)
}
