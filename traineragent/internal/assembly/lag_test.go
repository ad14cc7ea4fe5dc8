package assembly_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

func TestShedding(t *testing.T) {
	for _, tc := range []struct {
		name  string
		held  []int64
		wants []bool
		want  []bool
	}{
		{"one reader never sheds", []int64{100}, []bool{false}, []bool{false}},
		{"a full laggard while another wants", []int64{60, 0}, []bool{false, true}, []bool{true, false}},
		{"under the bound", []int64{49, 0}, []bool{false, true}, []bool{false, false}},
		{"it wants more itself", []int64{60, 0}, []bool{true, true}, []bool{false, false}},
		{"nobody else wants more", []int64{60, 60}, []bool{false, false}, []bool{false, false}},
		{"two laggards, one eager", []int64{60, 70, 0}, []bool{false, false, true}, []bool{true, true, false}},
	} {
		if diff := cmp.Diff(tc.want, assembly.Shedding(tc.held, tc.wants, 50)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestAssemblerShedsOnlyUntouchedShards(t *testing.T) {
	l := fixture.Layout{{2, 2}, {2}, {2}}
	job := fixture.Job("j", 1, 2, l)
	msgs := fixture.Outputs(t, job, l) // s0: c0 c1 end, s1: c0 end, s2: c0 end
	a := assembly.NewAssembler(job)
	if _, err := fixture.ApplyMsg(a, msgs[0]); err != nil { // shard 0 started
		t.Fatal(err)
	}
	ref := func(s int) wire.ChunkRef { return wire.ChunkRef{Job: "j", Shard: s} }
	if a.Shed(ref(0)) {
		t.Error("shed a shard with a chunk held")
	}
	if !a.Shed(ref(1)) || !a.Shed(ref(1)) || !a.Owes(0, 1) {
		t.Error("did not shed (and owe) an untouched shard")
	}
	if got := a.OwedDue(0); fmt.Sprint(got) != "[1]" {
		t.Errorf("owed due %v, want [1]", got)
	}
	if got := a.TakeCompleted(); len(got) != 1 || got[0] != (assembly.ShardRef{Epoch: 0, Shard: 1}) {
		t.Errorf("completed for settling %v, want the owed shard", got)
	}
	// Asked for again (replayed), it is kept.
	a.Epoch(0).Replayed.Add(1)
	if a.Shed(ref(1)) {
		t.Error("shed a shard being replayed")
	}
	// The position keeps what is owed, and a resume replays it.
	p := a.Snapshot()
	if p.Epochs[0].Owed != "1" {
		t.Errorf("position %+v, want shard 1 owed", p.Epochs[0])
	}
	b := assembly.NewAssembler(job)
	if err := b.Restore(p); err != nil || !b.Owes(0, 1) {
		t.Fatalf("restored: owes %v, %v", b.Owes(0, 1), err)
	}
	set, err := assembly.ReplaySet(p, assembly.Position{Version: assembly.PositionVersion}, 1, len(l))
	// (Shard 0's chunk is held, not handed out: the position has none of
	// it, and a resume replays it because the reader holds it.)
	if err != nil || fmt.Sprint(set) != "map[0:[1]]" {
		t.Errorf("replay set %v, %v; want shard 1 (owed)", set, err)
	}
}
