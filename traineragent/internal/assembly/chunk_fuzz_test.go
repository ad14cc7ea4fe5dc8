package assembly_test

import (
	"testing"

	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/wire"
)

// FuzzAssemblerChunk feeds the assembler a real chunk, then an arbitrary
// one (as a replica's reply would carry it), then a shard end of any
// sample count, handing out every batch: no panic, no row handed out
// twice, the bookkeeping consistent, and the position it records readable
// again.
func FuzzAssemblerChunk(f *testing.F) {
	job := fixture.Job("j", 1, 3, fixture.Layout{{8}})
	keys := func(lo, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fixture.RowKey(0, lo+i)
		}
		return out
	}
	f.Add(fixture.ChunkBytesAt(f, "j", 0, 0, 1, 4, keys(4, 4)), uint8(1), uint16(8))
	f.Add(fixture.ChunkBytesAt(f, "j", 0, 0, 0, 2, keys(2, 6)), uint8(0), uint16(8))
	f.Add(fixture.ChunkBytesAt(f, "j", 0, 0, 1, -1, keys(4, 4)), uint8(1), uint16(7))
	f.Add(fixture.ChunkBytesAt(f, "j", 0, 0, 3, 6, keys(6, 4)), uint8(3), uint16(10))
	f.Add([]byte("not safetensors"), uint8(1), uint16(4))
	first := fixture.ChunkBytesAt(f, "j", 0, 0, 0, 0, keys(0, 4))
	f.Fuzz(func(t *testing.T, data []byte, index uint8, samples uint16) {
		// A key names one row: skip chunks that give a key two rows (a
		// row handed out twice would then be two rows).
		if rows, _, at, err := assembly.SplitChunkAt(data); err == nil {
			if at < 0 { // after the first chunk's 4 rows, as its send goes on
				at = 4 * min(int(index), 1)
			}
			names := map[string]int{}
			for i, k := range keys(0, 4) {
				names[k] = i
			}
			for i, r := range rows {
				if row, ok := names[r.Key]; ok && row != at+i {
					t.Skip("a key of two rows")
				}
				names[r.Key] = at + i
			}
		}
		a := assembly.NewAssembler(job)
		seen := map[string]bool{}
		hand := func(out assembly.Outcome) {
			for _, b := range out.Batches {
				for _, k := range b.Keys {
					if seen[k] {
						t.Fatalf("row %s handed out twice", k)
					}
					seen[k] = true
				}
				a.HandOut(b)
			}
		}
		out, err := a.Add(wire.ChunkRef{Job: "j", Chunk: 0}, first)
		if err != nil {
			t.Fatal(err)
		}
		hand(out)
		if out, err := a.Add(wire.ChunkRef{Job: "j", Chunk: int(index)}, data); err == nil {
			hand(out)
		}
		out, err = a.End(wire.ChunkRef{Job: "j", Chunk: -1}, wire.ShardEnd{Job: "j", Chunks: int(index) + 1, Samples: int(samples)}, true)
		if err != nil {
			t.Fatal(err)
		}
		hand(out)
		if a.Pending < 0 || a.HeldBytes < 0 {
			t.Fatalf("pending %d, held %d bytes", a.Pending, a.HeldBytes)
		}
		p, err := assembly.DecodePosition(encodeForTest(t, a.Snapshot()))
		if err != nil {
			t.Fatal(err)
		}
		if err := assembly.NewAssembler(job).Restore(p); err != nil {
			t.Fatalf("restoring the position recorded: %v", err)
		}
	})
}

func encodeForTest(t *testing.T, p assembly.Position) []byte {
	t.Helper()
	data, err := assembly.EncodePosition(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
