package image

import (
	"fmt"
	"image"
	"math"
	"sync"
	"unsafe"

	"github.com/sluice-project/sluice/functions/image/internal/simd"
)

// Resampling follows Pillow's Image.resize with the BILINEAR filter
// (libImaging/Resample.c), which is what torchvision's Resize and
// RandomResizedCrop do to PIL images: a separable triangle filter whose
// support widens with the downscale factor (so downscaling averages every
// source pixel instead of aliasing), weights normalised and turned into
// 22-bit fixed point, a horizontal pass rounded to uint8, then a vertical
// pass. The source rectangle is treated as if cropped first: no pixel
// outside it contributes, as with torchvision's crop-then-resize.
//
// The arithmetic is all integer, so it can be split up freely without
// changing a bit: where the CPU has AVX2, the horizontal pass runs on eight
// rows at once (transposed so they sit side by side in vector lanes) and
// the vertical pass on sixteen bytes at once (internal/simd); elsewhere
// unrolled scalar loops without bounds checks do it.

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
	// One unsigned compare for the in-range case, which is nearly all.
	if uint32(v) < 256<<precisionBits {
		return uint8(v >> precisionBits)
	}
	if v < 0 {
		return 0
	}
	return 255
}

// scratch is the per-call working memory of a resize, pooled so a replica
// resizing thousands of samples does not churn the garbage collector.
type scratch struct {
	h, v coeffs
	tmp  []uint8
	acc  []int32
	// The vector horizontal pass's scratch: taps' starts relative to the
	// span they read, and the transposed input and output strips.
	rel  []int
	t, u []uint8
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
	return resizeInto(dst, src, r, true)
}

// resizeInto is ResizeInto; vector false keeps both passes in scalar Go
// even where the AVX2 kernels (internal/simd) could run: tests check that
// the two give the same bytes.
func resizeInto(dst, src *RGB, r image.Rectangle, vector bool) error {
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
	kv := s.v.fixTaps(r.Min.Y, r.Dy())
	// Only the source rows some output row reads need the horizontal pass.
	y0, y1 := s.v.start[0], s.v.start[0]+kv
	for _, st := range s.v.start {
		y0, y1 = min(y0, st), max(y1, st+kv)
	}

	// Horizontal pass: rows y0..y1 of the span, into tmp (dst.W wide).
	// Skipping it (same width), the vertical pass reads src's columns
	// from r.Min.X on.
	mid, x0 := src, r.Min.X
	if r.Dx() != dst.W {
		s.h.compute(r.Min.X, r.Dx(), dst.W)
		kh := s.h.fixTaps(r.Min.X, r.Dx())
		s.tmp = grow(s.tmp, (y1-y0)*dst.W*3)
		if err := horizontal(s.tmp, dst.W, src, y0, y1, &s.h, kh, s, vector); err != nil {
			return err
		}
		// tmp's row 0 is source row y0; shift the vertical taps to match.
		for i := range s.v.start {
			s.v.start[i] -= y0
		}
		mid, x0 = &RGB{W: dst.W, H: y1 - y0, Pix: s.tmp}, 0
	}
	s.acc = grow(s.acc, dst.W*3)
	return vertical(dst, mid, x0, &s.v, kv, s.acc, vector)
}

// fixTaps gives every output the same number of taps, the largest n: an
// output with fewer gets zero weights after its own (or, at the far edge
// of the span [in0, in0+inSize), before them, its start moved back). The
// sums are unchanged, exactly, and the passes below can then run one
// unrolled loop per tap count instead of one loop per output.
func (c *coeffs) fixTaps(in0, inSize int) int {
	k := 0
	for _, n := range c.n {
		k = max(k, n)
	}
	limit := in0 + inSize
	for i, n := range c.n {
		if shift := c.start[i] + k - limit; shift > 0 {
			// n <= k <= inSize, so the start stays inside the span.
			w := c.k[i*c.ksize:][:k]
			copy(w[shift:], w[:n])
			clear(w[:shift])
			c.start[i] -= shift
		}
		c.n[i] = k
	}
	return k
}

