package assembly_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
)

// checkWindows checks that every window of 64 rows of each epoch's rows
// (sources, in order) holds share of source 0 to within a row.
func checkWindows(t *testing.T, epoch int, sources []int, share float64) {
	t.Helper()
	for lo := 0; lo+64 <= len(sources); lo++ {
		n := 0
		for _, s := range sources[lo : lo+64] {
			if s == 0 {
				n++
			}
		}
		if d := float64(n) - 64*share; d > 1 || d < -1 {
			t.Fatalf("epoch %d: rows %d..%d hold %d of source 0, want %.0f +- 1 (%.1f%%, want within 2 points of %.0f%%)",
				epoch, lo, lo+63, n, 64*share, 100*float64(n)/64, 100*share)
		}
	}
}

// A mixed job's rows enter batches by the schedule whatever order its
// shards arrive in: every window of 64 rows holds 48 +- 1 of the source
// weighted 3 (of 3:1), each row's source is in its batch, and every row
// is handed out once. Shard by shard (the order before mixing), a window
// would hold only one source.
func TestAssemblerMixesSourcesBySample(t *testing.T) {
	var l fixture.Layout
	for range 6 {
		l = append(l, []int{25, 15}) // source 0: 240 rows
	}
	l = append(l, []int{40}, []int{30, 10}) // source 1: 80 rows
	for _, order := range []string{"source after source", "shuffled", "source 1 first"} {
		t.Run(order, func(t *testing.T) {
			job := fixture.MixedJob("mix", 2, 16, l, 6, 3, 1)
			msgs := fixture.Outputs(t, job, l)
			switch order {
			case "shuffled":
				rng := rand.New(rand.NewPCG(3, 4))
				rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
			case "source 1 first":
				var first, rest []fixture.OutputMsg
				for _, m := range msgs {
					if m.Ref.Shard >= 6 {
						first = append(first, m)
					} else {
						rest = append(rest, m)
					}
				}
				msgs = append(first, rest...)
			}
			a := assembly.NewAssembler(job)
			batches, _, _, _ := feed(t, a, msgs)
			rows := map[int][]int{}
			seenKeys := map[string]int{}
			for _, b := range batches {
				if len(b.Sources) != len(b.Keys) {
					t.Fatalf("batch of %d rows names %d sources", len(b.Keys), len(b.Sources))
				}
				for i, k := range b.Keys {
					want := 0
					if fixture.ShardOfKey(t, k) >= 6 {
						want = 1
					}
					if b.Sources[i] != want {
						t.Fatalf("row %s: source %d, want %d", k, b.Sources[i], want)
					}
					seenKeys[fmt.Sprintf("%d/%s", b.Epoch, k)]++
				}
				rows[b.Epoch] = append(rows[b.Epoch], b.Sources...)
			}
			fixture.CheckEveryOnce(t, job, l, seenKeys, 0)
			if !a.AllFinished() || a.Pending != 0 {
				t.Errorf("finished %v, %d rows pending: want every row handed out", a.AllFinished(), a.Pending)
			}
			for e := range 2 {
				if len(rows[e]) != 320 {
					t.Fatalf("epoch %d: %d rows, want 320", e, len(rows[e]))
				}
				checkWindows(t, e, rows[e], 0.75)
			}
		})
	}
}

