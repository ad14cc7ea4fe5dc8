package image

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-project/sluice/internal/synth"
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
