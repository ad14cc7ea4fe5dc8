package image

import (
	"bytes"
	"image"
	"image/jpeg"
	"math/rand/v2"
	"testing"
)

// benchJPEG is a 400x300 4:2:0 JPEG with gradients and noise, so its
// entropy (and decode cost) resembles a photo's more than a flat fill would.
func benchJPEG(b *testing.B) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	img := image.NewYCbCr(image.Rect(0, 0, 400, 300), image.YCbCrSubsampleRatio420)
	for y := 0; y < 300; y++ {
		for x := 0; x < 400; x++ {
			img.Y[img.YOffset(x, y)] = uint8(x/3+y/3) + uint8(rng.IntN(24))
		}
	}
	for i := range img.Cb {
		img.Cb[i], img.Cr[i] = uint8(i/7), uint8(255-i/11)
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90}); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
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
