package pipeline

import (
	"errors"
	"fmt"
	stdimage "image"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
)

// Image ops. decode only reads the header; the first op that needs pixels
// decodes them, and a geometric op decodes just the rectangle it reads
// (image.DecodeRegion), which the turbojpeg build turns into skipped rows,
// cropped columns and reduced-scale DCT. Randomness is drawn in op order
// from the sample's generator, so imagenet-train draws its crop, then its
// flip, as it always has.

// imageMembers are the members decode reads with member: auto, in order.
var imageMembers = []string{"jpg", "jpeg", "png"}

func imageOps() []OpSpec {
	images := []Type{TypeEncodedImage, TypeImageU8}
	size := func(def int, doc string) Param {
		return Param{Name: "size", Type: ParamInt, Default: def, Bounded: true, Min: 1, Max: 8192, Doc: doc}
	}
	reduced := func(def bool) Param {
		return Param{Name: "reduced_decode", Type: ParamBool, Default: def,
			Doc: "when this op decodes the image, let the turbojpeg build decode at the smallest DCT scale that still covers the output (faster; not pixel-identical to PIL)"}
	}
	return []OpSpec{
		{
			Name: "decode",
			Doc:  "reads a JPEG or PNG member's header, checks the pixel limit; the next op decodes only what it needs",
			Params: []Param{{Name: "member", Type: ParamString, Default: "auto", Values: []string{"auto", "jpg", "jpeg", "png"},
				Doc: "member holding the image; auto takes the first of jpg, jpeg, png"}},
			In: []Type{TypeSample}, Out: TypeEncodedImage,
			build: func(p Params, _ Options) (stage, error) {
				m := p.String("member")
				if m == "auto" {
					return &decodeOp{members: imageMembers}, nil
				}
				return &decodeOp{members: []string{m}}, nil
			},
		},
		{
			Name: "random_resized_crop",
			Doc:  "torchvision's RandomResizedCrop: a random area fraction and aspect ratio (10 tries, then a centre crop), resized to size×size",
			Params: []Param{
				size(224, "output side in pixels"),
				{Name: "scale", Type: ParamFloats, Len: 2, Default: []float64{0.08, 1}, Check: rangeCheck(0, 1, true),
					Doc: "range of the crop's area as a fraction of the image's"},
				{Name: "ratio", Type: ParamFloats, Len: 2, Default: []float64{3.0 / 4, 4.0 / 3}, Check: rangeCheck(0, 100, true),
					Doc: "range of the crop's aspect ratio (width/height), drawn log-uniformly"},
				reduced(true),
			},
			In: images, Out: TypeImageU8,
			build: func(p Params, _ Options) (stage, error) {
				s, r := p.Floats("scale"), p.Floats("ratio")
				return &randomResizedCrop{size: p.Int("size"), scale: image.Range{Min: s[0], Max: s[1]},
					ratio: image.Range{Min: r[0], Max: r[1]}, reduce: p.Bool("reduced_decode")}, nil
			},
		},
		{
			Name: "resize",
			Doc:  "resizes the shorter side to size, keeping the aspect ratio, with PIL's antialiased bilinear filter",
			Params: []Param{
				size(256, "length of the shorter side after resizing"),
				reduced(false),
			},
			In: images, Out: TypeImageU8,
			build: func(p Params, o Options) (stage, error) {
				return &resizeOp{size: p.Int("size"), reduce: p.Bool("reduced_decode")}, nil
			},
		},
		{
			Name:   "center_crop",
			Doc:    "torchvision's CenterCrop: the centred size×size square, zero-padded where the image is smaller",
			Params: []Param{size(224, "output side in pixels")},
			In:     images, Out: TypeImageU8,
			build: func(p Params, _ Options) (stage, error) { return &centerCrop{size: p.Int("size")}, nil },
		},
		{
			Name: "random_horizontal_flip",
			Doc:  "mirrors the image left to right with probability p",
			Params: []Param{{Name: "p", Type: ParamFloat, Default: 0.5, Bounded: true, Min: 0, Max: 1,
				Doc: "probability of flipping"}},
			In: images, Out: TypeImageU8,
			build: func(p Params, _ Options) (stage, error) { return &flipOp{p: p.Float("p")}, nil },
		},
		{
			Name: "color_jitter",
			Doc:  "torchvision's ColorJitter on PIL images: brightness, contrast and saturation factors uniform in [max(0,1-x), 1+x], applied in a random order",
			Params: []Param{
				{Name: "brightness", Type: ParamFloat, Default: 0.0, Bounded: true, Min: 0, Max: 1, Doc: "brightness jitter x (0: none)"},
				{Name: "contrast", Type: ParamFloat, Default: 0.0, Bounded: true, Min: 0, Max: 1, Doc: "contrast jitter x, around the grayscale mean (0: none)"},
				{Name: "saturation", Type: ParamFloat, Default: 0.0, Bounded: true, Min: 0, Max: 1, Doc: "saturation jitter x, blending with ITU-R 601-2 grayscale (0: none)"},
			},
			In: images, Out: TypeImageU8,
			build: func(p Params, _ Options) (stage, error) {
				return &colorJitter{brightness: p.Float("brightness"), contrast: p.Float("contrast"), saturation: p.Float("saturation")}, nil
			},
		},
		{
			Name: "normalize",
			Doc:  `ToTensor + Normalize: (v/255 - mean)/std per channel, as "image" F32 or F16 [3,H,W]`,
			Params: []Param{
				{Name: "mean", Type: ParamFloats, Len: 3, Default: []float64{0.485, 0.456, 0.406}, Bounded: true, Min: -1e6, Max: 1e6,
					Doc: "per-channel mean (R, G, B) of v/255"},
				{Name: "std", Type: ParamFloats, Len: 3, Default: []float64{0.229, 0.224, 0.225}, Bounded: true, Min: 0, Max: 1e6,
					Check: positive, Doc: "per-channel standard deviation (R, G, B)"},
				{Name: "dtype", Type: ParamString, Default: "f32", Values: []string{"f32", "f16"}, Doc: "output element type"},
			},
			In: images,
			OutFor: func(p Params) Type {
				if p.String("dtype") == "f16" {
					return TypeTensorF16CHW
				}
				return TypeTensorF32CHW
			},
			build: func(p Params, o Options) (stage, error) {
				return newNormalize(p.Floats("mean"), p.Floats("std"), p.String("dtype") == "f16", o.DeferExpansion)
			},
		},
		{
			Name: "to_uint8_hwc",
			Doc:  `outputs the pixels as "image" U8 [H,W,3], leaving normalisation to the GPU`,
			In:   images, Out: TypeTensorU8HWC,
			build: func(Params, Options) (stage, error) { return toUint8HWC{}, nil },
		},
	}
}

