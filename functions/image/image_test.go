package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// pattern is a busy deterministic test image; the Pillow hashes below were
// computed from the same formula.
func pattern(w, h int) *RGB {
	m := NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8((i*7919 + (i>>5)*31 + (i*i)%97) % 251)
	}
	return m
}

// TestResizeMatchesPillow pins the resampler to Pillow 9.4's
// img.crop(box).resize(size, Image.BILINEAR), which is what torchvision's
// transforms do to PIL images.
func TestResizeMatchesPillow(t *testing.T) {
	for _, c := range []struct {
		w, h   int
		box    image.Rectangle
		ow, oh int
		sha    string
	}{
		{97, 73, image.Rect(0, 0, 97, 73), 224, 224, "aeed15294f7c59adb666cdde6789e7f97079dd0e1506405bce257f61af92f04b"},
		{400, 300, image.Rect(13, 7, 313, 257), 224, 224, "cbdc9f33aeb44edd7dbaba694662badb20f123a4cc86118a80f9a5466d1603b1"},
		{400, 300, image.Rect(0, 0, 400, 300), 56, 41, "40556d6e89ca4a7da11e1ff46bddcae41fe56a971f08bd9807ac3aec546713a1"},
		{97, 73, image.Rect(5, 5, 60, 70), 224, 50, "184a930438b89947a6dc9af0d219db1d2b777917f1a1ed82b31f2b39b5093de7"},
		{400, 300, image.Rect(10, 0, 234, 300), 224, 100, "d3fc027ea39a35f2fdcb617847db8d76f001adbad19f1cc1409807bec4aa17f2"},
		{400, 300, image.Rect(0, 50, 400, 51), 224, 224, "cb6a5ede40287f5200b438208ade7385bf1098fd2c063701f014854e1bf200fc"},
		{1000, 10, image.Rect(0, 0, 1000, 10), 224, 224, "9120f19f7405829e2aa24a6e5d39ff30f8522c7d5381352a459ba97bff3ec620"},
	} {
		out, err := Resize(pattern(c.w, c.h), c.box, c.ow, c.oh)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(out.Pix)
		if got := hex.EncodeToString(sum[:]); got != c.sha {
			t.Errorf("%dx%d %v -> %dx%d: sha256 %s, Pillow's is %s (first pixels %v)", c.w, c.h, c.box, c.ow, c.oh, got, c.sha, out.Pix[:6])
		}
	}
}

func TestResizeConstantStaysConstant(t *testing.T) {
	src := NewRGB(123, 77)
	for i := 0; i < len(src.Pix); i += 3 {
		src.Pix[i], src.Pix[i+1], src.Pix[i+2] = 200, 17, 99
	}
	for _, size := range [][2]int{{224, 224}, {10, 300}, {123, 77}, {61, 38}, {1, 1}} {
		out, err := Resize(src, image.Rect(3, 4, 120, 70), size[0], size[1])
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(out.Pix); i += 3 {
			if p := out.Pix[i : i+3]; p[0] != 200 || p[1] != 17 || p[2] != 99 {
				t.Fatalf("%v: pixel %d is %v, want [200 17 99]", size, i/3, p)
			}
		}
	}
}

func TestResizeIdentity(t *testing.T) {
	src := pattern(50, 40)
	out, err := Resize(src, src.Bounds(), 50, 40)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Pix, src.Pix) {
		t.Fatal("resizing to the same size changed pixels")
	}
	// Same size through the filter path too: a crop of the same size is a copy.
	out, err = Resize(src, image.Rect(5, 6, 25, 36), 20, 30)
	if err != nil {
		t.Fatal(err)
	}
	want := &RGB{}
	if err := Crop(want, src, image.Rect(5, 6, 25, 36)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Pix, want.Pix) {
		t.Fatal("same-size resize of a crop differs from the crop")
	}
}

func TestResizeRejectsBadRects(t *testing.T) {
	src := pattern(10, 10)
	for _, r := range []image.Rectangle{image.Rect(0, 0, 11, 5), image.Rect(3, 3, 3, 8), image.Rect(-1, 0, 5, 5)} {
		if _, err := Resize(src, r, 4, 4); err == nil {
			t.Errorf("resize of %v in a 10x10 image: no error", r)
		}
	}
	if err := ResizeInto(&RGB{W: 4, H: 4, Pix: make([]uint8, 5)}, src, src.Bounds()); err == nil {
		t.Error("resize into a short buffer: no error")
	}
}

