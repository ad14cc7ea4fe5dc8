package pipeline

import (
	"bytes"
	"encoding/binary"
	"fmt"
	stdimage "image"
	"image/color"
	stdpng "image/png"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
)

// pngSample wraps m as a lossless PNG member, so tests know every pixel
// the ops see.
func pngSample(t testing.TB, key string, m *image.RGB) wds.Sample {
	t.Helper()
	img := stdimage.NewNRGBA(stdimage.Rect(0, 0, m.W, m.H))
	for y := range m.H {
		for x := range m.W {
			p := m.Pix[(y*m.W+x)*3:]
			img.SetNRGBA(x, y, color.NRGBA{p[0], p[1], p[2], 255})
		}
	}
	var buf bytes.Buffer
	if err := stdpng.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return wds.Sample{Key: key, Files: map[string][]byte{"png": buf.Bytes()}}
}

func constant(w, h int, rgb ...uint8) *image.RGB {
	m := image.NewRGB(w, h)
	for i := 0; i < len(m.Pix); i += 3 {
		copy(m.Pix[i:i+3], rgb)
	}
	return m
}

func patterned(w, h int) *image.RGB {
	m := image.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*37 + i/7)
	}
	return m
}

func spec(t testing.TB, doc string) Pipeline {
	t.Helper()
	p, err := Lookup(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t testing.TB, p Pipeline, s wds.Sample, seed uint64) Output {
	t.Helper()
	out, err := p.Process(s, seed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBlendFollowsPIL(t *testing.T) {
	for _, c := range []struct {
		in1, in2 int
		alpha    float32
		want     uint8
	}{
		{0, 100, 1.5, 150},   // brightness up
		{0, 101, 0.5, 50},    // truncated, not rounded
		{0, 200, 1.5, 255},   // clipped when extrapolating
		{100, 0, 1.5, 0},     // clipped at 0
		{100, 0, 0, 100},     // alpha 0 copies the degenerate image
		{100, 7, 1, 7},       // alpha 1 copies the image
		{76, 255, 0.5, 165},  // 76 + 0.5*179 = 165.5
		{76, 0, 0.5, 38},     // 76 - 38
		{10, 11, 0.999, 10},  // 10.999 truncates
		{50, 60, 1.25, 62},   // 62.5 truncates
		{200, 100, 1.25, 75}, // 75 exactly
	} {
		if got := blend8(c.in1, c.in2, c.alpha); got != c.want {
			t.Errorf("blend8(%d, %d, %v) = %d, want %d", c.in1, c.in2, c.alpha, got, c.want)
		}
	}
	// PIL's convert("L") of pure colours and grays.
	for _, c := range []struct {
		r, g, b uint8
		want    int
	}{{255, 0, 0, 76}, {0, 255, 0, 150}, {0, 0, 255, 29}, {255, 255, 255, 255}, {7, 7, 7, 7}} {
		if got := gray(c.r, c.g, c.b); got != c.want {
			t.Errorf("gray(%d, %d, %d) = %d, want %d", c.r, c.g, c.b, got, c.want)
		}
	}
}

func TestAdjustments(t *testing.T) {
	// Contrast blends with the rounded mean gray: half 0, half 200 -> 100.
	pix := []uint8{0, 0, 0, 200, 200, 200}
	adjustContrast(pix, 0.5)
	if want := []uint8{50, 50, 50, 150, 150, 150}; !bytes.Equal(pix, want) {
		t.Errorf("contrast 0.5: %v, want %v", pix, want)
	}
	// Saturation blends each pixel with its own gray: red's is 76.
	for _, c := range []struct {
		f    float32
		want []uint8
	}{{0, []uint8{76, 76, 76}}, {0.5, []uint8{165, 38, 38}}, {2, []uint8{255, 0, 0}}, {1, []uint8{255, 0, 0}}} {
		pix := []uint8{255, 0, 0}
		adjustSaturation(pix, c.f)
		if !bytes.Equal(pix, c.want) {
			t.Errorf("saturation %v of red: %v, want %v", c.f, pix, c.want)
		}
	}
	// A gray image has nothing to saturate and a constant one no contrast.
	g := []uint8{90, 90, 90, 90, 90, 90}
	adjustSaturation(g, 1.7)
	adjustContrast(g, 0.3)
	if !bytes.Equal(g, []uint8{90, 90, 90, 90, 90, 90}) {
		t.Errorf("saturation and contrast changed a constant gray image: %v", g)
	}
}

// jitterDraws replays color_jitter's draws: the order, then the factors of
// the enabled adjustments.
func jitterDraws(seed uint64, x [3]float64) (order [3]int, f [3]float32) {
	rng := newRand(seed)
	order = [3]int{0, 1, 2}
	for i := 2; i > 0; i-- {
		j := rng.IntN(i + 1)
		order[i], order[j] = order[j], order[i]
	}
	for k := range x {
		if x[k] > 0 {
			lo, hi := max(0, 1-x[k]), 1+x[k]
			f[k] = float32(lo + (hi-lo)*rng.Float64())
		}
	}
	return order, f
}

func TestColorJitterBrightnessScalesAConstantImage(t *testing.T) {
	p := spec(t, "ops: [decode, {op: color_jitter, brightness: 0.5}, to_uint8_hwc]")
	s := pngSample(t, "c", constant(8, 6, 100, 50, 200))
	seen := map[string]bool{}
	for seed := range uint64(20) {
		_, f := jitterDraws(seed, [3]float64{0.5, 0, 0})
		if f[0] < 0.5 || f[0] > 1.5 {
			t.Fatalf("seed %d: factor %v outside [0.5, 1.5]", seed, f[0])
		}
		want := constant(8, 6, blend8(0, 100, f[0]), blend8(0, 50, f[0]), blend8(0, 200, f[0]))
		got := run(t, p, s, seed).Fields[0].Data
		if !bytes.Equal(got, want.Pix) {
			t.Fatalf("seed %d (factor %v): first pixel %v, want %v", seed, f[0], got[:3], want.Pix[:3])
		}
		seen[string(got[:3])] = true
	}
	if len(seen) < 10 {
		t.Errorf("20 seeds gave only %d brightness levels", len(seen))
	}
	// Contrast and saturation leave a constant gray image alone.
	p = spec(t, "ops: [decode, {op: color_jitter, contrast: 1, saturation: 1}, to_uint8_hwc]")
	gs := pngSample(t, "g", constant(5, 5, 77, 77, 77))
	for seed := range uint64(5) {
		if got := run(t, p, gs, seed).Fields[0].Data; !bytes.Equal(got, constant(5, 5, 77, 77, 77).Pix) {
			t.Fatalf("seed %d: contrast/saturation changed a constant gray image: %v", seed, got[:3])
		}
	}
}

func TestColorJitterRandomOrder(t *testing.T) {
	// Brightness then contrast differs from contrast then brightness when
	// brightness clips: check each seed against the order it drew.
	src := image.NewRGB(4, 1)
	copy(src.Pix, []uint8{10, 10, 10, 240, 240, 240, 120, 60, 30, 200, 220, 250})
	s := pngSample(t, "o", src)
	x := [3]float64{0.9, 0.9, 0.9}
	p := spec(t, "ops: [decode, {op: color_jitter, brightness: 0.9, contrast: 0.9, saturation: 0.9}, to_uint8_hwc]")
	orders := map[[3]int]bool{}
	for seed := range uint64(40) {
		order, f := jitterDraws(seed, x)
		orders[order] = true
		want := bytes.Clone(src.Pix)
		for _, k := range order {
			[]func([]uint8, float32){adjustBrightness, adjustContrast, adjustSaturation}[k](want, f[k])
		}
		if got := run(t, p, s, seed).Fields[0].Data; !bytes.Equal(got, want) {
			t.Fatalf("seed %d (order %v, factors %v): %v, want %v", seed, order, f, got, want)
		}
	}
	if len(orders) != 6 {
		t.Errorf("40 seeds drew %d of the 6 orders", len(orders))
	}
}

func TestNormalize(t *testing.T) {
	src := image.NewRGB(2, 1)
	copy(src.Pix, []uint8{0, 255, 128, 255, 0, 64})
	s := pngSample(t, "n", src)
	p := spec(t, "ops: [decode, {op: normalize, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}]")
	f := run(t, p, s, 1).Fields[0]
	if f.Name != "image" || f.DType != "F32" || !cmp.Equal(f.Shape, []int{3, 1, 2}) {
		t.Fatalf("field %s %s%v", f.Name, f.DType, f.Shape)
	}
	got := make([]float32, 6)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4*i:]))
	}
	// CHW: R of both pixels, then G, then B.
	want := []float32{-1, 1, 1, -1, float32(128.0/255-0.5) / 0.5, float32(64.0/255-0.5) / 0.5}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Errorf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
	// ImageNet defaults, computed as torch does in float32.
	p = spec(t, "ops: [decode, normalize]")
	f = run(t, p, s, 1).Fields[0]
	r0 := math.Float32frombits(binary.LittleEndian.Uint32(f.Data))
	if want := (float32(0)/255 - float32(0.485)) / float32(0.229); r0 != want {
		t.Errorf("R of black with ImageNet stats: %v, want %v", r0, want)
	}
	// f16: the same values, rounded to half precision.
	p = spec(t, "ops: [decode, {op: normalize, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5], dtype: f16}]")
	f = run(t, p, s, 1).Fields[0]
	if f.DType != "F16" || !cmp.Equal(f.Shape, []int{3, 1, 2}) || len(f.Data) != 12 {
		t.Fatalf("f16 field %s%v with %d bytes", f.DType, f.Shape, len(f.Data))
	}
	for i, w := range []uint16{0xbc00, 0x3c00, 0x3c00, 0xbc00, float16(want[4]), float16(want[5])} {
		if got := binary.LittleEndian.Uint16(f.Data[2*i:]); got != w {
			t.Errorf("f16 element %d: %#04x, want %#04x", i, got, w)
		}
	}
}