// rangeCheck checks a [min, max] parameter: lo < min (or <= when
// openLo is unset) and min <= max <= hi.
func rangeCheck(lo, hi float64, openLo bool) func(any) error {
	return func(v any) error {
		r := v.([]float64)
		if r[0] > r[1] || r[1] > hi || r[0] < lo || (openLo && r[0] == lo) {
			return fmt.Errorf("want %s < min <= max <= %s", formatNumber(lo, ParamFloat), formatNumber(hi, ParamFloat))
		}
		return nil
	}
}

func positive(v any) error {
	for _, f := range v.([]float64) {
		if f <= 0 {
			return errors.New("want each > 0")
		}
	}
	return nil
}

// size is the current image's size, decoded or not.
func (st *state) size() (w, h int) {
	if st.encoded {
		return st.srcW, st.srcH
	}
	return st.img.W, st.img.H
}

// source returns pixels holding r (in the current image's coordinates) and
// where r lies in them. A still-encoded image is decoded here, only the
// region r, at full scale unless reduce lets the decoder shrink it as far
// as minW×minH.
func (st *state) source(r stdimage.Rectangle, minW, minH int, reduce bool) (*image.RGB, stdimage.Rectangle, error) {
	if !st.encoded {
		return st.img, r, nil
	}
	if !reduce {
		minW, minH = r.Dx(), r.Dy()
	}
	if err := st.reserveDecode(); err != nil {
		st.encoded, st.enc = false, nil
		return nil, stdimage.Rectangle{}, err
	}
	var t0 time.Time
	if st.profile {
		t0 = time.Now()
	}
	got, err := image.DecodeRegion(&st.decodeBuf, st.enc, r, minW, minH, st.maxPixels)
	if st.profile {
		st.decodeTime += time.Since(t0)
	}
	st.encoded, st.enc = false, nil
	if err != nil {
		return nil, stdimage.Rectangle{}, fmt.Errorf("member %s: %w", st.member, err)
	}
	st.img = &st.decodeBuf
	return st.img, got, nil
}

// decoded makes sure the whole image is decoded, at full scale.
func (st *state) decoded() error {
	if !st.encoded {
		return nil
	}
	src, r, err := st.source(stdimage.Rect(0, 0, st.srcW, st.srcH), 0, 0, false)
	if err != nil {
		return err
	}
	if r != src.Bounds() {
		dst := st.spare()
		if err := image.Crop(dst, src, r); err != nil {
			return err
		}
		st.img = dst
	}
	return nil
}

// checkOutput holds an op's output image to the pixel limit, as decoding
// is, so every buffer of a state stays under MaxPixels pixels.
func (st *state) checkOutput(op string, w, h int) error {
	limit := st.maxPixels
	if limit <= 0 {
		limit = image.DefaultMaxPixels
	}
	if px := int64(w) * int64(h); px > int64(limit) {
		return fmt.Errorf("%s: output %dx%d = %d pixels, over the %d-pixel limit", op, w, h, px, limit)
	}
	return nil
}

// spare is a work buffer the current image is not in.
func (st *state) spare() *image.RGB {
	if st.img == &st.work[0] {
		return &st.work[1]
	}
	return &st.work[0]
}

type decodeOp struct{ members []string }