// horizontal resamples rows y0..y1 of src along x into tmp (outW wide);
// every output has exactly taps taps (see fixTaps).
func horizontal(tmp []uint8, outW int, src *RGB, y0, y1 int, c *coeffs, taps int, s *scratch, vector bool) error {
	// hrow indexes without bounds checks, so check every index it will
	// use here, once: compute and fixTaps guarantee them, this makes sure.
	if len(c.start) < outW || len(c.k) < (outW-1)*c.ksize+taps || taps < 1 || taps > c.ksize ||
		y0 < 0 || y1 > src.H || len(tmp) < (y1-y0)*outW*3 || len(src.Pix) < src.W*src.H*3 {
		return fmt.Errorf("resize: inconsistent horizontal taps (%d taps of %d for %d outputs)", taps, c.ksize, outW)
	}
	for _, st := range c.start[:outW] {
		if st < 0 || st+taps > src.W {
			return fmt.Errorf("resize: tap start %d+%d outside the %d-pixel row", st, taps, src.W)
		}
	}
	stride, outStride := src.W*3, outW*3
	y := y0
	if vector && y1-y0 >= 8 && simd.HStripOK() {
		// Eight rows at a time, transposed so the vector unit sums them
		// side by side. The span the taps read is [lo, hi).
		lo, hi := c.start[0], 0
		for _, st := range c.start[:outW] {
			lo, hi = min(lo, st), max(hi, st+taps)
		}
		s.rel = grow(s.rel, outW)
		for i, st := range c.start[:outW] {
			s.rel[i] = st - lo
		}
		w := hi - lo
		s.t, s.u = grow(s.t, 24*w), grow(s.u, 24*outW)
		base := unsafe.Pointer(unsafe.SliceData(src.Pix))
		for ; y+8 <= y1; y += 8 {
			simd.HStrip(tmp[(y-y0)*outStride:][:8*outStride], outStride, unsafe.Add(base, y*stride+3*lo), stride, w,
				s.rel, c.k, c.ksize, taps, s.t, s.u)
		}
	}
	if taps >= 2 && taps <= 5 {
		for ; y+2 <= y1; y += 2 {
			hrow2(tmp[(y-y0)*outStride:][:2*outStride], src.Pix[y*stride:][:2*stride], outStride, stride, c, taps)
		}
	}
	for ; y < y1; y++ {
		hrow(tmp[(y-y0)*outStride:][:outStride], src.Pix[y*stride:][:stride], c, taps)
	}
	return nil
}

// hrow2 is hrow on two consecutive rows (taps 2 to 5), which share each
// output's weights and offset: about 15% faster than two hrow calls.
func hrow2(out, src []uint8, outStride, stride int, c *coeffs, taps int) {
	op0 := unsafe.Pointer(unsafe.SliceData(out))
	sp := unsafe.Pointer(unsafe.SliceData(src))
	kp0 := unsafe.Pointer(unsafe.SliceData(c.k))
	stp0 := unsafe.Pointer(unsafe.SliceData(c.start))
	kstep := uintptr(c.ksize) * 4
	n := uintptr(outStride / 3)
	switch taps {
	case 2:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1 := kat(kp, 0), kat(kp, 1)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			q := unsafe.Add(p, stride)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1,
				half+px(p, 1)*k0+px(p, 4)*k1,
				half+px(p, 2)*k0+px(p, 5)*k1)
			put3(unsafe.Add(op, outStride),
				half+px(q, 0)*k0+px(q, 3)*k1,
				half+px(q, 1)*k0+px(q, 4)*k1,
				half+px(q, 2)*k0+px(q, 5)*k1)
		}
	case 3:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2 := kat(kp, 0), kat(kp, 1), kat(kp, 2)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			q := unsafe.Add(p, stride)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2)
			put3(unsafe.Add(op, outStride),
				half+px(q, 0)*k0+px(q, 3)*k1+px(q, 6)*k2,
				half+px(q, 1)*k0+px(q, 4)*k1+px(q, 7)*k2,
				half+px(q, 2)*k0+px(q, 5)*k1+px(q, 8)*k2)
		}
	case 5:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2, k3, k4 := kat(kp, 0), kat(kp, 1), kat(kp, 2), kat(kp, 3), kat(kp, 4)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			q := unsafe.Add(p, stride)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2+px(p, 9)*k3+px(p, 12)*k4,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2+px(p, 10)*k3+px(p, 13)*k4,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2+px(p, 11)*k3+px(p, 14)*k4)
			put3(unsafe.Add(op, outStride),
				half+px(q, 0)*k0+px(q, 3)*k1+px(q, 6)*k2+px(q, 9)*k3+px(q, 12)*k4,
				half+px(q, 1)*k0+px(q, 4)*k1+px(q, 7)*k2+px(q, 10)*k3+px(q, 13)*k4,
				half+px(q, 2)*k0+px(q, 5)*k1+px(q, 8)*k2+px(q, 11)*k3+px(q, 14)*k4)
		}
	case 4:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2, k3 := kat(kp, 0), kat(kp, 1), kat(kp, 2), kat(kp, 3)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			q := unsafe.Add(p, stride)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2+px(p, 9)*k3,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2+px(p, 10)*k3,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2+px(p, 11)*k3)
			put3(unsafe.Add(op, outStride),
				half+px(q, 0)*k0+px(q, 3)*k1+px(q, 6)*k2+px(q, 9)*k3,
				half+px(q, 1)*k0+px(q, 4)*k1+px(q, 7)*k2+px(q, 10)*k3,
				half+px(q, 2)*k0+px(q, 5)*k1+px(q, 8)*k2+px(q, 11)*k3)
		}
	}
}

