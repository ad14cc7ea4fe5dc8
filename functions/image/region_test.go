package image

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

// These tests run in both builds; region_turbo_test.go adds the
// libjpeg-turbo decoder's own.

// psnr is the peak signal-to-noise ratio of b against a, in dB (+Inf when
// they are equal).
func psnr(a, b []uint8) float64 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("psnr of %d and %d bytes", len(a), len(b)))
	}
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

// photos are ImageNet-like JPEGs: 300-800 px sides, quality 90, 4:2:0.
func photos(t testing.TB, n int) [][]byte {
	t.Helper()
	shards, err := synth.Images(synth.ImageOptions{Samples: n, Shards: 1, Seed: 11, MinSide: 300, MaxSide: 800, Quality: 90, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	r := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s.Files["jpg"])
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// regionTo decodes r of data with DecodeRegion (minimum size w×h) and
// resizes it to w×h, as a crop op does.
func regionTo(t testing.TB, data []byte, r image.Rectangle, w, h int) *RGB {
	t.Helper()
	var src RGB
	got, err := DecodeRegion(&src, data, r, w, h, 0)
	if err != nil {
		t.Fatalf("DecodeRegion %v: %v", r, err)
	}
	if got.Empty() || !got.In(src.Bounds()) || got.Dx() < min(w, r.Dx()) || got.Dy() < min(h, r.Dy()) {
		t.Fatalf("DecodeRegion %v (min %dx%d) gave %v in a %dx%d buffer", r, w, h, got, src.W, src.H)
	}
	out, err := Resize(&src, got, w, h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goRegionTo is the reference for regionTo: the standard library decodes
// the whole image at full scale, then r is resized to w×h.
func goRegionTo(t testing.TB, data []byte, r image.Rectangle, w, h int) *RGB {
	t.Helper()
	src, err := Decode(data, 0)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	out, err := Resize(src, r, w, h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecodeRegionTestdata covers encodings Go's encoder cannot make
// (progressive, 4:4:4, CMYK), in both builds: the region decodes, to the
// same shape, and close to what the Go decoder makes of the same region.
func TestDecodeRegionTestdata(t *testing.T) {
	for _, c := range []struct {
		file    string
		minPSNR float64
	}{
		{"progressive.jpg", 30},
		{"progressive_gray.jpg", 30},
		{"baseline444.jpg", 30},
		{"cmyk.jpg", math.Inf(1)}, // decoded whole at full scale by Go code in both builds
	} {
		data := readTestdata(t, c.file)
		w, h, err := Size(data)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for _, r := range []image.Rectangle{
			image.Rect(0, 0, w, h),
			image.Rect(w/5, h/7, w-w/9, h-h/3),
			image.Rect(w/2, h/2, w, h),
		} {
			for _, size := range []int{32, 56} {
				got := regionTo(t, data, r, size, size)
				want := goRegionTo(t, data, r, size, size)
				// Measured: 33 dB at worst (32x32 outputs, decoded at a
				// reduced DCT scale), in both builds.
				if p := psnr(want.Pix, got.Pix); p < c.minPSNR {
					t.Errorf("%s %v -> %dx%d: PSNR %.1f dB against the Go decoder, want >= %.0f", c.file, r, size, size, p, c.minPSNR)
				}
			}
		}
	}
}

// TestDecodeRegionGrayIsGray: a one-component JPEG decodes to R = G = B.
func TestDecodeRegionGrayIsGray(t *testing.T) {
	for _, data := range [][]byte{readTestdata(t, "progressive_gray.jpg"), grayJPEG(t, 120, 90)} {
		var dst RGB
		w, h, _ := Size(data)
		got, err := DecodeRegion(&dst, data, image.Rect(0, 0, w, h), w/2, h/2, 0)
		if err != nil {
			t.Fatal(err)
		}
		for y := got.Min.Y; y < got.Max.Y; y++ {
			for x := got.Min.X; x < got.Max.X; x++ {
				p := dst.Pix[(y*dst.W+x)*3:][:3]
				if p[0] != p[1] || p[1] != p[2] {
					t.Fatalf("pixel (%d,%d) = %v, want gray", x, y, p)
				}
			}
		}
	}
}

func grayJPEG(t testing.TB, w, h int) []byte {
	img := image.NewGray(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Pix[y*w+x] = uint8(x*255/w) ^ uint8(y*3)
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDecodeRegionPhotos: ImageNet-like JPEGs and random crops, as the
// train recipe makes them, come out 224x224 and close to what a full
// decode by the standard library gives.
func TestDecodeRegionPhotos(t *testing.T) {
	worst := math.Inf(1)
	defer func() { t.Logf("decoder %s: worst PSNR %.1f dB against a full decode", Decoder, worst) }()
	for i, data := range photos(t, 6) {
		w, h, err := Size(data)
		if err != nil {
			t.Fatal(err)
		}
		for k := range 4 {
			r := RandomResizedCrop(rand.New(rand.NewPCG(uint64(i), uint64(k))), w, h, DefaultScale, DefaultRatio)
			// Both builds decode the same scaled rectangle.
			var src RGB
			rect, err := DecodeRegion(&src, data, r, 224, 224, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := scaledRegion(r, w, h, scaleFor(r, w, h, 224, 224)); rect.Size() != want.Size() {
				t.Errorf("photo %d crop %v: decoded %v, want %v's size", i, r, rect, want)
			}
			got := regionTo(t, data, r, 224, 224)
			want := goRegionTo(t, data, r, 224, 224)
			if got.W != 224 || got.H != 224 {
				t.Fatalf("output %dx%d", got.W, got.H)
			}
			p := psnr(want.Pix, got.Pix)
			worst = min(worst, p)
			if p < 30 {
				t.Errorf("photo %d (%dx%d) crop %v: PSNR %.1f dB against a full decode, want >= 30", i, w, h, r, p)
			}
		}
	}
}

// TestYCbCrToRGBMatchesStdlib pins the inlined conversion to
// color.YCbCrToRGB for every subsampling and for regions at odd offsets.
func TestYCbCrToRGBMatchesStdlib(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, ratio := range []image.YCbCrSubsampleRatio{
		image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420,
		image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410,
	} {
		m := image.NewYCbCr(image.Rect(0, 0, 37, 23), ratio)
		for i := range m.Y {
			m.Y[i] = uint8(rng.Uint32())
		}
		for i := range m.Cb {
			m.Cb[i], m.Cr[i] = uint8(rng.Uint32()), uint8(rng.Uint32())
		}
		for _, r := range []image.Rectangle{m.Rect, image.Rect(1, 1, 36, 22), image.Rect(3, 5, 4, 6), image.Rect(6, 2, 31, 19)} {
			var dst RGB
			toRGB(&dst, m, r)
			for y := r.Min.Y; y < r.Max.Y; y++ {
				for x := r.Min.X; x < r.Max.X; x++ {
					c := m.YCbCrAt(x, y)
					wr, wg, wb := color.YCbCrToRGB(c.Y, c.Cb, c.Cr)
					got := dst.Pix[((y-r.Min.Y)*dst.W+x-r.Min.X)*3:][:3]
					if got[0] != wr || got[1] != wg || got[2] != wb {
						t.Fatalf("%v %v pixel (%d,%d): %v, color.YCbCrToRGB says [%d %d %d]", ratio, r, x, y, got, wr, wg, wb)
					}
				}
			}
		}
	}
}

// TestResizeMatchesReference checks the unrolled, unchecked resampling
// loops, and the AVX2 vertical pass where the CPU has it, against a plain
// rendering of the same arithmetic, over random sizes that exercise every
// tap count from 1 to about 12.
func TestResizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for i := range 300 {
		w, h := 1+rng.IntN(160), 1+rng.IntN(160)
		src := pattern(w, h)
		x0, y0 := rng.IntN(w), rng.IntN(h)
		r := image.Rect(x0, y0, x0+1+rng.IntN(w-x0), y0+1+rng.IntN(h-y0))
		ow, oh := 1+rng.IntN(60), 1+rng.IntN(60)
		if i%3 == 0 {
			ow = r.Dx() // exercise the vertical-only path
		}
		want := referenceResize(src, r, ow, oh)
		for _, simd := range []bool{true, false} {
			got := NewRGB(ow, oh)
			if err := resizeInto(got, src, r, simd); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Pix, want.Pix) {
				t.Fatalf("%dx%d %v -> %dx%d (vector pass %v): resize differs from the reference", w, h, r, ow, oh, simd)
			}
		}
	}
}

// referenceResize is Pillow's two-pass algorithm written plainly.
func referenceResize(src *RGB, r image.Rectangle, ow, oh int) *RGB {
	var hc, vc coeffs
	hc.compute(r.Min.X, r.Dx(), ow)
	vc.compute(r.Min.Y, r.Dy(), oh)
	mid := NewRGB(ow, src.H)
	for y := range src.H {
		for x := range ow {
			for ch := range 3 {
				v := int32(half)
				if r.Dx() == ow {
					v += int32(src.Pix[(y*src.W+r.Min.X+x)*3+ch]) << precisionBits
				} else {
					for j := range hc.n[x] {
						v += int32(src.Pix[(y*src.W+hc.start[x]+j)*3+ch]) * hc.k[x*hc.ksize+j]
					}
				}
				mid.Pix[(y*ow+x)*3+ch] = clip8(v)
			}
		}
	}
	out := NewRGB(ow, oh)
	for y := range oh {
		for x := range ow {
			for ch := range 3 {
				v := int32(half)
				if r.Dy() == oh {
					v += int32(mid.Pix[((r.Min.Y+y)*ow+x)*3+ch]) << precisionBits
				} else {
					for j := range vc.n[y] {
						v += int32(mid.Pix[((vc.start[y]+j)*ow+x)*3+ch]) * vc.k[y*vc.ksize+j]
					}
				}
				out.Pix[(y*ow+x)*3+ch] = clip8(v)
			}
		}
	}
	return out
}

func TestScaleFor(t *testing.T) {
	for _, c := range []struct {
		name             string
		r                image.Rectangle
		w, h, minW, minH int
		num              int
		scaled           image.Rectangle
	}{
		{"large region quarter scale", image.Rect(0, 0, 800, 600), 800, 600, 200, 150, 2, image.Rect(0, 0, 200, 150)},
		{"one pixel short of 1/4", image.Rect(0, 0, 796, 600), 800, 600, 200, 150, 4, image.Rect(0, 0, 398, 300)},
		{"needs full scale", image.Rect(10, 10, 300, 300), 400, 400, 224, 224, 8, image.Rect(10, 10, 300, 300)},
		{"half scale", image.Rect(100, 50, 600, 550), 800, 600, 224, 224, 4, image.Rect(50, 25, 300, 275)},
		{"eighth scale", image.Rect(0, 0, 4000, 3000), 4000, 3000, 256, 256, 1, image.Rect(0, 0, 500, 375)},
		{"region smaller than min", image.Rect(5, 5, 105, 55), 400, 300, 224, 224, 8, image.Rect(5, 5, 105, 55)},
		{"odd edges round to nearest", image.Rect(3, 5, 797, 595), 801, 601, 100, 100, 2, image.Rect(1, 1, 199, 149)},
		{"no minimum", image.Rect(0, 0, 16, 16), 16, 16, 0, 0, 1, image.Rect(0, 0, 2, 2)},
		{"thin region stays non-empty", image.Rect(0, 7, 4000, 8), 4000, 16, 224, 1, 1, image.Rect(0, 1, 500, 2)},
	} {
		num := scaleFor(c.r, c.w, c.h, c.minW, c.minH)
		s := scaledRegion(c.r, c.w, c.h, num)
		if num != c.num || s != c.scaled {
			t.Errorf("%s: scale %d/8 region %v, want %d/8 %v", c.name, num, s, c.num, c.scaled)
		}
		if !s.In(image.Rect(0, 0, ceilDiv(c.w*num, 8), ceilDiv(c.h*num, 8))) || s.Empty() {
			t.Errorf("%s: scaled region %v outside the scaled image", c.name, s)
		}
	}
}

// TestScaledRegionProperties: for random regions the scaled region is
// inside the scaled image, non-empty, and within half a scaled pixel of
// the exact mapping at each edge (unless clamped).
func TestScaledRegionProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 9))
	for range 5000 {
		w, h := 1+rng.IntN(3000), 1+rng.IntN(3000)
		x0, y0 := rng.IntN(w), rng.IntN(h)
		r := image.Rect(x0, y0, x0+1+rng.IntN(w-x0), y0+1+rng.IntN(h-y0))
		num := []int{1, 2, 4, 8}[rng.IntN(4)]
		s := scaledRegion(r, w, h, num)
		if s.Empty() || !s.In(image.Rect(0, 0, ceilDiv(w*num, 8), ceilDiv(h*num, 8))) {
			t.Fatalf("%dx%d %v at %d/8: %v", w, h, r, num, s)
		}
		exact := func(v int) float64 { return float64(v*num) / 8 }
		sw, sh := ceilDiv(w*num, 8), ceilDiv(h*num, 8)
		for _, e := range [][3]float64{
			{float64(s.Min.X), exact(r.Min.X), float64(sw - 1)}, {float64(s.Min.Y), exact(r.Min.Y), float64(sh - 1)},
			{float64(s.Max.X), exact(r.Max.X), float64(s.Min.X + 1)}, {float64(s.Max.Y), exact(r.Max.Y), float64(s.Min.Y + 1)},
		} {
			// Off by more than half a pixel only where clamped to keep
			// the region inside and non-empty.
			if math.Abs(e[0]-e[1]) > 0.5 && e[0] != e[2] {
				t.Fatalf("%dx%d %v at %d/8: edge at %v, exactly %v", w, h, r, num, e[0], e[1])
			}
		}
		need := scaleFor(r, w, h, 224, 224)
		if got := scaledRegion(r, w, h, need); got.Dx() < min(224, r.Dx()) || got.Dy() < min(224, r.Dy()) {
			t.Fatalf("%dx%d %v: scale %d/8 gives %v, smaller than 224 or the region", w, h, r, need, got)
		}
	}
}

func BenchmarkDecodeRegionCrop(b *testing.B) {
	data := photos(b, 1)[0]
	w, h, _ := Size(data)
	r := image.Rect(w/6, h/5, w-w/4, h-h/6)
	var dst RGB
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRegion(&dst, data, r, 224, 224, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrainSample is the train recipe's image work on one sample:
// header, random crop, region decode, resize to 224x224, flip.
func BenchmarkTrainSample(b *testing.B) {
	datas := photos(b, 8)
	var src RGB
	out := NewRGB(224, 224)
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		data := datas[i%len(datas)]
		i++
		w, h, err := Size(data)
		if err != nil {
			b.Fatal(err)
		}
		r := RandomResizedCrop(rng, w, h, DefaultScale, DefaultRatio)
		got, err := DecodeRegion(&src, data, r, 224, 224, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := ResizeInto(out, &src, got); err != nil {
			b.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			FlipHorizontal(out)
		}
	}
}

// TestDecodeRegionCutShort: a JPEG cut in the middle fails, in both builds,
// whether it simply ends (the EOI check) or a re-added EOI marker hides the
// cut (then the decoder meets the marker mid-scan: an error in Go's
// decoder, a warning that must fail the sample in libjpeg's). A region
// wholly above the cut of the second kind decodes: nothing below it is
// read.
func TestDecodeRegionCutShort(t *testing.T) {
	data := photos(t, 1)[0]
	w, h, _ := Size(data)
	cut := data[:len(data)/2]
	reterminated := append(bytes.Clone(cut), 0xff, 0xd9)
	var dst RGB
	for name, b := range map[string][]byte{"cut": cut, "cut, EOI re-added": reterminated} {
		_, err := DecodeRegion(&dst, b, image.Rect(0, 0, w, h), w, h, 0)
		if err == nil {
			t.Errorf("%s: whole image decoded", name)
		} else if !strings.Contains(err.Error(), "jpeg") {
			t.Errorf("%s: error %q does not say jpeg", name, err)
		}
	}
	top := image.Rect(w/4, 0, w/2, h/8)
	if _, err := DecodeRegion(&dst, reterminated, top, top.Dx(), top.Dy(), 0); err != nil {
		t.Errorf("region %v above the cut: %v", top, err)
	}
}