func TestFlipTwiceIsIdentity(t *testing.T) {
	for _, size := range [][2]int{{1, 1}, {2, 3}, {7, 5}, {224, 224}} {
		src := pattern(size[0], size[1])
		m := &RGB{W: src.W, H: src.H, Pix: bytes.Clone(src.Pix)}
		FlipHorizontal(m)
		if size[0] > 1 && bytes.Equal(m.Pix, src.Pix) {
			t.Errorf("%v: flip changed nothing", size)
		}
		// The first pixel of each row is the last one of the source row.
		for y := 0; y < m.H; y++ {
			got := m.Pix[y*m.W*3 : y*m.W*3+3]
			want := src.Pix[((y+1)*m.W-1)*3 : (y+1)*m.W*3]
			if !bytes.Equal(got, want) {
				t.Fatalf("%v row %d: first pixel %v, want %v", size, y, got, want)
			}
		}
		FlipHorizontal(m)
		if !bytes.Equal(m.Pix, src.Pix) {
			t.Errorf("%v: flipping twice is not the identity", size)
		}
	}
}

func TestRandomResizedCropProperties(t *testing.T) {
	for _, size := range [][2]int{{400, 300}, {300, 400}, {224, 224}, {37, 1000}, {5, 5}, {1, 1}} {
		w, h := size[0], size[1]
		for seed := range uint64(300) {
			r := RandomResizedCrop(rand.New(rand.NewPCG(seed, 1)), w, h, DefaultScale, DefaultRatio)
			if r.Empty() || !r.In(image.Rect(0, 0, w, h)) {
				t.Fatalf("%dx%d seed %d: crop %v not a non-empty part of the image", w, h, seed, r)
			}
			again := RandomResizedCrop(rand.New(rand.NewPCG(seed, 1)), w, h, DefaultScale, DefaultRatio)
			if again != r {
				t.Fatalf("%dx%d seed %d: %v then %v", w, h, seed, r, again)
			}
			if w < 50 || h < 50 {
				continue // rounding dominates the bounds of tiny crops
			}
			// Rounding each side to an integer moves ratio and area a little.
			ratio := float64(r.Dx()) / float64(r.Dy())
			area := float64(r.Dx()*r.Dy()) / float64(w*h)
			slack := 1.0 / float64(min(r.Dx(), r.Dy()))
			if ratio < DefaultRatio.Min*(1-2*slack) || ratio > DefaultRatio.Max*(1+2*slack) {
				t.Errorf("%dx%d seed %d: crop %v has ratio %.3f outside [3/4, 4/3]", w, h, seed, r, ratio)
			}
			if area < DefaultScale.Min*(1-3*slack) || area > 1 {
				t.Errorf("%dx%d seed %d: crop %v covers %.3f of the image, outside [0.08, 1]", w, h, seed, r, area)
			}
		}
	}
}

func TestRandomResizedCropSeedsDiffer(t *testing.T) {
	seen := map[image.Rectangle]bool{}
	for seed := range uint64(50) {
		seen[RandomResizedCrop(rand.New(rand.NewPCG(seed, 1)), 400, 300, DefaultScale, DefaultRatio)] = true
	}
	if len(seen) < 45 {
		t.Fatalf("50 seeds gave only %d distinct crops", len(seen))
	}
}

func TestRandomResizedCropFallback(t *testing.T) {
	// A 1000x10 strip fits no box with ratio in [3/4, 4/3] and area >= 8%
	// (800 px needs sides near 28 > 10), so all 10 tries fail and the
	// fallback centres a 13x10 crop (10 * 4/3 rounded).
	for seed := range uint64(20) {
		r := RandomResizedCrop(rand.New(rand.NewPCG(seed, 1)), 1000, 10, DefaultScale, DefaultRatio)
		if want := image.Rect(493, 0, 506, 10); r != want {
			t.Fatalf("seed %d: %v, want the centre fallback %v", seed, r, want)
		}
		r = RandomResizedCrop(rand.New(rand.NewPCG(seed, 1)), 10, 1000, DefaultScale, DefaultRatio)
		if want := image.Rect(0, 493, 10, 506); r != want {
			t.Fatalf("seed %d: %v, want the centre fallback %v", seed, r, want)
		}
	}
	// Within the ratio range, an impossible scale falls back to the whole image.
	r := RandomResizedCrop(rand.New(rand.NewPCG(1, 1)), 100, 90, Range{2, 3}, DefaultRatio)
	if want := image.Rect(0, 0, 100, 90); r != want {
		t.Fatalf("scale [2,3]: %v, want the whole image %v", r, want)
	}
}

