package assembly_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
)

func TestSetEncodingRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []int
		want    string // "" to check only the round trip
	}{
		{"empty", nil, ""},
		{"one", []int{0}, "0"},
		{"ranges", append(span(0, 100), append([]int{150}, span(200, 300)...)...), "0-99,150,200-299"},
		{"small, as a bitmap", []int{0, 1, 2, 3, 7, 9, 10}, "b:jwY"},
		{"word boundary", []int{62, 63, 64, 65, 127, 128}, "62-65,127-128"},
		{"scattered", everyOther(0, 2000), "b:"},
	} {
		var b assembly.Bitset
		for _, m := range tc.members {
			b.Add(m)
		}
		s := assembly.EncodeSet(b)
		if tc.want != "" && !strings.HasPrefix(s, tc.want) || tc.want == "" && len(tc.members) == 0 && s != "" {
			t.Errorf("%s: encoded %q, want %q", tc.name, s, tc.want)
		}
		got, err := assembly.DecodeSet(s, 4000)
		if err != nil {
			t.Fatalf("%s: decoding %q: %v", tc.name, s, err)
		}
		var members []int
		for i := range 4000 {
			if got.Has(i) {
				members = append(members, i)
			}
		}
		if diff := cmp.Diff(tc.members, members); diff != "" {
			t.Errorf("%s: round trip of %q (-want +got):\n%s", tc.name, s, diff)
		}
	}
	for _, bad := range []string{"1-", "-1", "3-2", "a", "b:!!", "9"} {
		if _, err := assembly.DecodeSet(bad, 5); err == nil {
			t.Errorf("decodeSet(%q, 5) succeeded", bad)
		}
	}
}

// TestAssemblerResumesExactlyOnce plays a reader that crashes at random
// points, many times over: each run starts from the last recorded
// position, gets every shard whose task was not settled yet (the
// responses interleaved, some twice), hands out batches at random moments,
// records the position after each (as Next does) and settles the shards it
// completed. Every sample of every epoch must be handed out exactly once
// over all runs, and every task settled.
func TestAssemblerResumesExactlyOnce(t *testing.T) {
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}, {0}, {5, 5}, {}} // a chunk without rows, a shard without chunks
	job := fixture.Job("j", 3, 4, l)
	byShard := map[assembly.ShardRef][]fixture.OutputMsg{}
	for _, m := range fixture.Outputs(t, job, l) {
		k := assembly.ShardRef{Epoch: m.Ref.Epoch, Shard: m.Ref.Shard}
		byShard[k] = append(byShard[k], m)
	}
	for trial := range 200 {
		rng := rand.New(rand.NewPCG(uint64(trial), 42))
		settled := map[assembly.ShardRef]bool{}
		delivered := map[string]int{}
		var stored []byte
		for run := 0; ; run++ {
			a := assembly.NewAssembler(job)
			if stored != nil {
				p, err := assembly.DecodePosition(stored)
				if err != nil {
					t.Fatal(err)
				}
				if err := a.Restore(p); err != nil {
					t.Fatalf("trial %d run %d: restore %s: %v", trial, run, stored, err)
				}
			}
			a.Start()
			// Every task not settled is sent again, a few of them twice
			// (a redelivery racing a retry); the responses interleave.
			var queues [][]fixture.OutputMsg
			for k, msgs := range byShard {
				if settled[k] {
					continue
				}
				queues = append(queues, msgs)
				if rng.IntN(5) == 0 {
					queues = append(queues, msgs)
				}
			}
			var todo []fixture.OutputMsg
			for len(queues) > 0 {
				i := rng.IntN(len(queues))
				todo = append(todo, queues[i][0])
				if queues[i] = queues[i][1:]; len(queues[i]) == 0 {
					queues = append(queues[:i], queues[i+1:]...)
				}
			}
			last := run >= 6
			crashAt := len(todo)
			if !last && len(todo) > 0 {
				crashAt = rng.IntN(len(todo) + 1)
			}
			var ready []assembly.ReadyBatch
			sync := func() {
				data, err := assembly.EncodePosition(a.Snapshot())
				if err != nil {
					t.Fatal(err)
				}
				stored = data
				for _, s := range a.TakeCompleted() {
					settled[s] = true
				}
			}
			handOut := func(n int) {
				for ; n > 0 && len(ready) > 0; n-- {
					b := ready[0]
					ready = ready[1:]
					a.HandOut(b)
					sync() // before the batch is returned
					for _, k := range b.Keys {
						delivered[fmt.Sprintf("%d/%s", b.Epoch, k)]++
					}
				}
			}
			for _, m := range todo[:crashAt] {
				out, err := fixture.ApplyMsg(a, m)
				if err != nil {
					t.Fatal(err)
				}
				ready = append(ready, out.Batches...)
				handOut(rng.IntN(3))
				if rng.IntN(4) == 0 {
					sync() // the keep-alive flush
				}
			}
			if !last {
				continue // crash: what was not recorded is lost with the run
			}
			handOut(len(ready))
			sync()
			if !a.AllFinished() || a.HeldBytes != 0 {
				t.Fatalf("trial %d: after the last run: finished %v, %d bytes held: %s", trial, a.AllFinished(), a.HeldBytes, stored)
			}
			break
		}
		for e := range job.Spec.Epochs {
			for s, chunks := range l {
				for c, n := range chunks {
					for i := range n {
						id := fmt.Sprintf("%d/%s", e, fixture.SampleKey(s, c, i))
						if delivered[id] != 1 {
							t.Fatalf("trial %d: sample %s delivered %d times", trial, id, delivered[id])
						}
						delete(delivered, id)
					}
				}
			}
		}
		if len(delivered) > 0 {
			t.Fatalf("trial %d: unexpected samples delivered: %v", trial, delivered)
		}
		for k := range byShard {
			if !settled[k] {
				t.Fatalf("trial %d: shard %d of epoch %d never settled", trial, k.Shard, k.Epoch)
			}
		}
	}
}

func TestRestoreRejectsForeignPositions(t *testing.T) {
	job := fixture.Job("j", 2, 4, fixture.Layout{{2}, {2}})
	for _, bad := range []string{
		`{"v":3}`,
		`{"v":1,"finished":3}`,
		`{"v":2,"epochs":{"0":{"shards":{"1":{"samples":2,"handed":"0-2"}}}}}`,
		`{"v":2,"epochs":{"0":{"shards":{"1":{"samples":-1}}}}}`,
		`{"v":1,"finished":1,"epochs":{"0":{"complete":"0"}}}`,
		`{"v":1,"epochs":{"0":{"complete":"0-2"}}}`,
		`{"v":1,"epochs":{"0":{"complete":"0","shards":{"0":{"chunks":"0"}}}}}`,
		`{"v":1,"epochs":{"0":{"shards":{"1":{"end":1,"chunks":"1"}}}}}`,
		`{"v":1,"epochs":{"0":{"shards":{"1":{"chunks":"0","rows":{"0":1}}}}}}`,
	} {
		p, err := assembly.DecodePosition([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if err := assembly.NewAssembler(job).Restore(p); err == nil {
			t.Errorf("restore(%s) succeeded", bad)
		}
	}
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func everyOther(from, to int) []int {
	var out []int
	for i := from; i < to; i += 2 {
		out = append(out, i)
	}
	return out
}
