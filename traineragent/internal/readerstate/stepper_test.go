package readerstate_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
)

// TestSplitRowsAliasesTheChunks: parts cut across batches (one as runs of
// chunk rows, one whole) hold each rank's rows in order, as runs over the
// batches' own memory.
func TestSplitRowsAliasesTheChunks(t *testing.T) {
	chunk := []byte("aaBBccDDee") // 5 rows of 2 bytes
	a := assembly.ReadyBatch{Batch: assembly.Batch{Epoch: 1, Keys: []string{"a", "b", "c"},
		Tensors: []safetensors.Tensor{{Name: "x", DType: safetensors.U8, Shape: []int{3, 2}}},
		Runs:    [][][]byte{{chunk[0:4:4], chunk[4:6:6]}}}}
	b := assembly.ReadyBatch{Batch: assembly.Batch{Epoch: 1, Keys: []string{"d", "e"},
		Tensors: []safetensors.Tensor{{Name: "x", DType: safetensors.U8, Shape: []int{2, 2}, Data: chunk[6:10:10]}}}}
	parts := readerstate.SplitRows(1, []assembly.ReadyBatch{a, b}, []int{2, 3, 0})
	want := []struct {
		keys []string
		data string
	}{{[]string{"a", "b"}, "aaBB"}, {[]string{"c", "d", "e"}, "ccDDee"}, {nil, ""}}
	for r, p := range parts {
		if p.DataLen(0) != len(want[r].data) {
			t.Errorf("part %d: %d bytes, want %d", r, p.DataLen(0), len(want[r].data))
		}
		for _, run := range p.Data(0) {
			if &run[0] != &chunk[bytes.Index(chunk, run)] {
				t.Errorf("part %d: run %q is a copy", r, run)
			}
		}
		p.Materialize()
		if !slices.Equal(p.Keys, want[r].keys) && len(want[r].keys)+len(p.Keys) > 0 {
			t.Errorf("part %d: keys %v, want %v", r, p.Keys, want[r].keys)
		}
		if got := string(p.Tensors[0].Data); got != want[r].data || !slices.Equal(p.Tensors[0].Shape, []int{len(want[r].keys), 2}) {
			t.Errorf("part %d: %q shape %v, want %q", r, got, p.Tensors[0].Shape, want[r].data)
		}
	}
}

func TestCutRuns(t *testing.T) {
	runs := [][]byte{[]byte("abc"), []byte(""), []byte("de"), []byte("fghi")}
	for _, c := range []struct {
		from, to int
		want     string
	}{{0, 9, "abc|de|fghi"}, {1, 4, "bc|d"}, {3, 5, "de"}, {4, 4, ""}, {5, 7, "fg"}, {8, 9, "i"}} {
		var got []string
		for _, r := range readerstate.CutRuns(runs, c.from, c.to) {
			got = append(got, string(r))
		}
		if g := strings.Join(got, "|"); g != c.want {
			t.Errorf("cutRuns(%d, %d) = %q, want %q", c.from, c.to, g, c.want)
		}
	}
}