// A source whose every shard arrived no longer holds the others back:
// its share goes to them, and rows staged for it are released.
func TestAssemblerMixReleasesRowsWhenASourceIsDone(t *testing.T) {
	l := fixture.Layout{{20}, {20}, {4}} // source 0: 40 rows; source 1: 4
	job := fixture.MixedJob("mixdone", 1, 8, l, 2, 1, 1)
	msgs := fixture.Outputs(t, job, l)
	a := assembly.NewAssembler(job)
	// Source 0's first shard: the schedule (seed 0) starts with source
	// 1, so all of it waits.
	out, err := fixture.ApplyMsg(a, msgs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Batches) != 0 || a.Pending != 20 {
		t.Fatalf("%d batches, %d pending: want none batched, 20 rows waiting for source 1", len(out.Batches), a.Pending)
	}
	// Source 1's only shard (chunk and end): its 4 rows alternate with
	// source 0's, then source 0's 16 others go on alone.
	var got []int
	for _, m := range msgs[4:6] {
		out, err := fixture.ApplyMsg(a, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range out.Batches {
			got = append(got, b.Sources...)
			a.HandOut(b)
		}
	}
	want := "101010100000000000000000"
	if fmtSources(got) != want {
		t.Errorf("rows' sources %s: want %s", fmtSources(got), want)
	}
}

func fmtSources(s []int) string {
	var b strings.Builder
	for _, x := range s {
		fmt.Fprint(&b, x)
	}
	return b.String()
}

// Past the job's output buffer the stream does not wait for a source that
// is not there: the rows held go on, out of proportion, rather than the
// agent holding more.
func TestAssemblerMixBendsPastTheBuffer(t *testing.T) {
	l := fixture.Layout{{20}, {20}, {4}}
	for _, tc := range []struct {
		buffer int64
		want   int
	}{{0, 0}, {1, 16}} { // no bound: all 20 rows wait; 1 byte: 2 batches of 8 go on
		job := fixture.MixedJob("mixfull", 1, 8, l, 2, 1, 1)
		job.Spec.OutputBufferBytes = tc.buffer
		a := assembly.NewAssembler(job)
		out, err := fixture.ApplyMsg(a, fixture.Outputs(t, job, l)[0])
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, b := range out.Batches {
			got += len(b.Keys)
		}
		if got != tc.want {
			t.Errorf("buffer %d: %d rows batched before source 1 came, want %d", tc.buffer, got, tc.want)
		}
	}
}

// A restored position's complete shards count as arrived for their
// source: a source done before a restart is not waited for after it.
func TestAssemblerMixRestoredSourceDone(t *testing.T) {
	l := fixture.Layout{{20}, {20}, {4}}
	job := fixture.MixedJob("mixrestore", 1, 8, l, 2, 1, 1)
	a := assembly.NewAssembler(job)
	if err := a.Restore(assembly.Position{Version: assembly.PositionVersion, Epochs: map[int]assembly.EpochPosition{0: {Complete: "2"}}}); err != nil {
		t.Fatal(err)
	}
	a.Start()
	out, err := fixture.ApplyMsg(a, fixture.Outputs(t, job, l)[0])
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, b := range out.Batches {
		got += len(b.Keys)
	}
	if got != 16 {
		t.Errorf("%d rows batched, want 16: source 1 was complete before the restart", got)
	}
}

// A mixed stream restored from a position goes on with the schedule where
// the rows handed out left it (the position records them per source): at
// 0.85:0.15 in batches of 10, where a schedule started afresh after 10,
// 30, 50, ... rows would put 56 or 52 of the first source in a window
// across the restart, every window of 64 holds 54 or 55 whatever step the
// reader stopped after.
func TestAssemblerMixResumesTheSchedule(t *testing.T) {
	var l fixture.Layout
	for range 20 {
		l = append(l, []int{20}) // 17 shards of source 0, 3 of source 1
	}
	job := fixture.MixedJob("mixresume", 1, 10, l, 17, 0.85, 0.15)
	msgs := fixture.Outputs(t, job, l)
	for k := 1; k < 30; k++ {
		a := assembly.NewAssembler(job)
		var ready []assembly.ReadyBatch
		for _, m := range msgs {
			out, err := fixture.ApplyMsg(a, m)
			if err != nil {
				t.Fatal(err)
			}
			ready = append(ready, out.Batches...)
		}
		var stream []int
		for _, b := range ready[:k] {
			a.HandOut(b)
			stream = append(stream, b.Sources...)
		}
		b := assembly.NewAssembler(job)
		if err := b.Restore(a.Snapshot()); err != nil {
			t.Fatal(err)
		}
		b.Start()
		rest, _, _, _ := feed(t, b, msgs)
		for _, batch := range rest {
			stream = append(stream, batch.Sources...)
		}
		if len(stream) != 400 {
			t.Fatalf("stopped after %d batches: %d rows in all, want 400", k, len(stream))
		}
		checkWindows(t, 0, stream, 0.85)
	}
}
