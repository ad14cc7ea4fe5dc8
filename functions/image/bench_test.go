package image

import (
	"image"
	"math/rand/v2"
	"testing"

	"github.com/sluice-project/sluice/synth"
)

// benchJPEG is the shared 400x300 quality-90 benchmark JPEG.
func benchJPEG(b *testing.B) []byte {
	data, err := synth.NoisyJPEG(400, 300, 90)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func BenchmarkDecode400x300(b *testing.B) {
	data := benchJPEG(b)
	dst := &RGB{}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := DecodeInto(dst, data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRandomResizedCrop224 is the train recipe's resampling: a random
// crop of the decoded image to 224x224.
func BenchmarkRandomResizedCrop224(b *testing.B) {
	src, err := Decode(benchJPEG(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	dst := NewRGB(224, 224)
	rng := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	for b.Loop() {
		r := RandomResizedCrop(rng, src.W, src.H, DefaultScale, DefaultRatio)
		if err := ResizeInto(dst, src, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResizeFull224 downscales the whole 400x300 image to 224x224.
func BenchmarkResizeFull224(b *testing.B) {
	src, err := Decode(benchJPEG(b), 0)
	if err != nil {
		b.Fatal(err)
	}
	dst := NewRGB(224, 224)
	b.ReportAllocs()
	for b.Loop() {
		if err := ResizeInto(dst, src, src.Bounds()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFlip224(b *testing.B) {
	m := pattern(224, 224)
	b.SetBytes(int64(len(m.Pix)))
	b.ReportAllocs()
	for b.Loop() {
		FlipHorizontal(m)
	}
}

// BenchmarkSixteenBitToRGB: a decoded 2000x2000 16-bit PNG to RGB, the
// fast path beside the per-pixel color model it replaced.
func BenchmarkSixteenBitToRGB(b *testing.B) {
	img := image.NewRGBA64(image.Rect(0, 0, 2000, 2000))
	for i := 0; i < len(img.Pix); i += 8 {
		img.Pix[i], img.Pix[i+6], img.Pix[i+7] = uint8(i), 0xff, 0xff
	}
	for _, path := range []struct {
		name string
		f    func(*RGB, image.Image, image.Rectangle)
	}{{"fast", toRGB}, {"colormodel", func(dst *RGB, img image.Image, r image.Rectangle) {
		dst.Reset(r.Dx(), r.Dy())
		convertRGB(dst, img, r)
	}}} {
		b.Run(path.name, func(b *testing.B) {
			var dst RGB
			b.ReportAllocs()
			for range b.N {
				path.f(&dst, img, img.Bounds())
			}
		})
	}
}
