package jpeg

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	stdjpeg "image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/synth"
)

// inputs are JPEGs of every kind the fork must handle like the standard
// library: Go-encoded 4:2:0 photos and Pillow's progressive, 4:4:4,
// grayscale and CMYK files from the image package's testdata.
func inputs(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	shards, err := synth.Images(synth.ImageOptions{Samples: 3, Shards: 1, Seed: 21, MinSide: 150, MaxSide: 500, Quality: 90, Classes: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := wds.NewReader(bytes.NewReader(shards[0].Data), 0)
	for {
		s, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out["synth-"+s.Key] = s.Files["jpg"]
	}
	for _, name := range []string{"progressive.jpg", "progressive_gray.jpg", "baseline444.jpg", "cmyk.jpg"} {
		b, err := os.ReadFile("../../testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

// TestFullScaleMatchesStdlib: at full scale and with no region, the fork
// decodes exactly what image/jpeg does, pixel for pixel, reusing one
// Decoder across images of different kinds and sizes.
func TestFullScaleMatchesStdlib(t *testing.T) {
	var dec Decoder
	for round := range 2 {
		for name, data := range inputs(t) {
			want, err := stdjpeg.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			got, err := dec.Decode(data, image.Rectangle{}, 8)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.Bounds() != want.Bounds() {
				t.Fatalf("%s: bounds %v, want %v", name, got.Bounds(), want.Bounds())
			}
			if !samePixels(got, want, want.Bounds()) {
				t.Errorf("round %d, %s: pixels differ from image/jpeg's", round, name)
			}
		}
	}
}

// TestRegionMatchesStdlib: a region's pixels are exactly image/jpeg's,
// whatever was skipped around it.
func TestRegionMatchesStdlib(t *testing.T) {
	var dec Decoder
	rng := rand.New(rand.NewPCG(3, 3))
	for name, data := range inputs(t) {
		want, _ := stdjpeg.Decode(bytes.NewReader(data))
		b := want.Bounds()
		for range 8 {
			x0, y0 := rng.IntN(b.Dx()), rng.IntN(b.Dy())
			r := image.Rect(x0, y0, x0+1+rng.IntN(b.Dx()-x0), y0+1+rng.IntN(b.Dy()-y0))
			got, err := dec.Decode(data, r, 8)
			if err != nil {
				t.Fatalf("%s %v: %v", name, r, err)
			}
			if !samePixels(got, want, r) {
				t.Errorf("%s region %v: pixels differ from image/jpeg's", name, r)
			}
		}
	}
}

// TestStopsAfterTheRegion: a sequential JPEG cut short below the region
// still decodes the region: the data after it is never read.
func TestStopsAfterTheRegion(t *testing.T) {
	data := inputs(t)["synth-00000000"]
	want, _ := stdjpeg.Decode(bytes.NewReader(data))
	b := want.Bounds()
	r := image.Rect(b.Dx()/4, 0, b.Dx()/2, b.Dy()/4)
	cut := data[:len(data)/2]
	var dec Decoder
	if _, err := dec.Decode(cut, image.Rectangle{}, 8); err == nil {
		t.Fatal("the whole of a half file decoded")
	}
	got, err := dec.Decode(cut, r, 8)
	if err != nil {
		t.Fatalf("top quarter of a half file: %v", err)
	}
	if !samePixels(got, want, r) {
		t.Error("region of the half file differs from the whole file's")
	}
}

// TestScaledDecode: at 1/8, 1/4 and 1/2 the image is ceil(size*m/8) and
// each pixel is close to the mean of the full-scale pixels it stands for
// (at 1/8, a block's mean: its DC coefficient).
func TestScaledDecode(t *testing.T) {
	var dec Decoder
	for name, data := range inputs(t) {
		if name == "cmyk.jpg" {
			continue // always decoded at full scale
		}
		want, _ := stdjpeg.Decode(bytes.NewReader(data))
		b := want.Bounds()
		for _, m := range []int{1, 2, 4} {
			got, err := dec.Decode(data, image.Rectangle{}, m)
			if err != nil {
				t.Fatalf("%s at %d/8: %v", name, m, err)
			}
			gb := got.Bounds()
			if gb.Dx() != (b.Dx()*m+7)/8 || gb.Dy() != (b.Dy()*m+7)/8 {
				t.Fatalf("%s at %d/8: %v from %v", name, m, gb, b)
			}
			// Compare luma with box means over the whole boxes inside the image.
			var se float64
			n := 0
			s := 8 / m
			for y := 0; (y+1)*s <= b.Dy(); y++ {
				for x := 0; (x+1)*s <= b.Dx(); x++ {
					sum := 0.0
					for yy := range s {
						for xx := range s {
							sum += float64(luma(want, x*s+xx, y*s+yy))
						}
					}
					d := float64(luma(got, x, y)) - sum/float64(s*s)
					se += d * d
					n++
				}
			}
			if p := 10 * math.Log10(255*255*float64(n)/se); p < 30 {
				t.Errorf("%s at %d/8: luma PSNR %.1f dB against box means of the full decode", name, m, p)
			}
		}
	}
}

// TestCorruptNeverPanics: random byte flips, at every scale and with
// regions, give an error or an image.
func TestCorruptNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var dec Decoder
	for name, data := range inputs(t) {
		for range 60 {
			c := bytes.Clone(data)
			for range 6 {
				c[2+rng.IntN(len(c)-2)] = uint8(rng.Uint32())
			}
			m := []int{1, 2, 4, 8}[rng.IntN(4)]
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("%s at %d/8: panic %v", name, m, p)
					}
				}()
				_, _ = dec.Decode(c, image.Rect(0, 0, 16, 16), m)
			}()
		}
	}
}

func luma(m image.Image, x, y int) uint8 {
	switch m := m.(type) {
	case *image.YCbCr:
		return m.Y[m.YOffset(x, y)]
	case *image.Gray:
		return m.Pix[m.PixOffset(x, y)]
	}
	return color.GrayModel.Convert(m.At(x, y)).(color.Gray).Y
}

// samePixels compares two decodes over r in their native colour models.
func samePixels(a, b image.Image, r image.Rectangle) bool {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				return false
			}
		}
	}
	return true
}

