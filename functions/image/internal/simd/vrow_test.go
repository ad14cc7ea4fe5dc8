package simd

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"
)

// TestVrow compares Vrow with the formula it computes, for every tap count
// up to 12, extreme weights and lengths around multiples of 16.
func TestVrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	wrote := 0
	for i := range 2000 {
		taps := 1 + i%12
		n := rng.IntN(100)
		stride := n + rng.IntN(20)
		src := make([]uint8, stride*taps+1)
		for j := range src {
			src[j] = uint8(rng.Uint32())
		}
		k := make([]int32, taps)
		for j := range k {
			switch rng.IntN(4) {
			case 0:
				k[j] = 1 << 22 // a whole weight: sums beyond 255 clip
			case 1:
				k[j] = -int32(rng.IntN(1 << 21)) // negative: sums below 0 clip
			default:
				k[j] = int32(rng.IntN(1 << 22))
			}
		}
		out := make([]uint8, n)
		done := Vrow(out, unsafe.Pointer(&src[0]), uintptr(stride), k)
		if done%16 != 0 || done > n || (done > 0 && done != n&^15) {
			t.Fatalf("n %d: wrote %d bytes", n, done)
		}
		wrote += done
		for x := range done {
			v := int32(1 << 21)
			for j, w := range k {
				v += int32(src[j*stride+x]) * w
			}
			v >>= 22
			want := uint8(max(0, min(255, v)))
			if out[x] != want {
				t.Fatalf("taps %d n %d byte %d: %d, want %d", taps, n, x, out[x], want)
			}
		}
		for x := done; x < n; x++ {
			if out[x] != 0 {
				t.Fatalf("byte %d past the %d written was touched", x, done)
			}
		}
	}
	if runtime.GOARCH == "amd64" && hasAVX2Here() && wrote == 0 {
		t.Fatal("AVX2 is available but Vrow wrote nothing")
	}
}
