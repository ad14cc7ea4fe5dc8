package traineragent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// TestNodeActingAsAnotherIsRefused: node-a, a node of the job holding
// only its own node credential (and the job's NATS rights, which let it
// read and write every team subject and reader record of the job), acts as
// the team's nodes: as member node1 (requests naming it, with the session
// it sniffed from node1's own requests), as the planner node0 (a reply to
// node1 settling every shard it holds), and as the writer of the reader's
// position (a record claiming node0's name, an earlier record of node0 put
// back, a plain one). Each is refused by the node it reaches, logged and
// counted by reason, and the team serves every sample once in equal steps.
func TestNodeActingAsAnotherIsRefused(t *testing.T) {
	e := newEnv(t)
	job := keyed(fixture.Job("actas", 2, 2, teamLayout))
	e.submit(t, job, newFunction(t, job, teamLayout), 2)
	ranks := [][]int{{0, 1}, {2, 3}}

	// node1's requests as they pass: their envelopes are no secret.
	sniffed := make(chan *nats.Msg, 64)
	spy, err := e.nc.Subscribe(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, "*"), func(m *nats.Msg) {
		if m.Header.Get(wire.TeamHeaderMember) == "node1" && !strings.HasSuffix(m.Subject, "."+wire.TeamOpJoin) {
			select {
			case sniffed <- m:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = spy.Unsubscribe() }()

	var agents []*Agent
	var waits []func() error
	var logs []*logbuf.Buffer
	var metrics []*Metrics
	for i, rs := range ranks {
		log, buf := logbuf.Logger(slog.LevelInfo)
		m := NewMetrics(nil)
		opts := teamOptions(fmt.Sprintf("node%d", i), 4, rs)
		opts.KeepAliveInterval = 100 * time.Millisecond
		a, err := New(e.nc, e.js, job, opts, log, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		agents, logs, metrics = append(agents, a), append(logs, buf), append(metrics, m)
		waits = append(waits, runAgent(t, a))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range logs {
				t.Logf("node%d's log:\n%s", i, l)
			}
		}
	})
	refused := func(node int, reason string) float64 {
		return counterValue(t, metrics[node].nodeRefused.WithLabelValues(reason))
	}
	waitRefused := func(node int, reason string, n float64) {
		t.Helper()
		testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			if got := refused(node, reason); got < n {
				return fmt.Errorf("node%d refused %v for %s, want %v", node, got, reason, n)
			}
			return nil
		})
	}
	kept := takeTeam(t, agents, ranks, 4, 1)
	nodeA := testAuth(t, job.Spec.ID, "node-a") // node-a's own credential, and nothing else of the job's
	var first *nats.Msg
	select {
	case first = <-sniffed:
	case <-time.After(10 * time.Second):
		t.Fatal("no request of node1 seen")
	}
	session := first.Header.Get(wire.TeamHeaderSession)

	// As member node1, with its session: team parts, notes, status,
	// resume, join.
	st := State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 4}
	for i, op := range []struct {
		op   string
		body any
	}{
		{wire.TeamOpPart, wire.TeamPartRequest{Rank: 2, World: 4}},
		{wire.TeamOpNotes, wire.TeamNotes{Notes: []wire.TeamNote{{Epoch: 1, Shard: 0, Chunk: -1, End: &wire.ShardEnd{Job: job.Spec.ID, Epoch: 1}}}}},
		{wire.TeamOpStatus, wire.TeamStatus{}},
		{wire.TeamOpResume, wire.TeamResume{State: mustJSONRaw(st), World: 4, Rank: 2, ID: "r1"}},
		{wire.TeamOpJoin, wire.TeamJoin{Ranks: []int{2}, World: 4}},
	} {
		r, why := sealed(t, e.nc, job.Spec.ID, op.op, nodeA, teamproto.Head{Member: "node1", Session: session, Seq: 1<<50 + uint64(i)}, op.body)
		if r != nil || !strings.Contains(why, "sealed by node node-a") {
			t.Errorf("%s naming node1 sealed by node-a: reply %+v, refusal %q; want refused as a node acting as another", op.op, r, why)
		}
	}
	// node-a's key and certificate under node1's name.
	m := nats.NewMsg(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, wire.TeamOpPart))
	m.Data = mustJSONRaw(wire.TeamPartRequest{Rank: 2, World: 4})
	nodeA.Seal(m, teamproto.KindRequest, teamproto.Head{Op: wire.TeamOpPart, Member: "node1", Session: session, Seq: 1 << 51})
	m.Header.Set(wire.NodeHeaderName, "node1")
	if r, err := e.nc.RequestMsg(m, 3*time.Second); err != nil || !strings.Contains(r.Header.Get(wire.TeamHeaderRefused), "not certified") {
		t.Errorf("node-a's seal renamed node1: %v, %v; want refused for its certificate", r, err)
	}
	if n := refused(0, "team_other_node"); n != 5 {
		t.Errorf("the planner counted %v requests of a node acting as another, want 5", n)
	}
	if n := refused(0, "team_seal"); n != 1 {
		t.Errorf("the planner counted %v requests not sealed by a certified node, want 1", n)
	}

	// As the planner node0: a reply to node1's status settling every
	// shard it holds (its tasks would be acked, its chunks dropped).
	plannerID := agents[0].readers[0].role.(planner).team.id
	fake, err := e.nc.Subscribe(wire.TeamSubject(job.Spec.ID, wire.DefaultReader, wire.TeamOpStatus), func(req *nats.Msg) {
		var s wire.TeamStatus
		if json.Unmarshal(req.Data, &s) != nil {
			return
		}
		n, err := strconv.ParseUint(req.Header.Get(wire.TeamHeaderSeq), 10, 64)
		if err != nil {
			return
		}
		out := nats.NewMsg(req.Reply)
		out.Data = mustJSONRaw(wire.TeamReply{Planner: plannerID, Status: teamproto.StatusOK, Complete: s.Held, Want: true})
		nodeA.Seal(out, teamproto.KindReply, teamproto.Head{Op: wire.TeamOpStatus, Member: "node1", Session: req.Header.Get(wire.TeamHeaderSession), Seq: n, Planner: plannerID})
		_ = req.RespondMsg(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitRefused(1, "reply_other_node", 3)
	_ = fake.Unsubscribe()

	// As the writer of the reader's position (node0's).
	kv, err := e.js.KeyValue(context.Background(), wire.ReadersBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := wire.ReaderKey(job.Spec.ID, wire.DefaultReader)
	earlier, err := kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	kept = append2(kept, takeTeam(t, agents, ranks, 4, 1))
	current := func() wire.SealedRecord {
		t.Helper()
		e, err := kv.Get(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		var r wire.SealedRecord
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A record sealed by node-a, naming node0.
	rec := current()
	forged, err := nodeA.Node.SealRecord(key, 0, rec.Record)
	if err != nil {
		t.Fatal(err)
	}
	var f wire.SealedRecord
	_ = json.Unmarshal(forged, &f)
	f.Seal.Node = "node0"
	if _, err := kv.Put(context.Background(), key, mustJSONRaw(f)); err != nil {
		t.Fatal(err)
	}
	waitRefused(0, "record_seal", 1)
	// An earlier record of node0, put back.
	if _, err := kv.Put(context.Background(), key, earlier.Value()); err != nil {
		t.Fatal(err)
	}
	waitRefused(0, "record_copy", 1)
	// A plain position, sealed by no one.
	if _, err := kv.Put(context.Background(), key, rec.Record); err != nil {
		t.Fatal(err)
	}
	waitRefused(0, "record_seal", 2)
	testenv.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r := current(); r.Seal.Node != "node0" {
			return fmt.Errorf("the position is sealed by %q, want node0's written back", r.Seal.Node)
		}
		return nil
	})

	rest := takeTeam(t, agents, ranks, 4, -1)
	all := append2(kept, rest)
	checkSteps(t, all, 2, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, teamLayout, seen(nil, all), 0)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
	for _, c := range []struct {
		node         int
		line, reason string
	}{
		{0, "refused a team message", "team_other_node"},
		{0, "refused a team message", "team_seal"},
		{1, "dropped a reply that is not the planner's", "reply_other_node"},
		{0, "refused a record of the reader", "record_seal"},
		{0, "refused a record of the reader", "record_copy"},
	} {
		if l := logs[c.node].String(); !strings.Contains(l, c.line) || !strings.Contains(l, "reason="+c.reason) {
			t.Errorf("node%d's log has no line %q for %s", c.node, c.line, c.reason)
		}
	}
	for i, l := range logs {
		if strings.Contains(l.String(), hexSeed(t, job.Spec.ID, "node-a")) {
			t.Errorf("node%d's log quotes node-a's seed", i)
		}
	}
}

// append2 is each rank's parts of a, then of b.
func append2(a, b [][]readerstate.RankPart) [][]readerstate.RankPart {
	out := make([][]readerstate.RankPart, len(b))
	for r := range b {
		if r < len(a) {
			out[r] = append(out[r], a[r]...)
		}
		out[r] = append(out[r], b[r]...)
	}
	return out
}

// hexSeed is node's seed of job, as its credential file holds it.
func hexSeed(t *testing.T, job, node string) string {
	t.Helper()
	var c wire.NodeCredential
	if err := json.Unmarshal(testNode(t, job, node).Encode(), &c); err != nil {
		t.Fatal(err)
	}
	return c.Seed
}

// counterValue is c's count, as a registry would gather it.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathering a counter: %v", err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}
