package readerstate_test

import (
	"encoding/json"
	"testing"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
)

// TestPositionSizeFor10000Shards measures the recorded position of an
// epoch of 10,000 shards: when shards complete roughly in order (as the
// dispatcher hands them out) and in the worst case, every other shard,
// also with the others being replayed after a resume. A trainer's state
// holding it stays well under 64 KiB.
func TestPositionSizeFor10000Shards(t *testing.T) {
	const shards = 10000
	l := make(fixture.Layout, shards)
	for s := range l {
		l[s] = []int{2, 2}
	}
	job := fixture.Job("big", 2, 1, l)
	for _, tc := range []struct {
		name   string
		done   func(s int) bool // shards handed out in full
		replay bool             // the others are being replayed
	}{
		{"in order, 16 shards in flight", func(s int) bool { return s < 6000 }, false},
		{"every other shard", func(s int) bool { return s%2 == 0 }, false},
		{"every other shard, the others replayed", func(s int) bool { return s%2 == 0 }, true},
	} {
		a := assembly.NewAssembler(job)
		a.Start()
		a.Finished = 1 // epoch 0 finished
		add := func(ref fixture.OutputMsg) []assembly.ReadyBatch {
			out, err := fixture.ApplyMsg(a, ref)
			if err != nil {
				t.Fatal(err)
			}
			return out.Batches
		}
		msgs := fixture.Outputs(t, fixture.Job("big", 2, 1, l[:1]), l[:1]) // epoch 0 and 1 of shard 0: c0, c1, end
		for s := range shards {
			var batches []assembly.ReadyBatch
			flight := !tc.done(s) && s >= 6000 && s < 6016
			if !tc.done(s) && !flight {
				continue
			}
			for _, m := range msgs[3:] { // epoch 1
				m.Ref.Shard = s
				batches = append(batches, add(m)...)
			}
			n := len(batches)
			if flight {
				n = 3 // chunk 0 in full, the first row of chunk 1
			}
			for _, b := range batches[:n] {
				a.HandOut(b)
			}
		}
		if tc.replay {
			var odd []int
			for s := 1; s < shards; s += 2 {
				odd = append(odd, s)
			}
			a.MarkReplayed(map[int][]int{1: odd})
		}
		data, err := assembly.EncodePosition(a.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: position of a 10,000-shard epoch: %d bytes", tc.name, len(data))
		if len(data) > 4<<10 {
			t.Errorf("%s: position is %d bytes, want at most 4 KiB", tc.name, len(data))
		}
		state, err := json.Marshal(readerstate.TrainerState{Version: readerstate.StateVersion, Job: "big", Reader: "trainer", Epoch: 1, Step: 1234,
			WorldSize: 8, Position: data})
		if err != nil {
			t.Fatal(err)
		}
		if len(state) > 8<<10 {
			t.Errorf("%s: trainer state is %d bytes, want well under 64 KiB", tc.name, len(state))
		}
		// It restores to the same position.
		p, err := assembly.DecodePosition(data)
		if err != nil {
			t.Fatal(err)
		}
		b := assembly.NewAssembler(job)
		if err := b.Restore(p); err != nil {
			t.Fatal(err)
		}
		again, _ := assembly.EncodePosition(b.Snapshot())
		if string(again) != string(data) {
			t.Errorf("%s: restored position differs:\n%s\n%s", tc.name, data, again)
		}
	}
}
