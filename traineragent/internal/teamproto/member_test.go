package teamproto_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/teamproto"
	"github.com/sluice-project/sluice/wire"
)

// testTeamKey is a job's team key for tests (traineragent's tests have
// their own).
var testTeamKey = []byte("a test team key of 32 bytes, ok!")

// testAuth seals and checks the team messages of reader of job as node.
func testAuth(t testing.TB, job, node string) *teamproto.Auth {
	t.Helper()
	id, err := wire.DeriveNode(testTeamKey, job, node)
	if err != nil {
		t.Fatal(err)
	}
	check, err := wire.NewNodeVerifier(job, wire.JobNodeKey(testTeamKey))
	if err != nil {
		t.Fatal(err)
	}
	return teamproto.NewAuth(id, check, job, wire.DefaultReader)
}

// FuzzTeamEnvelope: any headers and body are opened without a panic, and
// only a message sealed by the node it names opens: that one's envelope
// and body.
func FuzzTeamEnvelope(f *testing.F) {
	auth := testAuth(f, "fuzz", "m")
	m := nats.NewMsg("x")
	m.Data = []byte(`{"rank":2}`)
	auth.Seal(m, teamproto.KindRequest, teamproto.Head{Op: wire.TeamOpPart, Member: "m", Session: "s", Seq: 7})
	f.Add(m.Header.Get(wire.TeamHeaderVersion), "m", "s", "7", "", m.Header.Get(wire.NodeHeaderName), m.Header.Get(wire.NodeHeaderSig), m.Data)
	f.Add("1", "", "", "", "", "", "", []byte{})
	f.Fuzz(func(t *testing.T, version, member, session, seq, planner, node, sig string, body []byte) {
		g := nats.NewMsg("x")
		g.Data = body
		for k, v := range map[string]string{wire.TeamHeaderVersion: version, wire.TeamHeaderMember: member, wire.TeamHeaderSession: session, wire.TeamHeaderSeq: seq,
			wire.TeamHeaderPlanner: planner, wire.NodeHeaderName: node, wire.NodeHeaderSig: sig,
			wire.NodeHeaderKey: m.Header.Get(wire.NodeHeaderKey), wire.NodeHeaderCert: m.Header.Get(wire.NodeHeaderCert)} {
			g.Header.Set(k, v)
		}
		h, err := auth.Open(g, teamproto.KindRequest, wire.TeamOpPart)
		if err != nil {
			return
		}
		if h.Node != "m" || h.Member != "m" || h.Session != "s" || h.Seq != 7 || string(body) != string(m.Data) {
			t.Fatalf("opened a message m did not seal: %+v %q", h, body)
		}
	})
}

