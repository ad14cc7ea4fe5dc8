package assembly_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// TestAssemblerTakesARetryChunkedDifferentlyExactlyOnce is reproduction 2
// of issue 24: a shard's send cut after some chunks, its retry chunked
// differently (another function version): every row once, none lost, no
// panic, whether rows were handed out before the retry or not, and
// whether the function says each chunk's first row or not.
func TestAssemblerTakesARetryChunkedDifferentlyExactlyOnce(t *testing.T) {
	for _, tc := range []struct{ first, retry []int }{
		{[]int{4, 4, 4}, []int{6, 6}},
		{[]int{6, 6}, []int{4, 4, 4}},
		{[]int{4, 4, 4}, []int{12}},
		{[]int{5, 7}, []int{3, 3, 3, 3}},
		{[]int{4, 4, 4}, []int{4, 4, 4}},
	} {
		for cut := 0; cut <= len(tc.first); cut++ {
			for _, batch := range []int{4, 5, 100} {
				for _, withFirst := range []bool{true, false} {
					name := fmt.Sprintf("%v cut after %d then %v, batch %d, first said %t", tc.first, cut, tc.retry, batch, withFirst)
					t.Run(name, func(t *testing.T) {
						l := fixture.Layout{{12}, {2}}
						job := fixture.Job("j", 1, batch, l)
						a := assembly.NewAssembler(job)
						msgs := fixture.Chunked(t, job, 0, 0, tc.first, withFirst)[:cut]
						msgs = append(msgs, fixture.Chunked(t, job, 0, 0, tc.retry, withFirst)...)
						msgs = append(msgs, fixture.Chunked(t, job, 0, 1, []int{2}, withFirst)...)
						batches, failed, ok := fixture.FeedSafely(t, a, msgs)
						if !ok {
							return
						}
						if len(failed) != 0 {
							t.Errorf("failed samples %v, want none", failed)
						}
						seen := map[string]int{}
						for _, b := range batches {
							for _, k := range b.Keys {
								seen[k]++
							}
						}
						for r := range 12 {
							if n := seen[fixture.RowKey(0, r)]; n != 1 {
								t.Errorf("row %d handed out %d times, want once", r, n)
							}
						}
						if !a.AllFinished() {
							t.Errorf("epoch not finished after every row came")
						}
					})
				}
			}
		}
	}
}

// TestAssemblerReportsAShardEndThatContradictsItsRows: an end whose
// sample count is not the rows that came is reported, loses nothing
// silently and still completes the shard.
func TestAssemblerReportsAShardEndThatContradictsItsRows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples int
		want    string
	}{
		{"fewer", 10, "12 rows came"},
		{"more", 14, "2 of them never came"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := fixture.Job("j", 1, 5, fixture.Layout{{12}})
			a := assembly.NewAssembler(job)
			msgs := fixture.Chunked(t, job, 0, 0, []int{4, 4, 4}, true)
			var end wire.ShardEnd
			if err := json.Unmarshal(msgs[3].Data, &end); err != nil {
				t.Fatal(err)
			}
			end.Samples = tc.samples
			msgs[3].Data, _ = json.Marshal(end)
			batches, failed, ok := fixture.FeedSafely(t, a, msgs)
			if !ok {
				return
			}
			n := 0
			for _, b := range batches {
				n += len(b.Keys)
			}
			if n != 12 || !a.AllFinished() {
				t.Errorf("handed out %d rows, finished %t: want the 12 that came, the shard complete", n, a.AllFinished())
			}
			if len(failed) != 1 || !strings.Contains(failed[0].Reason, tc.want) {
				t.Errorf("failed = %v, want one report saying %q", failed, tc.want)
			}
		})
	}
}

// TestAssemblerReadsAFormat1Position: a position written by an agent
// that recorded rows by chunk index still skips what it handed out, once
// those chunks come again, and keeps what is not applied yet.
func TestAssemblerReadsAFormat1Position(t *testing.T) {
	l := fixture.Layout{{3, 2, 4}, {2}}
	job := fixture.Job("j", 1, 2, l)
	p, err := assembly.DecodePosition([]byte(`{"v":1,"epochs":{"0":{"shards":{"0":{"end":3,"chunks":"0","rows":{"1":1}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	a := assembly.NewAssembler(job)
	if err := a.Restore(p); err != nil {
		t.Fatal(err)
	}
	msgs := fixture.Outputs(t, job, l)
	// Chunk 2 first: chunk 1's rows are still skipped when it comes.
	out, err := fixture.ApplySent(a, msgs[2], false)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range out.Batches {
		a.HandOut(b)
		keys = append(keys, b.Keys...)
	}
	if got := a.Snapshot().Epochs[0].Shards[0]; got.Chunks != "0" || fmt.Sprint(got.Rows) != "map[1:1]" {
		t.Errorf("position before chunks 0 and 1 came = %+v, want their format 1 entries kept", got)
	}
	for _, m := range []fixture.OutputMsg{msgs[0], msgs[1], msgs[3], msgs[4], msgs[5]} {
		out, err := fixture.ApplySent(a, m, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range out.Batches {
			a.HandOut(b)
			keys = append(keys, b.Keys...)
		}
	}
	want := []string{fixture.SampleKey(0, 2, 0), fixture.SampleKey(0, 2, 1), fixture.SampleKey(0, 2, 2), fixture.SampleKey(0, 2, 3), fixture.SampleKey(0, 1, 1), fixture.SampleKey(1, 0, 0), fixture.SampleKey(1, 0, 1)}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("rows handed out after the restore (-want +got):\n%s", diff)
	}
	if !a.AllFinished() {
		t.Errorf("not finished")
	}
}

// TestRestoreBoundsTheRowsAPositionRecords: a position (a trainer's state
// is input) may not make the agent hold row bitmaps without bound.
func TestRestoreBoundsTheRowsAPositionRecords(t *testing.T) {
	job := fixture.Job("j", 1, 4, make(fixture.Layout, 8))
	shards := map[int]assembly.ShardPosition{}
	for s := range 8 {
		shards[s] = assembly.ShardPosition{Handed: fmt.Sprint(assembly.MaxRowsPerShard - 1)} // one row, an 8 MiB bitmap
	}
	p := assembly.Position{Version: assembly.PositionVersion, Epochs: map[int]assembly.EpochPosition{0: {Shards: shards}}}
	err := assembly.NewAssembler(job).Restore(p)
	if err == nil || !strings.Contains(err.Error(), "more rows handed out than a position may record") {
		t.Errorf("restore of 8 shards of 8 MiB bitmaps: err = %v", err)
	}
}
