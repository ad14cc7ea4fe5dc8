package readerstate_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
	"github.com/sluice-project/sluice/wire"
)

// TestSplitRowsAliasesTheChunks: parts cut across batches (one as runs of
// chunk rows, one whole) hold each rank's rows in order, as runs over the
// batches' own memory.
func TestSplitRowsAliasesTheChunks(t *testing.T) {
	chunk := []byte("aaBBccDDee") // 5 rows of 2 bytes
	a := assembly.ReadyBatch{Batch: assembly.Batch{Epoch: 1, Keys: []string{"a", "b", "c"},
		Tensors: []safetensors.Tensor{{Name: "x", DType: safetensors.U8, Shape: []int{3, 2}}},
		Runs:    [][]assembly.Run{{{Data: chunk[0:4:4]}, {Data: chunk[4:6:6]}}}}}
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
			if &run.Data[0] != &chunk[bytes.Index(chunk, run.Data)] {
				t.Errorf("part %d: run %q is a copy", r, run.Data)
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

// TestSplitRowsExpands: a part cut from an expanded run (U8 rows the
// trainer gets as F32 planes) and a whole batch of F32 rows, as a rolling
// upgrade mixes them, holds each rank's rows expanded, in order.
func TestSplitRowsExpands(t *testing.T) {
	tables := make([][256]uint32, 1)
	for v := range 256 {
		tables[0][v] = math.Float32bits(float32(v) / 2)
	}
	exp, err := wire.NewExpansion("F32", tables)
	if err != nil {
		t.Fatal(err)
	}
	f32 := func(vs ...float32) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		return b
	}
	raw := []byte{2, 4, 6, 8, 10, 12} // 3 rows of [1,1,2]
	a := assembly.ReadyBatch{Batch: assembly.Batch{Epoch: 0, Keys: []string{"a", "b", "c"},
		Tensors: []safetensors.Tensor{{Name: "image", DType: safetensors.F32, Shape: []int{3, 1, 1, 2}}},
		Runs:    [][]assembly.Run{{{Data: raw[:4], Expand: exp}, {Data: raw[4:], Expand: exp}}}}}
	b := assembly.ReadyBatch{Batch: assembly.Batch{Epoch: 0, Keys: []string{"d"},
		Tensors: []safetensors.Tensor{{Name: "image", DType: safetensors.F32, Shape: []int{1, 1, 1, 2}, Data: f32(7, 8)}}}}
	parts := readerstate.SplitRows(0, []assembly.ReadyBatch{a, b}, []int{1, 3})
	want := [][]byte{f32(1, 2), f32(3, 4, 5, 6, 7, 8)}
	for r, p := range parts {
		if p.DataLen(0) != len(want[r]) {
			t.Errorf("part %d: %d bytes, want %d", r, p.DataLen(0), len(want[r]))
		}
		var file bytes.Buffer
		head, _, err := p.Header(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WriteFile(&file, head); err != nil {
			t.Fatal(err)
		}
		p.Materialize()
		if !bytes.Equal(p.Tensors[0].Data, want[r]) {
			t.Errorf("part %d: materialized % x, want % x", r, p.Tensors[0].Data, want[r])
		}
		if got := file.Bytes()[len(head):]; !bytes.Equal(got, want[r]) {
			t.Errorf("part %d: written % x, want % x", r, got, want[r])
		}
	}
}

func TestCutRuns(t *testing.T) {
	var runs []assembly.Run
	for _, s := range []string{"abc", "", "de", "fghi"} {
		runs = append(runs, assembly.Run{Data: []byte(s)})
	}
	for _, c := range []struct {
		from, to int
		want     string
	}{{0, 9, "abc|de|fghi"}, {1, 4, "bc|d"}, {3, 5, "de"}, {4, 4, ""}, {5, 7, "fg"}, {8, 9, "i"}} {
		var got []string
		for _, r := range readerstate.CutRuns(runs, c.from, c.to) {
			got = append(got, string(r.Data))
		}
		if g := strings.Join(got, "|"); g != c.want {
			t.Errorf("cutRuns(%d, %d) = %q, want %q", c.from, c.to, g, c.want)
		}
	}
}