func (o *decodeOp) apply(st *state) error {
	var data []byte
	member := ""
	for _, m := range o.members {
		if b, ok := st.sample.Files[m]; ok {
			data, member = b, m
			break
		}
	}
	if member == "" {
		return fmt.Errorf("no image member (want one of %s; sample has %s)", strings.Join(o.members, ", "), describeMembers(st.sample))
	}
	w, h, err := image.Size(data)
	if err != nil {
		return fmt.Errorf("member %s: %w", member, err)
	}
	limit := st.maxPixels
	if limit <= 0 {
		limit = image.DefaultMaxPixels
	}
	if px := int64(w) * int64(h); px > int64(limit) {
		return fmt.Errorf("member %s: image is %dx%d = %d pixels, over the %d-pixel limit: %w", member, w, h, px, limit, image.ErrTooLarge)
	}
	st.encoded, st.enc, st.member, st.srcW, st.srcH, st.img = true, data, member, w, h, nil
	return nil
}

func describeMembers(s wds.Sample) string {
	if len(s.Files) == 0 {
		return "no members"
	}
	return strings.Join(slices.Sorted(maps.Keys(s.Files)), ", ")
}

type randomResizedCrop struct {
	size         int
	scale, ratio image.Range
	reduce       bool
}

func (o *randomResizedCrop) apply(st *state) error {
	if err := st.checkOutput("random_resized_crop", o.size, o.size); err != nil {
		return err
	}
	w, h := st.size()
	r := image.RandomResizedCrop(st.rng, w, h, o.scale, o.ratio)
	src, r, err := st.source(r, o.size, o.size, o.reduce)
	if err != nil {
		return err
	}
	dst := st.spare()
	dst.Reset(o.size, o.size)
	if err := image.ResizeInto(dst, src, r); err != nil {
		return fmt.Errorf("random_resized_crop: %w", err)
	}
	st.img = dst
	return nil
}

type resizeOp struct {
	size   int
	reduce bool
}

func (o *resizeOp) apply(st *state) error {
	w, h := st.size()
	nw, nh := image.ShorterSide(w, h, o.size)
	if err := st.checkOutput("resize", nw, nh); err != nil {
		return err
	}
	// Resizing reads the whole image (torchvision resizes before cropping),
	// so the region is all of it; only the scale can be saved.
	src, r, err := st.source(stdimage.Rect(0, 0, w, h), nw, nh, o.reduce)
	if err != nil {
		return err
	}
	dst := st.spare()
	dst.Reset(nw, nh)
	if err := image.ResizeInto(dst, src, r); err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	st.img = dst
	return nil
}

type centerCrop struct{ size int }

func (o *centerCrop) apply(st *state) error {
	w, h := st.size()
	s := o.size
	if err := st.checkOutput("center_crop", s, s); err != nil {
		return err
	}
	if w >= s && h >= s {
		r := image.CenterCrop(w, h, s, s)
		src, got, err := st.source(r, s, s, false)
		if err != nil {
			return err
		}
		dst := st.spare()
		if got.Dx() == s && got.Dy() == s {
			err = image.Crop(dst, src, got)
		} else {
			dst.Reset(s, s)
			err = image.ResizeInto(dst, src, got)
		}
		if err != nil {
			return fmt.Errorf("center_crop: %w", err)
		}
		st.img = dst
		return nil
	}
	// Smaller than the crop: torchvision pads with zeros, centred (the
	// extra pixel of an odd padding goes right and bottom).
	if err := st.decoded(); err != nil {
		return err
	}
	src, dst := st.img, st.spare()
	dst.Reset(s, s)
	clear(dst.Pix)
	sx, dx, nx := cropAxis(src.W, s)
	sy, dy, ny := cropAxis(src.H, s)
	for y := range ny {
		copy(dst.Pix[((dy+y)*s+dx)*3:][:nx*3], src.Pix[((sy+y)*src.W+sx)*3:][:nx*3])
	}
	st.img = dst
	return nil
}

// cropAxis is one axis of a centre crop of n pixels to s: where the kept
// span starts in the source and in the output, and its length.
func cropAxis(n, s int) (srcOff, dstOff, count int) {
	if s > n {
		return 0, (s - n) / 2, n
	}
	return int(math.RoundToEven(float64(n-s) / 2)), 0, s
}

type flipOp struct{ p float64 }

func (o *flipOp) apply(st *state) error {
	if st.rng.Float64() >= o.p {
		return nil
	}
	if err := st.decoded(); err != nil {
		return err
	}
	image.FlipHorizontal(st.img)
	return nil
}

type toUint8HWC struct{}

func (toUint8HWC) apply(st *state) error {
	if err := st.decoded(); err != nil {
		return err
	}
	m := st.img
	shape := []int{m.H, m.W, 3}
	var data []byte
	if m != &st.decodeBuf && cap(m.Pix) == len(m.Pix) {
		// Hand the work buffer over instead of copying it; the next
		// sample allocates its own, as a copy would have.
		data = m.Pix
		*m = image.RGB{}
	} else {
		data = append([]byte(nil), m.Pix...)
	}
	st.fields = append(st.fields, Field{Name: "image", DType: safetensors.U8, Shape: shape, Data: data})
	return nil
}
