package image

import "image"

// DCT scaling: a JPEG decoder can reconstruct each 8x8 block at num x num
// pixels (num/8 the scale) for about the cost of the smaller inverse DCT, which
// both saves the work and low-pass filters the image. The turbojpeg build
// picks the scale with these; they are plain arithmetic, so they live in
// every build and are tested in both.

// scaleFor is the smallest scale num/8 (num 1, 2, 4 or 8) at which the
// region r of a w×h image still measures at least minW×minH pixels, or its
// own size where that is smaller: the resize after it then only ever
// shrinks or keeps, never enlarges. libjpeg-turbo has SIMD inverse DCTs
// for these four sizes only; its plain-C 3x3, 5x5, 6x6 and 7x7 ones cost
// more than the full 8x8 (measured: decoding at 5/8 to 7/8 is 25-100%
// slower than at 8/8), so the scales in between are never worth it.
func scaleFor(r image.Rectangle, w, h, minW, minH int) int {
	needW, needH := min(minW, r.Dx()), min(minH, r.Dy())
	for _, num := range []int{1, 2, 4} {
		s := scaledRegion(r, w, h, num)
		if s.Dx() >= needW && s.Dy() >= needH {
			return num
		}
	}
	return 8
}

// scaledRegion maps r, in the w×h image's pixels, to the pixels of the
// image decoded at num/8 (ceil(w*num/8) x ceil(h*num/8), as libjpeg sizes
// it): each edge rounds to the nearest scaled pixel edge, so the mapped
// region is off by at most half a scaled pixel per edge; it stays
// non-empty and inside the scaled image. At num 8 it is r.
func scaledRegion(r image.Rectangle, w, h, num int) image.Rectangle {
	x0, x1 := scaleSpan(r.Min.X, r.Max.X, num, ceilDiv(w*num, 8))
	y0, y1 := scaleSpan(r.Min.Y, r.Max.Y, num, ceilDiv(h*num, 8))
	return image.Rect(x0, y0, x1, y1)
}

// scaleSpan scales [a, b) by num/8, rounding half up, within [0, n).
func scaleSpan(a, b, num, n int) (int, int) {
	a2 := max(min((a*num+4)/8, n-1), 0)
	b2 := min(max((b*num+4)/8, a2+1), n)
	return a2, b2
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
