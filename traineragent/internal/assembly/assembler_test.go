package assembly_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// feed applies msgs in order, hands every batch out at once and collects
// the batches and the epochs cut.
func feed(t *testing.T, a *assembly.Assembler, msgs []fixture.OutputMsg) (batches []assembly.Batch, completed []int, dups int, failed []wire.FailedSample) {
	t.Helper()
	for _, m := range msgs {
		out, err := fixture.ApplyMsg(a, m)
		if err != nil {
			t.Fatalf("add %s: %v", m.Ref, err)
		}
		for _, b := range out.Batches {
			fixture.CheckBatch(t, b.Batch)
			a.HandOut(b)
			batches = append(batches, b.Batch)
		}
		completed = append(completed, out.Cut...)
		failed = append(failed, out.Failed...)
		if out.Duplicate {
			dups++
		}
	}
	return
}

func TestAssemblerBatchesPerEpochExactlyOnce(t *testing.T) {
	l := fixture.Layout{{3, 2}, {4}, {1, 2, 3}} // 15 samples per epoch
	job := fixture.Job("j", 2, 4, l)
	msgs := fixture.Outputs(t, job, l)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	// Re-publications: a chunk and a shard end again, somewhere later.
	msgs = append(msgs, msgs[3], msgs[0])
	for i := range msgs {
		if msgs[i].Ref.Chunk == -1 {
			msgs = append(msgs, msgs[i])
			break
		}
	}
	a := assembly.NewAssembler(job)
	batches, completed, dups, failed := feed(t, a, msgs)

	if dups != 3 {
		t.Errorf("duplicates = %d, want 3", dups)
	}
	if len(failed) != 6 {
		t.Errorf("failed = %v, want one per shard per epoch", failed)
	}
	if diff := cmp.Diff([]int{0, 1}, slices.Sorted(slices.Values(completed))); diff != "" {
		t.Errorf("completed epochs (-want +got):\n%s", diff)
	}
	if !a.AllCut() || !a.AllFinished() || a.Pending != 0 || len(a.Open) != 0 {
		t.Errorf("after all: cut=%v finished=%v pending=%d open=%d", a.AllCut(), a.AllFinished(), a.Pending, len(a.Open))
	}
	seen := map[string]bool{}
	perEpoch := map[int][]int{}
	for _, b := range batches {
		perEpoch[b.Epoch] = append(perEpoch[b.Epoch], len(b.Keys))
		for _, k := range b.Keys {
			id := fmt.Sprintf("%d/%s", b.Epoch, k)
			if seen[id] {
				t.Errorf("sample %s delivered twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != 30 {
		t.Errorf("delivered %d samples, want 30", len(seen))
	}
	want := map[int][]int{0: {4, 4, 4, 3}, 1: {4, 4, 4, 3}}
	if diff := cmp.Diff(want, perEpoch); diff != "" {
		t.Errorf("batch sizes per epoch (-want +got):\n%s", diff)
	}
}

func TestAssemblerWaitsForEveryChunkTheShardEndAnnounces(t *testing.T) {
	l := fixture.Layout{{2, 2}}
	job := fixture.Job("j", 1, 3, l)
	msgs := fixture.Outputs(t, job, l) // chunk 0, chunk 1, end
	a := assembly.NewAssembler(job)
	// The end first, then chunk 1: the shard still misses chunk 0.
	batches, completed, _, _ := feed(t, a, []fixture.OutputMsg{msgs[2], msgs[1]})
	if len(batches) != 0 || len(completed) != 0 {
		t.Fatalf("before chunk 0: batches %d, completed %v; want none", len(batches), completed)
	}
	batches, completed, _, _ = feed(t, a, []fixture.OutputMsg{msgs[0]})
	if len(completed) != 1 || len(batches) != 2 || len(batches[0].Keys) != 3 || len(batches[1].Keys) != 1 {
		t.Fatalf("after chunk 0: %d batches, completed %v; want a batch of 3, the final one of 1, epoch 0 complete", len(batches), completed)
	}
	// Anything of a complete epoch is a duplicate.
	out, err := fixture.ApplyMsg(a, msgs[1])
	if err != nil || !out.Duplicate {
		t.Fatalf("chunk of a complete epoch: duplicate=%v err=%v", out.Duplicate, err)
	}
}

func TestAssemblerReportsBadMessages(t *testing.T) {
	l := fixture.Layout{{2}, {2}}
	job := fixture.Job("j", 1, 2, l)
	msgs := fixture.Outputs(t, job, l)
	a := assembly.NewAssembler(job)

	for _, ref := range []wire.ChunkRef{{Job: "j", Epoch: 1, Shard: 0, Chunk: 0}, {Job: "j", Epoch: 0, Shard: 2, Chunk: 0}} {
		if _, err := a.Add(ref, msgs[0].Data); err == nil {
			t.Errorf("%s: out of range, want an error", ref)
		}
	}
	if _, err := a.End(wire.ChunkRef{Job: "j", Shard: 0, Chunk: -1}, wire.ShardEnd{Chunks: -1}, true); err == nil || !strings.Contains(err.Error(), "shard end") {
		t.Errorf("shard end of -1 chunks: err = %v", err)
	}

	// A corrupt chunk is refused (where its rows fall is not known): its
	// send fails, and the shard comes again.
	out, err := a.Add(msgs[0].Ref, []byte("not safetensors"))
	if err == nil || !strings.Contains(err.Error(), "corrupt chunk") {
		t.Fatalf("corrupt chunk: out=%+v err=%v", out, err)
	}
	// So is a chunk after a gap that does not say its first row.
	if _, err := a.Add(wire.ChunkRef{Job: "j", Shard: 0, Chunk: 1}, fixture.ChunkBytes(t, "j", 0, 0, 1, []string{"x"})); err == nil || !strings.Contains(err.Error(), "not known") {
		t.Errorf("chunk 1 first, not saying its row: err = %v", err)
	}
	// A chunk whose tensors differ from the first chunk's cannot be stacked.
	other := fixture.ChunkBytes(t, "j", 0, 1, 0, []string{"a", "b"})
	if _, err := a.Add(wire.ChunkRef{Job: "j", Shard: 1, Chunk: 0}, other); err != nil {
		t.Fatal(err)
	}
	a2 := assembly.NewAssembler(job)
	a2.Schema = &assembly.Schema{Names: []string{"image"}}
	out, err = a2.Add(wire.ChunkRef{Job: "j", Shard: 1, Chunk: 0}, other)
	if err != nil || len(out.Failed) != 2 || out.Arrived != 0 || !strings.Contains(out.Failed[0].Reason, "cannot stack") {
		t.Fatalf("mismatched chunk: out=%+v err=%v", out, err)
	}
}

func TestAssemblerJobWithoutShardsIsCompleteAtOnce(t *testing.T) {
	a := assembly.NewAssembler(fixture.Job("j", 3, 2, fixture.Layout{}))
	if diff := cmp.Diff([]int{0, 1, 2}, a.Start()); diff != "" || !a.AllCut() || !a.AllFinished() {
		t.Errorf("start (-want +got):\n%s", diff)
	}
}

func TestSplitChunkRejectsRowMismatch(t *testing.T) {
	bad, err := safetensors.Encode([]safetensors.Tensor{{Name: "label", DType: safetensors.I64, Shape: []int{2}, Data: make([]byte, 16)}},
		map[string]string{wire.MetaKeys: `["a","b","c"]`})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := assembly.SplitChunk(bad); err == nil || !strings.Contains(err.Error(), "want 3 rows") {
		t.Errorf("3 keys and 2 rows: err = %v", err)
	}
}
