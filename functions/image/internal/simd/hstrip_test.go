package simd

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestHStrip compares HStrip with the formula it computes over random
// spans, output counts (including ones not a multiple of the transposes'
// 16 bytes) and tap counts.
func TestHStrip(t *testing.T) {
	if !HStripOK() {
		t.Skip("no AVX2 here")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		taps := 1 + i%9
		w := taps + rng.IntN(120)
		outW := 1 + rng.IntN(90)
		stride := 3*w + rng.IntN(10)
		src := make([]uint8, 8*stride)
		for j := range src {
			src[j] = uint8(rng.Uint32())
		}
		ksize := taps + rng.IntN(3)
		starts := make([]int, outW)
		k := make([]int32, outW*ksize)
		for o := range outW {
			starts[o] = rng.IntN(w - taps + 1)
			for j := range taps {
				k[o*ksize+j] = int32(rng.IntN(1<<22)) - 1<<19
			}
		}
		outStride := 3*outW + rng.IntN(5)
		out := make([]uint8, 8*outStride)
		tb, ub := make([]uint8, 24*w), make([]uint8, 24*outW)
		HStrip(out, outStride, unsafe.Pointer(&src[0]), stride, w, starts, k, ksize, taps, tb, ub)
		for r := range 8 {
			for o := range outW {
				for c := range 3 {
					v := int32(1 << 21)
					for j := range taps {
						v += int32(src[r*stride+3*(starts[o]+j)+c]) * k[o*ksize+j]
					}
					want := uint8(max(0, min(255, v>>22)))
					if got := out[r*outStride+3*o+c]; got != want {
						t.Fatalf("case %d (w %d, outW %d, taps %d): row %d output %d channel %d = %d, want %d", i, w, outW, taps, r, o, c, got, want)
					}
				}
			}
			for b := 3 * outW; b < outStride; b++ {
				if out[r*outStride+b] != 0 {
					t.Fatalf("case %d: row %d byte %d past the outputs was written", i, r, b)
				}
			}
		}
	}
}
