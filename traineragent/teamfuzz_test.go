package traineragent

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// teamOps are the ops FuzzTeamRequest sends, by index.
var teamOps = []string{wire.TeamOpJoin, wire.TeamOpNotes, wire.TeamOpStatus, wire.TeamOpPart, wire.TeamOpResume, "bogus"}

// FuzzTeamRequest decodes and applies any team request body on a planner
// with one member: nothing may panic, the member's ranks stay its own
// (but for a join), and every sample count stays within bounds.
func FuzzTeamRequest(f *testing.F) {
	job := fixture.Job("fuzz", 2, 2, fixture.Layout{{3, 2}, {4}})
	sc := &wire.TeamSchema{Names: []string{"image", "label"}, DTypes: []string{"U8", "I64"}, Shapes: [][]int{{2, 2, 3}, {}}}
	seed := func(op int, v any) {
		data, _ := json.Marshal(v)
		f.Add(uint8(op), data)
	}
	seed(0, wire.TeamJoin{Ranks: []int{2, 3}, World: 4})
	seed(1, wire.TeamNotes{Notes: []wire.TeamNote{{Epoch: 0, Shard: 0, Chunk: 0, Rows: 3, Schema: sc}, {Epoch: 0, Shard: 0, Chunk: 1, Rows: 2, Schema: sc},
		{Epoch: 0, Shard: 0, Chunk: -1, End: &wire.ShardEnd{Job: "fuzz", Epoch: 0, Shard: 0, Chunks: 2, Samples: 5}}}})
	seed(1, wire.TeamNotes{Notes: []wire.TeamNote{{Epoch: 1, Shard: 1, Chunk: 0, Corrupt: "bad"}, {Epoch: 1, Shard: 1, Chunk: -1, Reason: "gone", Key: "k"}}})
	seed(1, wire.TeamNotes{Notes: []wire.TeamNote{{Epoch: 0, Shard: 1, Chunk: 0, Rows: 1 << 24, Schema: sc}}})
	seed(2, wire.TeamStatus{Held: [][2]int{{0, 0}, {1, 1}}})
	seed(3, wire.TeamPartRequest{Rank: 2, World: 4})
	seed(4, wire.TeamResume{State: mustJSONRaw(State{Version: readerstate.StateVersion, Job: "fuzz", Reader: wire.DefaultReader, WorldSize: 4}), World: 4})
	seed(5, []byte("{}"))
	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		r := newReader(job, wire.DefaultReader, Options{WorldSize: 4}, slog.New(slog.DiscardHandler), NewMetrics(nil))
		pl := r.planAsTeam(newTeam(4, []int{0, 1}, testAuth(t, "fuzz", "p")))
		r.mu.Lock()
		if _, err := pl.team.JoinMember(r.st, "m", "nonce-of-m-000000", []int{2, 3}, 4, false, time.Now()); err != nil {
			t.Fatal(err)
		}
		r.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a part or resume returns rather than waits
		name := teamOps[int(op)%len(teamOps)]
		var reply wire.TeamReply
		if name == wire.TeamOpJoin {
			reply = pl.teamJoin(teamproto.Head{Op: name, Member: "x", Session: "nonce-of-x-000000"}, body)
		} else {
			reply = pl.teamRequest(ctx, name, "m", body)
		}
		if _, err := json.Marshal(reply); err != nil {
			t.Fatalf("the reply does not encode: %v", err)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if name != wire.TeamOpJoin && (pl.team.Holders[2] != "m" || pl.team.Holders[3] != "m") {
			t.Errorf("%s changed the holders: %q", name, pl.team.Holders)
		}
		if r.st.ReadySamples < 0 || r.st.Asm.Pending < 0 {
			t.Errorf("%s: %d ready, %d pending samples", name, r.st.ReadySamples, r.st.Asm.Pending)
		}
		if m := pl.team.Members["m"]; m.Rows > readerstate.MaxMemberRows+assembly.MaxRowsPerChunk {
			t.Errorf("%s: member m holds %d rows at the planner", name, m.Rows)
		}
	})
}
