//go:build amd64 && !purego

package simd

import "unsafe"

//go:noescape
func transpose8x16(dst *uint8, src *uint8, stride int, blocks int)

//go:noescape
func untranspose16x8(dst *uint8, stride int, src *uint8, blocks int)

//go:noescape
func hstripAVX2(out *uint8, n int, t *uint8, starts *int, k *int32, kstride int, taps int)

// HStripOK reports whether HStrip runs here.
func HStripOK() bool { return hasAVX2() }

// HStrip is the horizontal resampling pass over eight rows at once, for
// the image package (which checks every index beforehand): rows r < 8 of
// src, stride bytes apart, hold w pixels of 3 bytes (the span the taps
// read); output pixel i < outW of row r, at out + r*outStride + 3i, is the
// sum over j < taps of pixel starts[i]+j (relative to the span's start)
// times k[i*ksize+j], in each channel, plus 1<<21, shifted right 22 and
// clamped to 0..255. t must hold 24*w bytes and u 24*outW, as scratch.
func HStrip(out []uint8, outStride int, src unsafe.Pointer, stride, w int, starts []int, k []int32, ksize, taps int, t, u []uint8) {
	outW := len(starts)
	// Transpose the span: byte b of row r goes to t[8b + r].
	n := 3 * w
	blocks := n / 16
	if blocks > 0 {
		transpose8x16(unsafe.SliceData(t), (*uint8)(src), stride, blocks)
	}
	for b := blocks * 16; b < n; b++ {
		for r := range 8 {
			t[8*b+r] = *(*uint8)(unsafe.Add(src, r*stride+b))
		}
	}
	hstripAVX2(unsafe.SliceData(u), outW, unsafe.SliceData(t), unsafe.SliceData(starts), unsafe.SliceData(k), ksize*4, taps)
	// And back: u[8b + r] is byte b of output row r.
	n = 3 * outW
	blocks = n / 16
	if blocks > 0 {
		untranspose16x8(unsafe.SliceData(out), outStride, unsafe.SliceData(u), blocks)
	}
	for b := blocks * 16; b < n; b++ {
		for r := range 8 {
			out[r*outStride+b] = u[8*b+r]
		}
	}
}