func TestCenterCropAndShorterSide(t *testing.T) {
	if w, h := ShorterSide(400, 300, 256); w != 341 || h != 256 {
		t.Errorf("ShorterSide(400x300, 256) = %dx%d, want 341x256", w, h)
	}
	if w, h := ShorterSide(300, 400, 256); w != 256 || h != 341 {
		t.Errorf("ShorterSide(300x400, 256) = %dx%d, want 256x341", w, h)
	}
	// (341-224)/2 = 58.5 rounds to even 58; (257-224)/2 = 16.5 to 16.
	if r := CenterCrop(341, 257, 224, 224); r != image.Rect(58, 16, 282, 240) {
		t.Errorf("CenterCrop(341x257, 224) = %v", r)
	}
}

func encodeJPEG(t testing.TB, w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), uint8(x ^ y), 255})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDecodeJPEGAndPNG(t *testing.T) {
	m, err := Decode(encodeJPEG(t, 40, 30), 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.W != 40 || m.H != 30 || len(m.Pix) != 40*30*3 {
		t.Fatalf("decoded %dx%d with %d bytes", m.W, m.H, len(m.Pix))
	}
	// JPEG is lossy; pixel (20,10) was (20,10,30).
	p := m.Pix[(10*40+20)*3:][:3]
	for i, want := range []int{20, 10, 30} {
		if math.Abs(float64(p[i])-float64(want)) > 12 {
			t.Errorf("pixel (20,10) = %v, want about [20 10 30]", p)
		}
	}

	src := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	src.Set(1, 1, color.NRGBA{10, 20, 30, 40}) // alpha is dropped, not premultiplied
	var b bytes.Buffer
	if err := png.Encode(&b, src); err != nil {
		t.Fatal(err)
	}
	m, err = Decode(b.Bytes(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Pix[(1*3+1)*3:][:3]; !bytes.Equal(got, []byte{10, 20, 30}) {
		t.Errorf("png pixel (1,1) = %v, want [10 20 30]", got)
	}

	gray := image.NewGray(image.Rect(0, 0, 2, 2))
	gray.Pix[3] = 77
	b.Reset()
	if err := png.Encode(&b, gray); err != nil {
		t.Fatal(err)
	}
	if m, err = Decode(b.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	if got := m.Pix[9:12]; !bytes.Equal(got, []byte{77, 77, 77}) {
		t.Errorf("gray pixel (1,1) = %v, want [77 77 77]", got)
	}
}

func TestDecodePixelLimit(t *testing.T) {
	data := encodeJPEG(t, 40, 30)
	_, err := Decode(data, 1000)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("40x30 under a 1000-pixel limit: err %v, want ErrTooLarge", err)
	}
	for _, want := range []string{"40x30", "1200 pixels", "1000-pixel limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := Decode(data, 1200); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	data := encodeJPEG(t, 64, 48)
	cases := map[string][]byte{
		"truncated":    data[:len(data)/3],
		"header only":  data[:2],
		"empty":        nil,
		"not an image": []byte("hello, world"),
		"garbage scan": append(append([]byte{}, data[:len(data)/2]...), bytes.Repeat([]byte{0xff, 0x00, 0x13}, 200)...),
	}
	for name, b := range cases {
		if _, err := Decode(b, 0); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Random byte flips must give an error or an image, never a panic.
	rng := rand.New(rand.NewPCG(7, 7))
	for range 200 {
		b := bytes.Clone(data)
		for range 8 {
			b[2+rng.IntN(len(b)-2)] = uint8(rng.Uint32())
		}
		_, _ = Decode(b, 0)
	}
}

func TestSizeAndDecodeRegion(t *testing.T) {
	data := encodeJPEG(t, 320, 240)
	w, h, err := Size(data)
	if err != nil || w != 320 || h != 240 {
		t.Fatalf("Size = %d,%d,%v", w, h, err)
	}
	if _, _, err := Size([]byte("GIF89a")); err == nil {
		t.Fatal("Size of a GIF: want error")
	}
	var dst RGB
	r := image.Rect(40, 30, 240, 230)
	got, err := DecodeRegion(&dst, data, r, 224, 224, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the decoder, the region keeps its aspect and covers the
	// minimum size or its own size, whichever is smaller.
	if got.Empty() || !got.In(dst.Bounds()) || got.Dx() < min(224, r.Dx()) || got.Dy() < min(224, r.Dy()) {
		t.Fatalf("DecodeRegion rect %v in %dx%d", got, dst.W, dst.H)
	}
	if _, err := DecodeRegion(&dst, data, image.Rect(300, 0, 400, 10), 1, 1, 0); err == nil {
		t.Fatal("region outside the image: want error")
	}
}
