package traineragent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// httpRank is a rank's view of the agent over HTTP.
type httpRank struct {
	t    *testing.T
	url  string
	rank int
}

// get asks for the rank's next part with extra query parameters and
// returns the status, the headers and the body.
func (h httpRank) get(world int, extra string) (int, http.Header, []byte) {
	h.t.Helper()
	u := fmt.Sprintf("%s/v1/batch?rank=%d&world_size=%d%s", h.url, h.rank, world, extra)
	resp, err := http.Get(u)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// part decodes a 200 body into a readerstate.RankPart, checking the metadata against
// the headers.
func (h httpRank) part(hdr http.Header, body []byte) readerstate.RankPart {
	h.t.Helper()
	b, err := assembly.DecodeBatch(body)
	if err != nil {
		h.t.Fatal(err)
	}
	fixture.CheckBatch(h.t, b)
	f, err := safetensors.Decode(body)
	if err != nil {
		h.t.Fatal(err)
	}
	m := f.Metadata
	p := readerstate.RankPart{Batch: b, Position: []byte(m[wire.MetaBatchPosition])}
	p.Step, _ = strconv.Atoi(m[wire.MetaBatchStep])
	p.World, _ = strconv.Atoi(m[wire.MetaBatchWorldSize])
	p.Last = m[wire.MetaBatchLastStep] == "true"
	if v, ok := m[wire.MetaBatchEpochFailed]; ok != p.Last {
		h.t.Fatalf("rank %d: epoch_failed %q on a part with last_step %t", h.rank, v, p.Last)
	}
	p.EpochFailed, _ = strconv.ParseInt(m[wire.MetaBatchEpochFailed], 10, 64)
	if m[wire.MetaBatchRank] != strconv.Itoa(h.rank) || m[wire.MetaBatchJob] == "" || m[wire.MetaBatchReader] != wire.DefaultReader ||
		hdr.Get(wire.AgentHeaderEpoch) != m[wire.MetaBatchEpoch] || hdr.Get(wire.AgentHeaderStep) != m[wire.MetaBatchStep] {
		h.t.Fatalf("rank %d: metadata %v, headers %v", h.rank, m, hdr)
	}
	return p
}

func TestRanksOverHTTP(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("http-ranks", 1, 4, rankLayout)
	e.submit(t, job, newFunction(t, job, rankLayout), 2)
	a, err := New(e.nc, e.js, job, Options{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	r0, r1 := httpRank{t, srv.URL, 0}, httpRank{t, srv.URL, 1}

	// The first request fixes the world size and drop_last.
	code, hdr, body := r0.get(2, "&drop_last=0&steps=0&wait_s=0.5&compute_s=0")
	if code != http.StatusOK {
		t.Fatalf("first GET: %d %s", code, body)
	}
	parts := [][]readerstate.RankPart{{r0.part(hdr, body)}, nil}
	for _, tc := range []struct {
		name  string
		rank  httpRank
		world int
		extra string
		want  int
		body  string
	}{
		{"another world size", r1, 3, "", http.StatusConflict, "world size 3"},
		{"a rank out of the world", httpRank{t, srv.URL, 2}, 2, "", http.StatusConflict, "rank 2"},
		{"another drop_last", r1, 2, "&drop_last=1", http.StatusConflict, "drop_last"},
		{"a malformed step report", r1, 2, "&wait_s=-1&steps=x", http.StatusBadRequest, "wait_s"},
		// Once allocated a queue per rank: 48 GB.
		{"a world size beyond the bound", r1, 2_000_000_000, "", http.StatusBadRequest, "world_size"},
	} {
		if code, _, body := tc.rank.get(tc.world, tc.extra); code != tc.want || !strings.Contains(string(body), tc.body) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, code, body, tc.want, tc.body)
		}
	}
	// A resume once a batch was handed out is a new generation of ranks
	// (the trainer restarted, the agent did not): it starts again from
	// its state, here the job's start, and what the old ranks took is
	// theirs to lose.
	state, _ := json.Marshal(State{Version: readerstate.StateVersion, Job: job.Spec.ID, Reader: wire.DefaultReader, WorldSize: 2})
	// Each rank of it resumes; the second joins the first's resume.
	for r := range 2 {
		resp, err := http.Post(srv.URL+"/v1/resume?world_size=2&rank="+strconv.Itoa(r), "application/json", bytes.NewReader(state))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(msg), `"resumed":true`) {
			t.Errorf("POST /v1/resume of rank %d after a batch: %s %s, want 200 with the rewind", r, resp.Status, msg)
		}
	}
	parts = [][]readerstate.RankPart{nil, nil}

	for r, h := range []httpRank{r0, r1} {
		for {
			code, hdr, body := h.get(2, "")
			if code == http.StatusGone {
				if got := hdr.Get(wire.AgentHeaderEnd); got != wire.AgentEndDelivered {
					t.Errorf("rank %d: 410 with %s %q, want %q", r, wire.AgentHeaderEnd, got, wire.AgentEndDelivered)
				}
				break
			}
			if code != http.StatusOK {
				t.Fatalf("rank %d: %d %s", r, code, body)
			}
			parts[r] = append(parts[r], h.part(hdr, body))
		}
	}
	checkSteps(t, parts, 4, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, rankLayout, seen(nil, parts), 0)
	// Each shard end lists one failed sample: the last step says so.
	if last := parts[1][len(parts[1])-1]; last.EpochFailed != int64(len(rankLayout)) {
		t.Errorf("the last step's epoch_failed %d, want %d", last.EpochFailed, len(rankLayout))
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(srv.URL + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		WorldSize      int                     `json:"world_size"`
		DroppedSamples int                     `json:"dropped_samples"`
		Ranks          []readerstate.RankStats `json:"ranks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.WorldSize != 2 || len(st.Ranks) != 2 || !st.Ranks[0].Ended || !st.Ranks[1].Ended || st.Ranks[1].Batches != 4 {
		t.Errorf("GET /v1/stats = %+v", st)
	}
}

func TestResumeOverHTTP(t *testing.T) {
	e := newEnv(t)
	job := fixture.Job("http-resume", 1, 4, rankLayout)
	e.submit(t, job, newFunction(t, job, rankLayout), 2)
	a, err := New(e.nc, e.js, job, Options{WorldSize: 2}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wait := runAgent(t, a)
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	post := func(query, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/resume"+query, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}
	for _, tc := range []struct {
		name, query, body string
	}{
		{"not JSON", "?rank=0", "{"},
		{"another version", "?rank=0", `{"v":2,"job":"http-resume","reader":"trainer"}`},
		{"another job", "?rank=0", `{"v":1,"job":"other","reader":"trainer"}`},
		{"a position string that is no JSON", "?rank=0", `{"v":1,"position":"{"}`},
		{"another reader", "?rank=0", `{"v":1,"job":"http-resume","reader":"eval"}`},
		{"a bad position", "?rank=0", `{"v":1,"job":"http-resume","reader":"trainer","position":{"v":1,"finished":7}}`},
		{"no rank", "?world_size=2", `{"v":1,"job":"http-resume","reader":"trainer"}`},
		{"a generation with a space", "?rank=0&generation=a%20b", `{"v":1,"job":"http-resume","reader":"trainer"}`},
		{"a rank beyond the world", "?world_size=2&rank=2", `{"v":1,"job":"http-resume","reader":"trainer"}`},
		{"a bad world size", "?world_size=0&rank=0", `{"v":1,"job":"http-resume","reader":"trainer"}`},
		{"a world size beyond the bound", "?world_size=2000000000&rank=0", `{"v":1,"job":"http-resume","reader":"trainer"}`},
		{"a state's world size beyond the bound", "?rank=0", `{"v":1,"job":"http-resume","reader":"trainer","world_size":2000000000}`},
	} {
		if code, msg := post(tc.query, tc.body); code != http.StatusBadRequest {
			t.Errorf("resume with %s: %d %s, want 400", tc.name, code, msg)
		}
	}
	// A fresh start: nothing to rewind; the world size changes to 3.
	start := `{"v":1,"job":"http-resume","reader":"trainer","epoch":0,"step":0,"world_size":2,"position":null}`
	for r := range 2 {
		code, msg := post("?world_size=3&rank="+strconv.Itoa(r), start)
		var res ResumeResult
		if code != http.StatusOK || json.Unmarshal([]byte(msg), &res) != nil || res != (ResumeResult{}) {
			t.Errorf("rank %d's resume from the start: %d %s, want 200 with nothing resumed", r, code, msg)
		}
	}
	// The third rank loads another checkpoint: refused, naming both.
	other := `{"v":1,"job":"http-resume","reader":"trainer","epoch":0,"step":1,"world_size":2,"position":null}`
	if code, msg := post("?world_size=3&rank=2", other); code != http.StatusConflict || !strings.Contains(msg, "epoch 0 step 1") || !strings.Contains(msg, "epoch 0 step 0") {
		t.Errorf("a rank resuming from another state than its generation's: %d %s, want 409 naming both", code, msg)
	}
	if code, msg := post("?world_size=3&rank=2", start); code != http.StatusOK {
		t.Errorf("rank 2's resume from the generation's state: %d %s, want 200", code, msg)
	}
	parts := make([][]readerstate.RankPart, 3)
	for r := range 3 {
		h := httpRank{t, srv.URL, r}
		for {
			code, hdr, body := h.get(3, "")
			if code == http.StatusGone {
				break
			}
			if code != http.StatusOK {
				t.Fatalf("rank %d: %d %s", r, code, body)
			}
			parts[r] = append(parts[r], h.part(hdr, body))
		}
	}
	checkSteps(t, parts, 4, [2]int{0, 0})
	fixture.CheckEveryOnce(t, job, rankLayout, seen(nil, parts), 0)
	// Each shard end lists one failed sample: the last step says so.
	if last := parts[1][len(parts[1])-1]; last.EpochFailed != int64(len(rankLayout)) {
		t.Errorf("the last step's epoch_failed %d, want %d", last.EpochFailed, len(rankLayout))
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}