// hrow resamples one row along x: out[3i+ch] is the sum over j < taps of
// srow[3(start[i]+j)+ch] * k[i*ksize+j], rounded and clipped. It indexes
// through unsafe pointers: bounds checks made it nearly twice as slow, and
// this pass is most of a resize's time. horizontal has checked every index.
func hrow(out, srow []uint8, c *coeffs, taps int) {
	op0 := unsafe.Pointer(unsafe.SliceData(out))
	sp := unsafe.Pointer(unsafe.SliceData(srow))
	kp0 := unsafe.Pointer(unsafe.SliceData(c.k))
	stp0 := unsafe.Pointer(unsafe.SliceData(c.start))
	kstep := uintptr(c.ksize) * 4
	n := uintptr(len(out) / 3)
	switch taps {
	case 1:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0 := kat(kp, 0)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			put3(op, half+px(p, 0)*k0, half+px(p, 1)*k0, half+px(p, 2)*k0)
		}
	case 2:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1 := kat(kp, 0), kat(kp, 1)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1,
				half+px(p, 1)*k0+px(p, 4)*k1,
				half+px(p, 2)*k0+px(p, 5)*k1)
		}
	case 3:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2 := kat(kp, 0), kat(kp, 1), kat(kp, 2)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2)
		}
	case 4:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2, k3 := kat(kp, 0), kat(kp, 1), kat(kp, 2), kat(kp, 3)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2+px(p, 9)*k3,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2+px(p, 10)*k3,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2+px(p, 11)*k3)
		}
	case 5:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			k0, k1, k2, k3, k4 := kat(kp, 0), kat(kp, 1), kat(kp, 2), kat(kp, 3), kat(kp, 4)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			put3(op,
				half+px(p, 0)*k0+px(p, 3)*k1+px(p, 6)*k2+px(p, 9)*k3+px(p, 12)*k4,
				half+px(p, 1)*k0+px(p, 4)*k1+px(p, 7)*k2+px(p, 10)*k3+px(p, 13)*k4,
				half+px(p, 2)*k0+px(p, 5)*k1+px(p, 8)*k2+px(p, 11)*k3+px(p, 14)*k4)
		}
	default:
		for i := range n {
			op, kp, stp := unsafe.Add(op0, 3*i), unsafe.Add(kp0, i*kstep), unsafe.Add(stp0, i*intSize)
			p := unsafe.Add(sp, *(*int)(stp)*3)
			r, g, b := int32(half), int32(half), int32(half)
			for j := range uintptr(taps) {
				w := kat(kp, int(j))
				r += px(p, 3*j) * w
				g += px(p, 3*j+1) * w
				b += px(p, 3*j+2) * w
			}
			put3(op, r, g, b)
		}
	}
}

const (
	half    = 1 << (precisionBits - 1)
	intSize = unsafe.Sizeof(int(0))
)

// px is the byte at p+off, widened.
func px(p unsafe.Pointer, off uintptr) int32 { return int32(*(*uint8)(unsafe.Add(p, off))) }

