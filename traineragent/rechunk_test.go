package traineragent

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
)

// TestAgentTakesARetryChunkedDifferentlyExactlyOnce is reproduction 2 of
// issue 24 through the agent: a replica cut after some chunks, the retry
// answered by a function that cuts the same 12 rows into other chunks.
func TestAgentTakesARetryChunkedDifferentlyExactlyOnce(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		first, retry []int
		cut          int
	}{
		{[]int{4, 4, 4}, []int{6, 6}, 2},
		{[]int{4, 4, 4}, []int{6, 6}, 3},
		{[]int{6, 6}, []int{4, 4, 4}, 1},
	} {
		t.Run(fmt.Sprintf("%v cut after %d then %v", tc.first, tc.cut, tc.retry), func(t *testing.T) {
			job := fixture.Job(fmt.Sprintf("rechunk-%d", i), 1, 5, fixture.Layout{{12}, {2}})
			msgs := append(fixture.Chunked(t, job, 0, 0, tc.first, true), fixture.Chunked(t, job, 0, 1, []int{2}, true)...)
			f := newFunctionOf(t, job, msgs)
			f.setRetry(0, 0, fixture.Chunked(t, job, 0, 0, tc.retry, true))
			f.cut(0, 0, tc.cut)
			a, err := New(e.nc, e.js, job, Options{DemandInterval: 20 * time.Millisecond}, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			wait := runAgent(t, a)
			e.submit(t, job, f, 1)
			batches := drain(t, a.Next)
			if err := wait(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			seen := map[string]int{}
			for _, b := range batches {
				fixture.CheckBatch(t, b)
				for _, k := range b.Keys {
					seen[k]++
				}
			}
			want := map[string]int{fixture.RowKey(1, 0): 1, fixture.RowKey(1, 1): 1}
			for r := range 12 {
				want[fixture.RowKey(0, r)] = 1
			}
			if diff := cmp.Diff(want, seen); diff != "" {
				t.Errorf("rows handed out (-want +got):\n%s", diff)
			}
			if n := f.sendsOf(0, 0); n != 2 {
				t.Errorf("shard 0 sent %d times, want 2", n)
			}
			if st := a.Stats(); len(st.FailedSamples) != 0 || st.SamplesArrived != 14 {
				t.Errorf("failed %v, %d samples arrived; want none failed, 14", st.FailedSamples, st.SamplesArrived)
			}
		})
	}
}

// TestTeamTakesShardsProducedAgainChunkedDifferently: a team whose second
// agent is late (rows move between the agents at each epoch's end, and
// are produced again where they go) while every shard's sends after the
// first come chunked differently, some after a send cut short: every row
// reaches one rank once, with its own bytes.
func TestTeamTakesShardsProducedAgainChunkedDifferently(t *testing.T) {
	first := [][]int{{3, 6}, {5}, {1, 2, 3}, {6}, {4, 4}, {2}, {7}, {3}}
	again := [][]int{{9}, {2, 3}, {6}, {3, 3}, {1, 7}, {1, 1}, {4, 3}, {1, 2}}
	e := newEnv(t)
	job := fixture.Job("team-rechunk", 2, 2, make(fixture.Layout, len(first)))
	job.Submitted = time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	var msgs []fixture.OutputMsg
	for ep := range job.Spec.Epochs {
		for s, sizes := range first {
			msgs = append(msgs, fixture.Chunked(t, job, ep, s, sizes, true)...)
		}
	}
	f := newFunctionOf(t, job, msgs)
	for ep := range job.Spec.Epochs {
		for s, sizes := range again {
			f.setRetry(ep, s, fixture.Chunked(t, job, ep, s, sizes, true))
		}
	}
	// Some sends cut after their first chunk: sent again, chunked
	// differently, to whichever agent took the task.
	for s := range first {
		if s%2 == 0 && len(first[s]) > 1 {
			f.cut(0, s, 1)
			f.cut(1, s, 1)
		}
	}
	e.submit(t, job, f, 2)
	ranks := [][]int{{0, 1}, {2, 3}}
	agents, waits := startTeam(t, e, job, 4, ranks, 300*time.Millisecond, false)
	parts := takeTeam(t, agents, ranks, 4, -1)
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
	}
	want := map[string]int{}
	for ep := range job.Spec.Epochs {
		for s, sizes := range first {
			n := 0
			for _, c := range sizes {
				n += c
			}
			for r := range n {
				want[fmt.Sprintf("%d/%s", ep, fixture.RowKey(s, r))] = 1
			}
		}
	}
	if diff := cmp.Diff(want, seen(nil, parts)); diff != "" {
		t.Errorf("rows handed out (-want +got):\n%s", diff)
	}
	for i, a := range agents {
		if st := a.Stats(); len(st.FailedSamples) != 0 {
			t.Errorf("agent %d: failed samples %v, want none", i, st.FailedSamples)
		}
	}
	again2 := 0
	for ep := range job.Spec.Epochs {
		for s := range first {
			again2 += f.sendsOf(ep, s) - 1
		}
	}
	t.Logf("shards sent again (chunked differently): %d", again2)
}