// codingPairs are testdata files that hold the same DCT coefficients in
// two codings (see testdata/gen_recoded.sh): arithmetic or with restart
// intervals, and the Huffman-coded original.
var codingPairs = [][2]string{
	{"testimgari.jpg", "testimgint.jpg"},
	{"arith_444.jpg", "baseline444.jpg"},
	{"arith_progressive.jpg", "progressive.jpg"},
	{"arith_gray.jpg", "progressive_gray.jpg"},
	{"arith_cmyk.jpg", "cmyk.jpg"},
	{"progressive_restart.jpg", "progressive.jpg"},
}

// TestCodingsDecodeAlike: arithmetic coding (sequential and progressive,
// with DAC conditioning and restart intervals) and restart intervals in a
// progressive file's one-component scans decode, at every scale and in any
// region, to exactly what the Huffman-coded original does; corrupting
// them gives an error or an image, never a panic.
func TestCodingsDecodeAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var dec, ref Decoder
	for _, p := range codingPairs {
		data, err := os.ReadFile("../../testdata/" + p[0])
		if err != nil {
			t.Fatal(err)
		}
		orig, err := os.ReadFile("../../testdata/" + p[1])
		if err != nil {
			t.Fatal(err)
		}
		w, h, _, err := dec.Config(data)
		if err != nil {
			t.Fatalf("%s: %v", p[0], err)
		}
		for _, m := range []int{1, 2, 4, 8} {
			for k := range 4 {
				r := image.Rect(0, 0, w, h)
				if k > 0 {
					x0, y0 := rng.IntN(w), rng.IntN(h)
					r = image.Rect(x0, y0, x0+1+rng.IntN(w-x0), y0+1+rng.IntN(h-y0))
				}
				got, err := dec.Decode(data, r, m)
				if err != nil {
					t.Fatalf("%s %v at %d/8: %v", p[0], r, m, err)
				}
				want, err := ref.Decode(orig, r, m)
				if err != nil {
					t.Fatalf("%s %v at %d/8: %v", p[1], r, m, err)
				}
				sm := m
				if p[0] == "arith_cmyk.jpg" {
					sm = 8 // CMYK is always decoded at full scale
				}
				sr := image.Rect(r.Min.X*sm/8, r.Min.Y*sm/8, (r.Max.X*sm+7)/8, (r.Max.Y*sm+7)/8)
				if got.Bounds() != want.Bounds() || !samePixels(got, want, sr) {
					t.Fatalf("%s %v at %d/8: differs from %s", p[0], r, m, p[1])
				}
			}
		}
		for range 100 {
			c := bytes.Clone(data)
			for range 4 {
				c[2+rng.IntN(len(c)-2)] = uint8(rng.Uint32())
			}
			m := []int{1, 2, 4, 8}[rng.IntN(4)]
			func() {
				defer func() {
					if v := recover(); v != nil {
						t.Fatalf("%s at %d/8: panic %v", p[0], m, v)
					}
				}()
				_, _ = dec.Decode(c, image.Rectangle{}, m)
			}()
		}
	}
}