// kat is the j-th int32 tap weight at p.
func kat(p unsafe.Pointer, j int) int32 { return *(*int32)(unsafe.Add(p, j*4)) }

// put3 stores three clipped sums at p.
func put3(p unsafe.Pointer, r, g, b int32) {
	*(*uint8)(p) = clip8(r)
	*(*uint8)(unsafe.Add(p, 1)) = clip8(g)
	*(*uint8)(unsafe.Add(p, 2)) = clip8(b)
}

// vertical resamples mid along y into dst, reading mid's columns from x0
// on; every output row has exactly taps taps (see fixTaps). Each output
// row is summed across its source rows element by element, which walks
// memory sequentially. As in hrow, indexing is unchecked after checking
// every row once here.
func vertical(dst, mid *RGB, x0 int, c *coeffs, taps int, acc []int32, vector bool) error {
	rowLen := dst.W * 3
	if len(c.start) < dst.H || len(c.k) < (dst.H-1)*c.ksize+taps || taps < 1 || taps > c.ksize ||
		x0 < 0 || x0+dst.W > mid.W || len(mid.Pix) < mid.W*mid.H*3 || len(dst.Pix) < rowLen*dst.H {
		return fmt.Errorf("resize: inconsistent vertical taps (%d taps of %d for %d rows)", taps, c.ksize, dst.H)
	}
	for _, st := range c.start[:dst.H] {
		if st < 0 || st+taps > mid.H {
			return fmt.Errorf("resize: tap start %d+%d outside the %d-row image", st, taps, mid.H)
		}
	}
	stride := uintptr(mid.W * 3)
	base := unsafe.Add(unsafe.Pointer(unsafe.SliceData(mid.Pix)), x0*3)
	for y := range dst.H {
		k := c.k[y*c.ksize:][:taps]
		p := unsafe.Add(base, uintptr(c.start[y])*stride)
		out := dst.Pix[y*rowLen : (y+1)*rowLen]
		done := 0
		if vector {
			done = simd.Vrow(out, p, stride, k)
		}
		if done < len(out) {
			vrow(out[done:], unsafe.Add(p, done), stride, k, acc)
		}
	}
	return nil
}

// vrow is the scalar vertical pass over one output row (or its tail):
// out[i] = clip8(half + Σ_j p[i+j*stride]*k[j]). acc is scratch for the
// many-tap case.
func vrow(out []uint8, p unsafe.Pointer, stride uintptr, k []int32, acc []int32) {
	op := unsafe.Pointer(unsafe.SliceData(out))
	n := uintptr(len(out))
	switch len(k) {
	case 1:
		k0 := k[0]
		for i := range n {
			*(*uint8)(unsafe.Add(op, i)) = clip8(half + px(p, i)*k0)
		}
	case 2:
		k0, k1 := k[0], k[1]
		p1 := unsafe.Add(p, stride)
		for i := range n {
			*(*uint8)(unsafe.Add(op, i)) = clip8(half + px(p, i)*k0 + px(p1, i)*k1)
		}
	case 3:
		k0, k1, k2 := k[0], k[1], k[2]
		p1 := unsafe.Add(p, stride)
		p2 := unsafe.Add(p1, stride)
		for i := range n {
			*(*uint8)(unsafe.Add(op, i)) = clip8(half + px(p, i)*k0 + px(p1, i)*k1 + px(p2, i)*k2)
		}
	case 4:
		k0, k1, k2, k3 := k[0], k[1], k[2], k[3]
		p1 := unsafe.Add(p, stride)
		p2 := unsafe.Add(p1, stride)
		p3 := unsafe.Add(p2, stride)
		for i := range n {
			*(*uint8)(unsafe.Add(op, i)) = clip8(half + px(p, i)*k0 + px(p1, i)*k1 + px(p2, i)*k2 + px(p3, i)*k3)
		}
	default:
		// Whole rows at a time into acc, one source row per tap.
		acc = acc[:n]
		for i := range acc {
			acc[i] = half
		}
		for j, w := range k {
			q := unsafe.Add(p, uintptr(j)*stride)
			for i := range acc {
				acc[i] += px(q, uintptr(i)) * w
			}
		}
		for i, v := range acc {
			*(*uint8)(unsafe.Add(op, i)) = clip8(v)
		}
	}
}