// TestNormalizeDeferred: built with DeferExpansion, normalize outputs the
// uint8 HWC it reads with its table, and the table applied gives the
// bytes the op gives when not deferred, for f32 and f16.
func TestNormalizeDeferred(t *testing.T) {
	src := image.NewRGB(3, 2)
	for i := range src.Pix {
		src.Pix[i] = uint8(37 * i)
	}
	s := pngSample(t, "n", src)
	for _, dtype := range []string{"f32", "f16"} {
		doc := "ops: [decode, {op: normalize, dtype: " + dtype + "}]"
		whole := run(t, spec(t, doc), s, 1).Fields[0]
		p, err := Lookup(doc, Options{DeferExpansion: true})
		if err != nil {
			t.Fatal(err)
		}
		f := run(t, p, s, 1).Fields[0]
		if f.DType != "U8" || !cmp.Equal(f.Shape, []int{2, 3, 3}) || f.Expand == nil || !bytes.Equal(f.Data, src.Pix) {
			t.Fatalf("%s deferred: %s%v, expansion %v", dtype, f.DType, f.Shape, f.Expand != nil)
		}
		got := make([]byte, len(f.Data)*f.Expand.Size())
		f.Expand.Expand(got, f.Data, len(f.Data))
		if string(f.Expand.DType) != string(whole.DType) || !bytes.Equal(got, whole.Data) {
			t.Errorf("%s: the deferred table gives other bytes than normalize", dtype)
		}
	}
}