// FuzzTeamReply: any reply body a member reads is decoded and its part
// checked without a panic or an allocation of its claimed size.
func FuzzTeamReply(f *testing.F) {
	job := fixture.Job("fuzz", 2, 4, fixture.Layout{{3, 2}, {4}})
	mem := teamproto.NewMember(nil, job, wire.DefaultReader, "m", []int{1}, 2, false, slog.New(slog.DiscardHandler))
	good, _ := json.Marshal(wire.TeamReply{Status: teamproto.StatusOK, Part: &wire.TeamPart{World: 2, Rows: 3, Spans: []wire.TeamSpan{{Shard: 0, Chunk: 0, N: 3}}}})
	f.Add(good)
	f.Add([]byte(`{"status":"ok","part":{"rows":1000000000000,"world":2}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r wire.TeamReply
		if json.Unmarshal(body, &r) != nil || r.Part == nil {
			return
		}
		if err := mem.CheckPart(*r.Part); err == nil && r.Part.Rows > job.Spec.BatchSize {
			t.Fatalf("a part of %d rows passed", r.Part.Rows)
		}
	})
}

// TestMemberChecksPartSizes: a part whose sizes do not fit the job is
// refused before anything is allocated for it (reproduction 13: 10^12
// rows killed a member).
func TestMemberChecksPartSizes(t *testing.T) {
	job := fixture.Job("part", 1, 4, fixture.Layout{{3, 3}, {2}})
	m := teamproto.NewMember(nil, job, wire.DefaultReader, "m", []int{1}, 2, false, slog.New(slog.DiscardHandler))
	good := wire.TeamPart{Epoch: 0, World: 2, Rows: 4, Spans: []wire.TeamSpan{{Shard: 0, Chunk: 0, Lo: 0, N: 3}, {Shard: 1, Chunk: 0, Lo: 0, N: 1}}}
	if err := m.CheckPart(good); err != nil {
		t.Fatalf("a good part: %v", err)
	}
	for name, n := range map[string]wire.TeamPart{
		"10^12 rows":          {Epoch: 0, World: 2, Rows: 1e12},
		"rows beyond a batch": {Epoch: 0, World: 2, Rows: 5, Spans: []wire.TeamSpan{{N: 5}}},
		"spans short of rows": {Epoch: 0, World: 2, Rows: 4, Spans: []wire.TeamSpan{{N: 3}}},
		"a huge span":         {Epoch: 0, World: 2, Rows: 2, Spans: []wire.TeamSpan{{Lo: 1 << 62, N: 1}, {N: 1}}},
		"another world":       {Epoch: 0, World: 3, Rows: 0},
		"another epoch":       {Epoch: 1, World: 2, Rows: 0},
		"a shard beyond":      {Epoch: 0, World: 2, Rows: 1, Spans: []wire.TeamSpan{{Shard: 2, N: 1}}},
	} {
		if err := m.CheckPart(n); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMemberTellsARetryChunkedDifferently: a member whose send was cut
// stores the retry's chunks that carry other rows under indices of their
// own and tells the planner where their rows fall; copies it holds are
// not told again.
func TestMemberTellsARetryChunkedDifferently(t *testing.T) {
	job := fixture.Job("j", 1, 4, fixture.Layout{{12}})
	m := teamproto.NewMember(nil, job, wire.DefaultReader, "node1", []int{1}, 2, false, slog.New(slog.DiscardHandler))
	task := job.Task(0, 0)
	feed := func(msgs []fixture.OutputMsg) {
		for _, msg := range msgs {
			if msg.Ref.Chunk < 0 {
				continue
			}
			if err := m.Chunk(task, msg.Ref.Chunk, msg.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed(fixture.Chunked(t, job, 0, 0, []int{4, 4, 4}, false)[:2]) // cut after 2 chunks
	feed(fixture.Chunked(t, job, 0, 0, []int{6, 6}, false))
	feed(fixture.Chunked(t, job, 0, 0, []int{6, 6}, true)) // the same again: copies
	var got []string
	for _, n := range m.Queue {
		got = append(got, fmt.Sprintf("chunk %d first %d rows %d", n.Chunk, teamproto.NoteFirstRow(n), n.Rows))
	}
	want := []string{"chunk 0 first 0 rows 4", "chunk 1 first 4 rows 4",
		fmt.Sprintf("chunk %d first 0 rows 6", teamproto.AltChunks), fmt.Sprintf("chunk %d first 6 rows 6", teamproto.AltChunks+1)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("notes (-want +got):\n%s", diff)
	}
}

// TestTeamProtocolVersionRefused: a message of the protocol before the
// rank-named resume (1) is refused with both versions named, and so a
// planner of protocol 1 would refuse this one's.
func TestTeamProtocolVersionRefused(t *testing.T) {
	auth := testAuth(t, "v", "old")
	m := nats.NewMsg(wire.TeamSubject("v", wire.DefaultReader, wire.TeamOpResume))
	m.Data = []byte(`{"state":{},"world":2}`)
	auth.Seal(m, teamproto.KindRequest, teamproto.Head{Op: wire.TeamOpResume, Member: "old", Session: "s", Seq: 1})
	if _, err := auth.Open(m, teamproto.KindRequest, wire.TeamOpResume); err != nil {
		t.Fatalf("a message of this version: %v", err)
	}
	m.Header.Set(wire.TeamHeaderVersion, "1")
	_, err := auth.Open(m, teamproto.KindRequest, wire.TeamOpResume)
	if err == nil || !strings.Contains(err.Error(), `team protocol "1", want `+wire.TeamProtocol) || !strings.Contains(err.Error(), "same version") {
		t.Errorf("a message of protocol 1: %v, want a refusal naming both versions", err)
	}
}

// TestTeamRequestNamesItsNode: a request sealed by node a that names
// member b (a node of the job acting as another) is refused as such; a
// reply names its sealer, the planner's node.
func TestTeamRequestNamesItsNode(t *testing.T) {
	a := testAuth(t, "n", "node-a")
	for _, op := range []string{wire.TeamOpJoin, wire.TeamOpPart, wire.TeamOpNotes, wire.TeamOpResume, wire.TeamOpStatus} {
		m := nats.NewMsg(wire.TeamSubject("n", wire.DefaultReader, op))
		m.Data = []byte(`{}`)
		a.Seal(m, teamproto.KindRequest, teamproto.Head{Op: op, Member: "node-b", Session: "s", Seq: 1})
		_, err := a.Open(m, teamproto.KindRequest, op)
		if !errors.Is(err, teamproto.ErrOtherNode) || teamproto.NodeRefusal(err, teamproto.KindRequest) != "team_other_node" {
			t.Errorf("%s naming node-b sealed by node-a: %v, want ErrOtherNode", op, err)
		}
	}
	m := nats.NewMsg("inbox.1")
	m.Data = []byte(`{}`)
	a.Seal(m, teamproto.KindReply, teamproto.Head{Op: wire.TeamOpPart, Member: "node-b", Session: "s", Seq: 1, Planner: "p"})
	if h, err := a.Open(m, teamproto.KindReply, wire.TeamOpPart); err != nil || h.Node != "node-a" {
		t.Errorf("node-a's reply to node-b: %+v, %v", h, err)
	}
}
