package traineragent

import (
	"context"
	"encoding/json"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// sealed sends a team request on op sealed by auth's node, with envelope
// h, and returns the reply's body (nil: no reply, or an unsigned refusal)
// and the refusal's text.
func sealed(t *testing.T, nc *nats.Conn, job, op string, auth *teamproto.Auth, h teamproto.Head, body any) (*wire.TeamReply, string) {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(wire.TeamSubject(job, wire.DefaultReader, op))
	m.Data = data
	h.Op = op
	auth.Seal(m, teamproto.KindRequest, h)
	r, err := nc.RequestMsg(m, 3*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	if why := r.Header.Get(wire.TeamHeaderRefused); why != "" {
		return nil, why
	}
	var out wire.TeamReply
	if err := json.Unmarshal(r.Data, &out); err != nil {
		t.Fatalf("%s reply: %v", op, err)
	}
	return &out, ""
}

// TestTeamRefusesAnotherJobsKey: an agent of another job (it holds that
// job's team key, and can publish on this team's subjects) sends this
// team's messages sealed by a node credential its key derives for a
// member's name: each is refused unread, counted and logged, and the team
// serves every sample once in equal steps.
func TestTeamRefusesAnotherJobsKey(t *testing.T) {
	other := []byte("the key of another job, 32 bytes")
	attackTeam(t, "otherkey", 1, func(e env, job wire.Job, agents []*Agent) {
		node, err := wire.DeriveNode(other, job.Spec.ID, "node1")
		if err != nil {
			t.Fatal(err)
		}
		forger := teamproto.NewAuth(node, nil, job.Spec.ID, wire.DefaultReader)
		st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
		for _, op := range []struct {
			op   string
			body any
		}{
			{wire.TeamOpJoin, wire.TeamJoin{Ranks: []int{2}, World: 4}},
			{wire.TeamOpResume, wire.TeamResume{State: mustJSONRaw(st), World: 4}},
			{wire.TeamOpPart, wire.TeamPartRequest{Rank: 2, World: 4}},
			{wire.TeamOpNotes, wire.TeamNotes{Notes: []wire.TeamNote{{Epoch: 1, Shard: 0, Chunk: -1, End: &wire.ShardEnd{Job: job.Spec.ID, Epoch: 1}}}}},
		} {
			r, why := sealed(t, e.nc, job.Spec.ID, op.op, forger, teamproto.Head{Member: "node1", Session: "0123456789abcdef0123", Seq: 1}, op.body)
			if r != nil || !strings.Contains(why, "not certified") {
				t.Errorf("%s sealed by a node of another job's key: reply %+v, refusal %q; want refused for its certificate", op.op, r, why)
			}
		}
		if n := agents[0].readers[0].role.(planner).team.refused.Load(); n < 4 {
			t.Errorf("the planner counted %d refused messages, want 4", n)
		}
	})
}

// TestTeamRefusesAnInsiderWithoutTheSession: a holder of member node1's
// credential (a copy of it elsewhere) that is not the running member: a request
// under the member's name without its session is refused, a join under
// its name with another nonce is refused as a name taken, and a copy of
// one of the member's own requests is refused.
func TestTeamRefusesAnInsiderWithoutTheSession(t *testing.T) {
	attackTeam(t, "insider", 1, func(e env, job wire.Job, agents []*Agent) {
		node1 := testAuth(t, job.Spec.ID, "node1")
		st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
		for _, op := range []struct {
			op   string
			body any
		}{
			{wire.TeamOpResume, wire.TeamResume{State: mustJSONRaw(st), World: 4}},
			{wire.TeamOpPart, wire.TeamPartRequest{Rank: 2, World: 4}},
			{wire.TeamOpStatus, wire.TeamStatus{}},
		} {
			r, why := sealed(t, e.nc, job.Spec.ID, op.op, node1, teamproto.Head{Member: "node1", Session: "not-the-session-0000", Seq: 1 << 40}, op.body)
			if r == nil || r.Status != teamproto.StatusNotMember {
				t.Errorf("%s under a member's name without its session: reply %+v (%q), want %s", op.op, r, why, teamproto.StatusNotMember)
			}
		}
		r, why := sealed(t, e.nc, job.Spec.ID, wire.TeamOpJoin, node1, teamproto.Head{Member: "node1", Session: "another-nonce-0000000", Seq: 1}, wire.TeamJoin{Ranks: []int{2}, World: 4})
		if r == nil || r.Status != teamproto.StatusTaken {
			t.Errorf("a join under a live member's name: reply %+v (%q), want %s", r, why, teamproto.StatusTaken)
		}

		// A copy of the member's own status request, its envelope intact.
		got := make(chan *nats.Msg, 1)
		spy, err := e.nc.Subscribe(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, wire.TeamOpStatus), func(m *nats.Msg) {
			select {
			case got <- m:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		m := <-got
		_ = spy.Unsubscribe()
		cp := nats.NewMsg(m.Subject)
		cp.Header, cp.Data = m.Header, m.Data
		reply, err := e.nc.RequestMsg(cp, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rr wire.TeamReply
		if err := json.Unmarshal(reply.Data, &rr); err != nil || rr.Status != teamproto.StatusNotMember || !strings.Contains(rr.Error, "copy") {
			t.Errorf("a copy of the member's request: %s (%v), want refused as a copy", reply.Data, err)
		}
	})
}

// TestTeamNoteBounds: with a member's session (a member gone wrong), a
// chunk note of more rows than a chunk of its schema can hold within the
// job's chunk size is refused, and an end that contradicts the chunks
// held is refused, not applied (reproductions 9 and 10 from inside the
// job).
func TestTeamNoteBounds(t *testing.T) {
	job := fixture.Job("bounds", 1, 2, fixture.Layout{{3, 3}, {2}})
	r := newReader(job, wire.DefaultReader, Options{WorldSize: 2}, slog.New(slog.DiscardHandler), NewMetrics(nil))
	pl := r.planAsTeam(newTeam(2, []int{0}, testAuth(t, job.Spec.ID, "p")))
	r.mu.Lock()
	if _, err := pl.team.JoinMember(r.st, "m", "nonce-of-m-000000", []int{1}, 2, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	r.mu.Unlock()
	sc := &wire.TeamSchema{Names: []string{"image", "label"}, DTypes: []string{"U8", "I64"}, Shapes: [][]int{{2, 2, 3}, {}}}
	// A row is 12 + 8 bytes and at least 3 of its key: 4 MiB hold 182,361.
	if _, _, err := pl.addNote("m", wire.TeamNote{Epoch: 0, Shard: 0, Chunk: 0, Rows: 182362, Schema: sc}); err == nil || !strings.Contains(err.Error(), "182361") {
		t.Errorf("a note of 182,362 rows: %v, want refused naming the bound 182,361", err)
	}
	if _, _, err := pl.addNote("m", wire.TeamNote{Epoch: 0, Shard: 0, Chunk: 0, Rows: 1 << 24, Schema: sc}); err == nil {
		t.Errorf("a note of 16,777,216 rows was applied")
	}
	zero, three := 0, 3
	for _, n := range []wire.TeamNote{{Epoch: 0, Shard: 0, Chunk: 0, First: &zero, Rows: 3, Schema: sc}, {Epoch: 0, Shard: 0, Chunk: 1, First: &three, Rows: 3, Schema: sc}} {
		if dup, _, err := pl.addNote("m", n); err != nil || dup {
			t.Fatalf("chunk %d: dup %t, %v", n.Chunk, dup, err)
		}
	}
	// An end of fewer samples than the rows held: the rows are kept (the
	// shard has 6), and the contradiction reported.
	if _, _, err := pl.addNote("m", wire.TeamNote{Epoch: 0, Shard: 0, Chunk: -1, End: &wire.ShardEnd{Job: job.Spec.ID, Epoch: 0, Shard: 0, Chunks: 1, Samples: 4}}); err != nil {
		t.Errorf("an end of 4 samples with 6 rows held: %v", err)
	}
	r.mu.Lock()
	total := r.st.Asm.Open[0].Shards[0].Total
	r.mu.Unlock()
	reported := slices.ContainsFunc(r.Stats().FailedSamples, func(f wire.FailedSample) bool { return strings.Contains(f.Reason, "says 4 samples") })
	if total != 6 || !reported {
		t.Errorf("after an end of 4 samples with 6 rows held: the shard has %d rows (want 6), reported %t", total, reported)
	}
	if _, _, err := pl.addNote("m", wire.TeamNote{Epoch: 0, Shard: 1, Chunk: -1, End: &wire.ShardEnd{Job: "another", Epoch: 0, Shard: 1, Chunks: 1}}); err == nil {
		t.Errorf("an end naming another job was applied")
	}
}

func mustJSONRaw(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// TestTeamBoundsAMembersRequests: a member (its session and key: a member
// gone wrong, or its session sniffed) that floods the planner with part
// requests gets at most 8 and 2 per rank in progress; the rest are told
// the planner is busy, without a goroutine each (reproduction 14 from
// inside the job).
func TestTeamBoundsAMembersRequests(t *testing.T) {
	job := fixture.Job("flood", 1, 2, fixture.Layout{{3, 3}, {2}})
	r := newReader(job, wire.DefaultReader, Options{WorldSize: 4}, slog.New(slog.DiscardHandler), NewMetrics(nil))
	pl := r.planAsTeam(newTeam(4, []int{0, 1}, testAuth(t, job.Spec.ID, "p")))
	member := testAuth(t, job.Spec.ID, "m")
	r.mu.Lock()
	session, err := pl.team.JoinMember(r.st, "m", "nonce-of-m-000000", []int{2, 3}, 4, false, time.Now())
	r.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := runtime.NumGoroutine()
	for seq := range uint64(1000) {
		m := nats.NewMsg(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, wire.TeamOpPart))
		m.Data = []byte(`{"rank":2,"world":4}`)
		member.Seal(m, teamproto.KindRequest, teamproto.Head{Op: wire.TeamOpPart, Member: "m", Session: session, Seq: seq + 1})
		pl.admitTeam(ctx, m)
	}
	r.mu.Lock()
	busy := pl.team.Members["m"].Busy
	r.mu.Unlock()
	if want := teamproto.MaxMemberRequests + 2*2; busy != want {
		t.Errorf("%d requests of the member in progress, want %d", busy, want)
	}
	if n := runtime.NumGoroutine(); n > base+2*(teamproto.MaxMemberRequests+4) {
		t.Errorf("%d goroutines after 1,000 part requests of one member, %d before", n, base)
	}
}
