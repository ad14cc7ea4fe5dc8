//go:build !amd64 || purego

package simd

import "unsafe"

// Vrow has no vector implementation on this platform: it does nothing and
// the caller's scalar loop does the row.
func Vrow([]uint8, unsafe.Pointer, uintptr, []int32) int { return 0 }

// HStripOK reports whether HStrip runs here: never on this platform.
func HStripOK() bool { return false }

// HStrip is not implemented on this platform; HStripOK says so.
func HStrip([]uint8, int, unsafe.Pointer, int, int, []int, []int32, int, int, []uint8, []uint8) {
	panic("simd: HStrip without AVX2")
}
