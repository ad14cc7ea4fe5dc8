package image

import (
	"image"
	"math"
	"math/rand/v2"
)

// Range is a closed interval [Min, Max].
type Range struct{ Min, Max float64 }

// The ImageNet defaults of torchvision's RandomResizedCrop.
var (
	DefaultScale = Range{0.08, 1}
	DefaultRatio = Range{3.0 / 4, 4.0 / 3}
)

// RandomResizedCrop picks the crop rectangle of a w×h image the way
// torchvision.transforms.RandomResizedCrop.get_params does: up to 10 tries
// of an area fraction uniform in scale and an aspect ratio (width/height)
// log-uniform in ratio, rounded half to even as Python's round does; the
// first box that fits is placed uniformly. If none fits, the fallback is a
// centred crop of the whole image, narrowed to the nearest ratio bound when
// the image's own aspect ratio lies outside ratio.
//
// The result depends only on rng's state and the arguments. The caller owns
// the ranges' validity (0 < scale.Min <= scale.Max, 0 < ratio.Min <= ratio.Max);
// the rectangle is clamped to the image either way and is empty only for an
// empty image.
func RandomResizedCrop(rng *rand.Rand, w, h int, scale, ratio Range) image.Rectangle {
	if w <= 0 || h <= 0 {
		return image.Rectangle{}
	}
	area := float64(w) * float64(h)
	logLo, logHi := math.Log(ratio.Min), math.Log(ratio.Max)
	for range 10 {
		target := area * uniform(rng, scale.Min, scale.Max)
		aspect := math.Exp(uniform(rng, logLo, logHi))
		cw := int(math.RoundToEven(math.Sqrt(target * aspect)))
		ch := int(math.RoundToEven(math.Sqrt(target / aspect)))
		if 0 < cw && cw <= w && 0 < ch && ch <= h {
			top := rng.IntN(h - ch + 1)
			left := rng.IntN(w - cw + 1)
			return image.Rect(left, top, left+cw, top+ch)
		}
	}
	cw, ch := w, h
	switch in := float64(w) / float64(h); {
	case in < ratio.Min:
		ch = int(math.RoundToEven(float64(cw) / ratio.Min))
	case in > ratio.Max:
		cw = int(math.RoundToEven(float64(ch) * ratio.Max))
	}
	cw, ch = clamp(cw, 1, w), clamp(ch, 1, h)
	top, left := (h-ch)/2, (w-cw)/2
	return image.Rect(left, top, left+cw, top+ch)
}

// uniform draws from [lo, hi) as torch's Tensor.uniform_ does.
func uniform(rng *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*rng.Float64() }

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }

// CenterCrop is the rectangle torchvision.transforms.CenterCrop takes from
// a w×h image for a cw×ch output: offsets rounded half to even. The crop is
// clamped to the image (torchvision pads instead; Sluice's recipes resize
// first so that never happens).
func CenterCrop(w, h, cw, ch int) image.Rectangle {
	cw, ch = min(cw, w), min(ch, h)
	top := int(math.RoundToEven(float64(h-ch) / 2))
	left := int(math.RoundToEven(float64(w-cw) / 2))
	return image.Rect(left, top, left+cw, top+ch)
}

// ShorterSide is the size torchvision.transforms.Resize(size) gives a w×h
// image: the shorter side becomes size, the longer keeps the aspect ratio,
// truncated.
func ShorterSide(w, h, size int) (nw, nh int) {
	if w <= h {
		return size, int(float64(size) * float64(h) / float64(w))
	}
	return int(float64(size) * float64(w) / float64(h)), size
}
