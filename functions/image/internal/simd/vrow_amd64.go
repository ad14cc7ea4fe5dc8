//go:build amd64 && !purego

package simd

import (
	"sync"
	"unsafe"
)

//go:noescape
func vrowAVX2(out *uint8, n int, src *uint8, stride int, k *int32, taps int)

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)

// hasAVX2 reports whether the CPU and the OS support AVX2.
var hasAVX2 = sync.OnceValue(func() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if eax, _ := xgetbv(); eax&6 != 6 { // the OS saves XMM and YMM state
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
})

// Vrow is one output row of the vertical resampling pass, in AVX2, sixteen
// bytes at a time: out[i] = clamp((1<<21 + Σ_j src[i+j*stride]*k[j]) >> 22,
// 0, 255), the image package's 22-bit fixed-point arithmetic exactly. It
// writes the largest multiple of 16 bytes of out that fits and returns
// how many (0 without AVX2); the caller does the rest. The caller
// guarantees that rows src+j*stride hold len(out) bytes for j < len(k).
func Vrow(out []uint8, src unsafe.Pointer, stride uintptr, k []int32) int {
	n := len(out) &^ 15
	if n == 0 || len(k) == 0 || !hasAVX2() {
		return 0
	}
	vrowAVX2(unsafe.SliceData(out), n, (*uint8)(src), int(stride), unsafe.SliceData(k), len(k))
	return n
}
