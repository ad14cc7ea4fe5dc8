package image

import (
	"fmt"
	"image"
	"math"
	"sync"
)

// Resampling follows Pillow's Image.resize with the BILINEAR filter
// (libImaging/Resample.c), which is what torchvision's Resize and
// RandomResizedCrop do to PIL images: a separable triangle filter whose
// support widens with the downscale factor (so downscaling averages every
// source pixel instead of aliasing), weights normalised and turned into
// 22-bit fixed point, a horizontal pass rounded to uint8, then a vertical
// pass. The source rectangle is treated as if cropped first: no pixel
// outside it contributes, as with torchvision's crop-then-resize.

// precisionBits is Pillow's PRECISION_BITS for 8-bit images (32 - 8 - 2).
const precisionBits = 32 - 8 - 2

// coeffs are the filter taps of one axis: output i reads n[i] source
// pixels starting at start[i], weighted by k[i*ksize:][:n[i]].
type coeffs struct {
	start, n []int
	k        []int32
	ksize    int
}

// compute fills c for resampling the source span [in0, in0+inSize) to
// outSize pixels. Coordinates are computed relative to in0, as Pillow
// does on a cropped image, so the float rounding is the same.
func (c *coeffs) compute(in0, inSize, outSize int) {
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1)
	support := filterScale // the triangle filter's support is 1
	c.ksize = int(math.Ceil(support))*2 + 1
	c.start = grow(c.start, outSize)
	c.n = grow(c.n, outSize)
	c.k = grow(c.k, outSize*c.ksize)
	var w [64]float64 // ksize stays small for the downscales we meet; else allocate
	ws := w[:0]
	if c.ksize > len(w) {
		ws = make([]float64, 0, c.ksize)
	}
	ss := 1 / filterScale
	for i := range outSize {
		center := (float64(i) + 0.5) * scale
		// int() truncates toward zero like Pillow's (int) cast.
		lo := max(int(center-support+0.5), 0)
		hi := min(int(center+support+0.5), inSize)
		ws = ws[:0]
		sum := 0.0
		for x := lo; x < hi; x++ {
			v := triangle((float64(x) - center + 0.5) * ss)
			ws = append(ws, v)
			sum += v
		}
		k := c.k[i*c.ksize : (i+1)*c.ksize]
		clear(k)
		for j, v := range ws {
			if sum != 0 {
				v /= sum
			}
			if v < 0 {
				k[j] = int32(-0.5 + v*(1<<precisionBits))
			} else {
				k[j] = int32(0.5 + v*(1<<precisionBits))
			}
		}
		c.start[i] = in0 + lo
		c.n[i] = hi - lo
	}
}

func triangle(x float64) float64 {
	x = math.Abs(x)
	if x < 1 {
		return 1 - x
	}
	return 0
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func clip8(v int32) uint8 {
	v >>= precisionBits
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// scratch is the per-call working memory of a resize, pooled so a replica
// resizing thousands of samples does not churn the garbage collector.
type scratch struct {
	h, v coeffs
	tmp  []uint8
	acc  []int32
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// Resize resamples the rectangle r of src to a new w×h image.
func Resize(src *RGB, r image.Rectangle, w, h int) (*RGB, error) {
	dst := NewRGB(w, h)
	if err := ResizeInto(dst, src, r); err != nil {
		return nil, err
	}
	return dst, nil
}

// ResizeInto resamples the rectangle r of src to fill dst, whose W and H
// give the output size (its Pix must hold W*H*3 bytes).
func ResizeInto(dst, src *RGB, r image.Rectangle) error {
	if r.Empty() || !r.In(src.Bounds()) {
		return fmt.Errorf("resize source %v: not a non-empty part of the %dx%d image", r, src.W, src.H)
	}
	if dst.W <= 0 || dst.H <= 0 || len(dst.Pix) != dst.W*dst.H*3 {
		return fmt.Errorf("resize target %dx%d with %d bytes: want positive sides and W*H*3 bytes", dst.W, dst.H, len(dst.Pix))
	}
	if r.Dx() == dst.W && r.Dy() == dst.H {
		// Both passes are the identity at scale 1 (one tap of weight 1).
		return Crop(dst, src, r)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)

	s.v.compute(r.Min.Y, r.Dy(), dst.H)
	// Only the source rows some output row reads need the horizontal pass.
	y0 := s.v.start[0]
	y1 := s.v.start[dst.H-1] + s.v.n[dst.H-1]

	// Horizontal pass: rows y0..y1 of the span, into tmp (dst.W wide).
	// Skipping it (same width), the vertical pass reads src's columns
	// from r.Min.X on.
	mid, x0 := src, r.Min.X
	if r.Dx() != dst.W {
		s.h.compute(r.Min.X, r.Dx(), dst.W)
		s.tmp = grow(s.tmp, (y1-y0)*dst.W*3)
		horizontal(s.tmp, dst.W, src, y0, y1, &s.h)
		// tmp's row 0 is source row y0; shift the vertical taps to match.
		for i := range s.v.start {
			s.v.start[i] -= y0
		}
		mid, x0 = &RGB{W: dst.W, H: y1 - y0, Pix: s.tmp}, 0
	}
	s.acc = grow(s.acc, dst.W*3)
	vertical(dst, mid, x0, &s.v, s.acc)
	return nil
}

func horizontal(tmp []uint8, outW int, src *RGB, y0, y1 int, c *coeffs) {
	const half = 1 << (precisionBits - 1)
	for y := y0; y < y1; y++ {
		srow := src.Pix[y*src.W*3 : (y+1)*src.W*3]
		out := tmp[(y-y0)*outW*3 : (y-y0+1)*outW*3]
		for i := range outW {
			n := c.n[i]
			k := c.k[i*c.ksize:][:n]
			p := srow[c.start[i]*3:][:n*3]
			r, g, b := int32(half), int32(half), int32(half)
			for _, w := range k {
				if len(p) < 3 {
					break // unreachable: p holds n pixels; this lets the compiler drop bounds checks
				}
				r += int32(p[0]) * w
				g += int32(p[1]) * w
				b += int32(p[2]) * w
				p = p[3:]
			}
			o := out[i*3 : i*3+3]
			o[0], o[1], o[2] = clip8(r), clip8(g), clip8(b)
		}
	}
}

// vertical accumulates whole rows at a time (acc is one output row of
// sums), which walks memory sequentially instead of down columns.
func vertical(dst, mid *RGB, x0 int, c *coeffs, acc []int32) {
	const half = 1 << (precisionBits - 1)
	rowLen := dst.W * 3
	for y := range dst.H {
		for i := range acc {
			acc[i] = half
		}
		k := c.k[y*c.ksize:][:c.n[y]]
		for j, w := range k {
			sy := c.start[y] + j
			row := mid.Pix[(sy*mid.W+x0)*3:][:len(acc)]
			for i, v := range row {
				acc[i] += int32(v) * w
			}
		}
		out := dst.Pix[y*rowLen : (y+1)*rowLen]
		for i, v := range acc {
			out[i] = clip8(v)
		}
	}
}
