package traineragent

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// The attacks of issue 24 (reproductions 8 to 14) by a holder of the
// agent role's NATS user who is not a member of the team: a node of
// another job (it can publish and subscribe on every team subject). Each
// sends what the team's agents send, in the protocol's own JSON, naming a
// member. Every attack must leave the team unaffected: every sample once,
// the ranks' steps equal.

// forge sends a team request on op as an outsider and returns the reply
// (nil if none came).
func forge(t *testing.T, nc *nats.Conn, job, op string, body any) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(wire.TeamSubject(job, wire.DefaultReader, op), data, 3*time.Second)
	if err != nil {
		return nil
	}
	return m
}

// applied says whether a reply to a forged request says it was applied.
func applied(m *nats.Msg) bool {
	if m == nil {
		return false
	}
	var r struct {
		Status  string         `json:"status"`
		Refused map[int]string `json:"refused"`
	}
	return json.Unmarshal(m.Data, &r) == nil && r.Status == "ok" && len(r.Refused) == 0
}

// attackTeam runs a team of two agents (ranks 0,1 and 2,3) over 2 epochs,
// lets the ranks take `before` steps, runs attack, and takes the rest:
// every sample must come once and every rank take the same steps.
func attackTeam(t *testing.T, id string, before int, attack func(e env, job wire.Job, agents []*Agent)) {
	t.Helper()
	e := newEnv(t)
	job := fixture.Job(id, 2, 2, teamLayout)
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	agents, waits := startTeam(t, e, job, 4, ranks, 0, false)
	var kept [][]readerstate.RankPart
	if before > 0 {
		kept = takeTeam(t, agents, ranks, 4, before)
	}
	attack(e, job, agents)
	rest := takeTeam(t, agents, ranks, 4, -1)
	all := make([][]readerstate.RankPart, 4)
	for r := range all {
		if kept != nil {
			all[r] = append(all[r], kept[r]...)
		}
		all[r] = append(all[r], rest[r]...)
	}
	checkSteps(t, all, 2, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(nil, all), 0)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
}

// TestTeamRefusesForgedResume (reproduction 8): a forged resume rewound a
// running team (1,096 samples for 600, ranks on different steps).
func TestTeamRefusesForgedResume(t *testing.T) {
	attackTeam(t, "forgedresume", 2, func(e env, job wire.Job, _ []*Agent) {
		st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
		if m := forge(t, e.nc, job.Spec.ID, "resume", map[string]any{"agent": "node1", "state": st, "world": 4}); applied(m) {
			t.Errorf("a forged resume was applied: %s", m.Data)
		}
	})
}

// TestTeamRefusesForgedNotes (reproduction 9): forged notes announcing
// shard ends with fewer chunks than there are lost samples silently.
func TestTeamRefusesForgedNotes(t *testing.T) {
	attackTeam(t, "forgednotes", 1, func(e env, job wire.Job, _ []*Agent) {
		var notes []map[string]any
		for s := range teamLayout {
			notes = append(notes, map[string]any{"epoch": 1, "shard": s, "chunk": -1,
				"end": wire.ShardEnd{Job: job.Spec.ID, Epoch: 1, Shard: s, Chunks: 0}})
		}
		if m := forge(t, e.nc, job.Spec.ID, "notes", map[string]any{"agent": "node1", "notes": notes}); applied(m) {
			t.Errorf("forged shard ends were applied: %s", m.Data)
		}
	})
}

// TestTeamRefusesHugeNote (reproduction 10): one note of 16,777,216 rows
// took the planner from 107 MB to 3.5 GB. (Here 1<<20 rows, far beyond
// what a chunk of 4 MiB can hold.)
func TestTeamRefusesHugeNote(t *testing.T) {
	attackTeam(t, "hugenote", 1, func(e env, job wire.Job, _ []*Agent) {
		note := map[string]any{"epoch": 1, "shard": 0, "chunk": 7, "rows": 1 << 20,
			"schema": map[string]any{"names": []string{"image", "label"}, "dtypes": []string{"U8", "I64"}, "shapes": [][]int{{2, 2, 3}, {}}}}
		if m := forge(t, e.nc, job.Spec.ID, "notes", map[string]any{"agent": "node1", "notes": []any{note}}); applied(m) {
			t.Errorf("a note of 1<<20 rows was applied: %s", m.Data)
		}
	})
}

// TestTeamRefusesForgedJoin (reproduction 11): a forged join under a
// member's name with fewer ranks wedged the team for ever.
func TestTeamRefusesForgedJoin(t *testing.T) {
	attackTeam(t, "forgedjoin", 1, func(e env, job wire.Job, _ []*Agent) {
		if m := forge(t, e.nc, job.Spec.ID, "join", map[string]any{"agent": "node1", "ranks": []int{2}, "world": 4}); applied(m) {
			t.Errorf("a forged join under a member's name was applied: %s", m.Data)
		}
	})
}

// TestTeamRefusesForgedPart (reproduction 12): forged part requests under
// a member's name took that member's parts (rank 2 skipped steps).
func TestTeamRefusesForgedPart(t *testing.T) {
	attackTeam(t, "forgedpart", 1, func(e env, job wire.Job, _ []*Agent) {
		for range 3 {
			if m := forge(t, e.nc, job.Spec.ID, "part", map[string]any{"agent": "node1", "rank": 2, "world": 4}); applied(m) {
				t.Errorf("a forged part request was answered with a part: %.200s", m.Data)
			}
		}
	})
}

// TestTeamMemberRefusesForgedReply (reproduction 13): a member took the
// first reply from anyone; a forged one of 10^12 rows killed it (here
// 1<<20 rows, no spans: the member must not take it).
func TestTeamMemberRefusesForgedReply(t *testing.T) {
	attackTeam(t, "forgedreply", 1, func(e env, job wire.Job, _ []*Agent) {
		sub, err := e.nc.Subscribe(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, "part"), func(m *nats.Msg) {
			data, _ := json.Marshal(map[string]any{"planner": "forged", "status": "ok",
				"part": map[string]any{"epoch": 0, "step": 0, "world": 4, "rows": 1 << 20, "spans": []any{}}})
			_ = m.Respond(data)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	})
}

// TestTeamBoundsRequests (reproduction 14): 200,000 part requests made
// 101k goroutines on the planner, one per request. Here 20,000 forged
// requests: the goroutines must stay bounded.
func TestTeamBoundsRequests(t *testing.T) {
	attackTeam(t, "flood", 1, func(e env, job wire.Job, _ []*Agent) {
		base := runtime.NumGoroutine()
		data, _ := json.Marshal(map[string]any{"agent": "node1", "rank": 2, "world": 4})
		inbox := e.nc.NewInbox()
		sub, err := e.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		for range 20000 {
			if err := e.nc.PublishRequest(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, "part"), inbox, data); err != nil {
				t.Fatal(err)
			}
		}
		// The planner takes requests in order: once the last is answered,
		// every one was taken.
		forge(t, e.nc, job.Spec.ID, "status", map[string]any{"agent": "node1"})
		if n := runtime.NumGoroutine(); n > base+2000 {
			t.Errorf("%d goroutines after 20,000 forged part requests, %d before", n, base)
		}
	})
}
