package pipeline

import (
	"math"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// colorJitter follows torchvision's ColorJitter on PIL images, which calls
// PIL's ImageEnhance: each adjustment blends the image with a "degenerate"
// one (black for brightness, the mean gray level for contrast, the
// pixel's own gray for saturation) by a factor, with Image.blend's float32
// arithmetic, truncation and clipping.
type colorJitter struct {
	brightness, contrast, saturation float64
}

func (o *colorJitter) apply(st *state) error {
	// Draws come first and never depend on the pixels, as in torchvision's
	// get_params: the order, then each enabled factor.
	order := [3]int{0, 1, 2}
	for i := 2; i > 0; i-- {
		j := st.rng.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	var factor [3]float32
	var on [3]bool
	for k, x := range [3]float64{o.brightness, o.contrast, o.saturation} {
		if x > 0 {
			lo, hi := max(0, 1-x), 1+x
			factor[k], on[k] = float32(lo+(hi-lo)*st.rng.Float64()), true
		}
	}
	if !on[0] && !on[1] && !on[2] {
		return nil
	}
	if err := st.decoded(); err != nil {
		return err
	}
	pix := st.img.Pix
	for _, k := range order {
		if !on[k] {
			continue
		}
		switch k {
		case 0:
			adjustBrightness(pix, factor[k])
		case 1:
			adjustContrast(pix, factor[k])
		case 2:
			adjustSaturation(pix, factor[k])
		}
	}
	return nil
}

// blend8 is PIL's Image.blend of one 8-bit value: in1 + alpha*(in2-in1) in
// float32, truncated, clipped only when extrapolating (alpha outside
// [0,1]); alpha 0 and 1 copy an input, as PIL's shortcuts do.
func blend8(in1, in2 int, alpha float32) uint8 {
	switch alpha {
	case 0:
		return uint8(in1)
	case 1:
		return uint8(in2)
	}
	// The conversion keeps the compiler from fusing the multiply-add,
	// which would round differently from PIL's C.
	t := float32(in1) + float32(alpha*float32(in2-in1))
	if alpha >= 0 && alpha <= 1 {
		return uint8(t)
	}
	switch {
	case t <= 0:
		return 0
	case t >= 255:
		return 255
	}
	return uint8(t)
}

// gray is PIL's convert("L"): ITU-R 601-2 luma in 16-bit fixed point,
// rounded.
func gray(r, g, b uint8) int {
	return (int(r)*19595 + int(g)*38470 + int(b)*7471 + 0x8000) >> 16
}

// adjustBrightness is ImageEnhance.Brightness: a blend with black.
func adjustBrightness(pix []uint8, f float32) {
	applyLUT(pix, 0, f)
}

// adjustContrast is ImageEnhance.Contrast: a blend with the image's mean
// gray level, rounded to an integer.
func adjustContrast(pix []uint8, f float32) {
	var sum uint64
	for i := 0; i+2 < len(pix); i += 3 {
		sum += uint64(gray(pix[i], pix[i+1], pix[i+2]))
	}
	n := len(pix) / 3
	if n == 0 {
		return
	}
	mean := int(float64(sum)/float64(n) + 0.5)
	applyLUT(pix, mean, f)
}

func applyLUT(pix []uint8, in1 int, f float32) {
	var lut [256]uint8
	for v := range lut {
		lut[v] = blend8(in1, v, f)
	}
	for i, v := range pix {
		pix[i] = lut[v]
	}
}

// adjustSaturation is ImageEnhance.Color: a blend of each pixel with its
// own gray level.
func adjustSaturation(pix []uint8, f float32) {
	for i := 0; i+2 < len(pix); i += 3 {
		g := gray(pix[i], pix[i+1], pix[i+2])
		pix[i] = blend8(g, int(pix[i]), f)
		pix[i+1] = blend8(g, int(pix[i+1]), f)
		pix[i+2] = blend8(g, int(pix[i+2]), f)
	}
}

// normalize is torchvision's ToTensor then Normalize, in float32 as torch
// computes them: (float32(v)/255 - mean) / std. With 256 possible inputs
// per channel the results are tabulated once per pipeline, as the
// wire.Expansion a replica sends in its place when deferred (a task whose
// agent widens the bytes itself: Options.DeferExpansion).
type normalize struct {
	exp      *wire.Expansion
	deferred bool
}

func newNormalize(mean, std []float64, f16, deferred bool) (*normalize, error) {
	tables := make([][256]uint32, 3)
	for c := range 3 {
		m, s := float32(mean[c]), float32(std[c])
		for v := range 256 {
			y := (float32(v)/255 - m) / s
			if f16 {
				tables[c][v] = uint32(float16(y))
			} else {
				tables[c][v] = math.Float32bits(y)
			}
		}
	}
	dtype := "F32"
	if f16 {
		dtype = "F16"
	}
	exp, err := wire.NewExpansion(dtype, tables)
	if err != nil {
		return nil, err
	}
	return &normalize{exp: exp, deferred: deferred}, nil
}

func (n *normalize) apply(st *state) error {
	if n.deferred {
		if err := (toUint8HWC{}).apply(st); err != nil {
			return err
		}
		st.fields[len(st.fields)-1].Expand = n.exp
		return nil
	}
	if err := st.decoded(); err != nil {
		return err
	}
	m := st.img
	hw := m.W * m.H
	data := make([]byte, 3*hw*n.exp.Size())
	n.exp.Expand(data, m.Pix[:3*hw], 3*hw)
	st.fields = append(st.fields, Field{Name: "image", DType: safetensors.DType(n.exp.DType), Shape: []int{3, m.H, m.W}, Data: data})
	return nil
}

// float16 converts to IEEE 754 half precision, rounding to nearest even
// as torch's .half() does; overflow gives infinity, NaN stays NaN.
func float16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal (or zero): the 24-bit significand shifted into units
		// of 2^-24.
		shift := uint(14 - e)
		if shift > 24 {
			return sign
		}
		full := mant | 0x800000
		h := full >> shift
		rem := full & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is still the right encoding (up to infinity)
	}
	return sign | uint16(h)
}
