package assembly_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/traineragent/internal/assembly"
	"github.com/sluice-project/sluice/wire"
)

// expandChunk is a chunk of n rows of U8 [2,2,3] images, expanded by exp
// to F32 planes, and a label.
func expandChunk(t *testing.T, n int, expand map[string]*wire.Expansion, img safetensors.Tensor) []byte {
	t.Helper()
	meta := map[string]string{wire.MetaKeys: `[` + strings.TrimSuffix(strings.Repeat(`"k",`, n), ",") + `]`}
	if expand != nil {
		s, err := wire.EncodeExpansions(expand)
		if err != nil {
			t.Fatal(err)
		}
		meta[wire.MetaExpand] = s
	}
	lab := safetensors.Tensor{Name: "label", DType: safetensors.I64, Shape: []int{n}, Data: make([]byte, 8*n)}
	data, err := safetensors.Encode([]safetensors.Tensor{img, lab}, meta)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSplitChunkExpands: a chunk whose image is expanded gives samples of
// the trainer's schema (F32 [3,H,W]) whose batch holds the planes; an
// expansion that names no tensor of the chunk, or one of the wrong dtype
// or channels, is refused by name.
func TestSplitChunkExpands(t *testing.T) {
	tables := make([][256]uint32, 3)
	for c := range tables {
		for v := range tables[c] {
			tables[c][v] = math.Float32bits(float32(100*c + v))
		}
	}
	exp, err := wire.NewExpansion("F32", tables)
	if err != nil {
		t.Fatal(err)
	}
	pix := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12} // one row: 2x2 RGB
	img := safetensors.Tensor{Name: "image", DType: safetensors.U8, Shape: []int{1, 2, 2, 3}, Data: pix}
	samples, sc, err := assembly.SplitChunk(expandChunk(t, 1, map[string]*wire.Expansion{"image": exp}, img))
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.String(); got != "image:F32[3 2 2] label:I64[]" {
		t.Errorf("schema %s, want image:F32[3 2 2] label:I64[]", got)
	}
	b := assembly.Stack(0, sc, samples).Batch
	b.Materialize()
	var want []byte
	for c := range 3 {
		for p := range 4 {
			want = binary.LittleEndian.AppendUint32(want, math.Float32bits(float32(100*c)+float32(pix[3*p+c])))
		}
	}
	if !bytes.Equal(b.Tensors[0].Data, want) || !slices.Equal(b.Tensors[0].Shape, []int{1, 3, 2, 2}) {
		t.Errorf("image %v % x, want [1 3 2 2] % x", b.Tensors[0].Shape, b.Tensors[0].Data, want)
	}

	for _, c := range []struct {
		name   string
		expand map[string]*wire.Expansion
		img    safetensors.Tensor
		want   string
	}{
		{"no such tensor", map[string]*wire.Expansion{"pixels": exp}, img, `names tensor "pixels"`},
		{"not U8", map[string]*wire.Expansion{"image": exp},
			safetensors.Tensor{Name: "image", DType: safetensors.F16, Shape: []int{1, 2, 3}, Data: pix}, "takes U8 [n,H,W,3]"},
		{"other channels", map[string]*wire.Expansion{"image": exp},
			safetensors.Tensor{Name: "image", DType: safetensors.U8, Shape: []int{1, 3, 2, 2}, Data: pix}, "takes U8 [n,H,W,3]"},
	} {
		if _, _, err := assembly.SplitChunk(expandChunk(t, 1, c.expand, c.img)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: SplitChunk = %v, want an error with %q", c.name, err, c.want)
		}
	}
}