// halfToFloat decodes IEEE half precision, to check float16 against.
func halfToFloat(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

func TestFloat16(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {0.1, 0x2e66},
		{3.14159, 0x4248}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {1e6, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {float32(math.NaN()), 0x7e00},
		{5.960464477539063e-08, 0x0001}, {2.9e-8, 0}, {3.0e-8, 0x0001}, {6.097555e-05, 0x03ff}, {6.103515625e-05, 0x0400},
		{1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, {1.00146484375, 0x3c02}, // ties to even
	} {
		if got := float16(c.f); got != c.want {
			t.Errorf("float16(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	// Every result is a nearest half: no other half is strictly closer.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float32frombits(rng.Uint32())
		if math.IsNaN(float64(f)) || math.Abs(float64(f)) > 65504 {
			continue
		}
		h := float16(f)
		d := math.Abs(halfToFloat(h) - float64(f))
		for _, n := range []uint16{h - 1, h + 1} {
			if n&0x7c00 == 0x7c00 || (h&0x7fff == 0 && n == h-1) {
				continue
			}
			if dn := math.Abs(halfToFloat(n) - float64(f)); dn < d {
				t.Fatalf("float16(%v) = %#04x (%v), but %#04x (%v) is closer", f, h, halfToFloat(h), n, halfToFloat(n))
			}
		}
	}
}

func TestCenterCropPadsLikeTorchvision(t *testing.T) {
	src := patterned(10, 3)
	p := spec(t, "ops: [decode, {op: center_crop, size: 6}, to_uint8_hwc]")
	f := run(t, p, pngSample(t, "p", src), 1).Fields[0]
	if !cmp.Equal(f.Shape, []int{6, 6, 3}) {
		t.Fatalf("shape %v", f.Shape)
	}
	// Columns 2..7 of the source (round((10-6)/2) = 2); rows padded 1 on
	// top and 2 below ((6-3)//2 and the rest).
	for y := range 6 {
		row := f.Data[y*18 : (y+1)*18]
		want := make([]uint8, 18)
		if sy := y - 1; sy >= 0 && sy < 3 {
			want = src.Pix[(sy*10+2)*3 : (sy*10+8)*3]
		}
		if !bytes.Equal(row, want) {
			t.Errorf("row %d: %v, want %v", y, row, want)
		}
	}
	// A large enough image is cropped, not resampled.
	src = patterned(9, 8)
	f = run(t, spec(t, "ops: [decode, {op: center_crop, size: 4}, to_uint8_hwc]"), pngSample(t, "q", src), 1).Fields[0]
	want := &image.RGB{}
	if err := image.Crop(want, src, stdimage.Rect(2, 2, 6, 6)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Data, want.Pix) {
		t.Error("center crop of 9x8 to 4 is not the pixels at (2,2)-(6,6)")
	}
}

// TestImageNetMatchesReference pins the built-ins to the recipe written
// out with the image package: decode everything, then crop and resize
// (train: crop rectangle drawn first, then the flip). With the pure-Go
// decoder the lazy, region-decoding path must give the same bytes.
func TestImageNetMatchesReference(t *testing.T) {
	if image.Decoder != "go" {
		t.Skipf("decoder %s decodes regions at reduced scale", image.Decoder)
	}
	ss, _ := samples(t, 12, 0)
	train, eval := lookup(t, "imagenet-train"), lookup(t, "imagenet-eval")
	for _, s := range ss {
		src, err := image.Decode(s.Files["jpg"], 0)
		if err != nil {
			t.Fatal(err)
		}
		seed := SampleSeed(9, 2, s.Key)
		rng := newRand(seed)
		want, err := image.Resize(src, image.RandomResizedCrop(rng, src.W, src.H, image.DefaultScale, image.DefaultRatio), 224, 224)
		if err != nil {
			t.Fatal(err)
		}
		if rng.Float64() < 0.5 {
			image.FlipHorizontal(want)
		}
		if got := run(t, train, s, seed).Fields[0].Data; !bytes.Equal(got, want.Pix) {
			t.Errorf("imagenet-train %s differs from the reference", s.Key)
		}
		w, h := image.ShorterSide(src.W, src.H, 256)
		resized, err := image.Resize(src, src.Bounds(), w, h)
		if err != nil {
			t.Fatal(err)
		}
		want = &image.RGB{}
		if err := image.Crop(want, resized, image.CenterCrop(w, h, 224, 224)); err != nil {
			t.Fatal(err)
		}
		if got := run(t, eval, s, seed).Fields[0].Data; !bytes.Equal(got, want.Pix) {
			t.Errorf("imagenet-eval %s differs from the reference", s.Key)
		}
	}
}

const augmentSpec = `name: augment
label: {member: cls}
ops:
  - decode
  - {op: random_resized_crop, size: 96, scale: [0.25, 1]}
  - {op: random_horizontal_flip, p: 0.5}
  - {op: color_jitter, brightness: 0.4, contrast: 0.4, saturation: 0.4}
  - {op: normalize, dtype: f16}
`

func TestAugmentDeterminismAndConcurrency(t *testing.T) {
	ss, _ := samples(t, 8, 0)
	a, b := spec(t, augmentSpec), spec(t, augmentSpec)
	want := map[string]Output{}
	for _, s := range ss {
		x := run(t, a, s, SampleSeed(1, 5, s.Key))
		if y := run(t, b, s, SampleSeed(1, 5, s.Key)); !cmp.Equal(x, y) {
			t.Errorf("%s: same seed, different outputs", s.Key)
		}
		if z := run(t, a, s, SampleSeed(1, 6, s.Key)); bytes.Equal(x.Fields[0].Data, z.Fields[0].Data) {
			t.Errorf("%s: epochs 5 and 6 gave the same pixels", s.Key)
		}
		if got := shapes(x); !cmp.Equal(got, []string{"image F16[3 96 96] 55296", "label I64[] 8"}) {
			t.Errorf("%s: fields %v", s.Key, got)
		}
		want[s.Key] = x
	}
	// Concurrent calls on one pipeline share its pools, not their state.
	var wg sync.WaitGroup
	errs := make(chan error, 4*len(ss))
	for g := range 4 {
		wg.Go(func() {
			for i := range ss {
				s := ss[(i+g)%len(ss)]
				out, err := a.Process(s, SampleSeed(1, 5, s.Key))
				if err != nil {
					errs <- err
					continue
				}
				if !cmp.Equal(out, want[s.Key]) {
					errs <- fmt.Errorf("%s: concurrent output differs", s.Key)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestResizeRefusesHugeOutputs(t *testing.T) {
	p, err := Lookup("ops: [decode, {op: resize, size: 4000}, to_uint8_hwc]", Options{MaxPixels: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Process(pngSample(t, "w", patterned(40, 4)), 1)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("over the 1000000-pixel limit")) {
		t.Errorf("error %v, want one naming the pixel limit", err)
	}
}

func TestPooledStateDropsHugeBuffers(t *testing.T) {
	st := newState()
	st.decodeBuf.Reset(4000, 3000) // 36 MB
	st.work[0].Reset(224, 224)
	st.trim()
	if st.decodeBuf.Pix != nil {
		t.Errorf("a %d-byte decode buffer stayed pooled", cap(st.decodeBuf.Pix))
	}
	if cap(st.work[0].Pix) != 224*224*3 {
		t.Errorf("a small work buffer was dropped (cap %d)", cap(st.work[0].Pix))
	}
}
