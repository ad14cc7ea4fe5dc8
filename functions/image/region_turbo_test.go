//go:build turbojpeg && cgo

package image

import (
	"bytes"
	"errors"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestTurboDecoderIsCompiledIn(t *testing.T) {
	if Decoder != "libjpeg-turbo" {
		t.Fatalf("Decoder = %q under -tags turbojpeg", Decoder)
	}
}

// decodeAt decodes r at a fixed scale num/8.
func decodeAt(t *testing.T, data []byte, r image.Rectangle, num int) (*RGB, image.Rectangle) {
	t.Helper()
	var dst RGB
	got, err := turboDecode(&dst, data, r, 0, func(w, h int) (int, image.Rectangle) { return num, scaledRegion(r, w, h, num) })
	if err != nil {
		t.Fatalf("%v at %d/8: %v", r, num, err)
	}
	return &dst, got
}

// decodeWhole decodes the whole image at num/8, every scaled pixel.
func decodeWhole(t *testing.T, data []byte, num int) *RGB {
	t.Helper()
	var dst RGB
	w, h, _ := Size(data)
	got, err := turboDecode(&dst, data, image.Rect(0, 0, w, h), 0, func(w, h int) (int, image.Rectangle) {
		return num, image.Rect(0, 0, ceilDiv(w*num, 8), ceilDiv(h*num, 8))
	})
	if err != nil {
		t.Fatalf("whole at %d/8: %v", num, err)
	}
	if got != dst.Bounds() || dst.W != ceilDiv(w*num, 8) || dst.H != ceilDiv(h*num, 8) {
		t.Fatalf("%dx%d whole at %d/8: rect %v in %dx%d", w, h, num, got, dst.W, dst.H)
	}
	return &dst
}

// TestTurboCropMatchesWholeDecode: cropping columns (jpeg_crop_scanline,
// which widens to an iMCU boundary) and skipping rows (jpeg_skip_scanlines)
// must give exactly the pixels a whole decode at the same scale has there,
// edges included (chroma upsampling replicates the edge at a crop
// boundary, so the decoder takes a column more on each side).
func TestTurboCropMatchesWholeDecode(t *testing.T) {
	inputs := append(photos(t, 3), readTestdata(t, "progressive.jpg"), readTestdata(t, "baseline444.jpg"),
		readTestdata(t, "progressive_gray.jpg"), grayJPEG(t, 333, 251))
	rng := rand.New(rand.NewPCG(4, 4))
	for i, data := range inputs {
		w, h, err := Size(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, num := range []int{1, 2, 3, 4, 5, 7, 8} {
			whole := decodeWhole(t, data, num)
			for range 6 {
				x0, y0 := rng.IntN(w), rng.IntN(h)
				r := image.Rect(x0, y0, x0+1+rng.IntN(w-x0), y0+1+rng.IntN(h-y0))
				crop, cr := decodeAt(t, data, r, num)
				sr := scaledRegion(r, w, h, num)
				if cr.Size() != sr.Size() || !cr.In(crop.Bounds()) || crop.H != sr.Dy() {
					t.Fatalf("input %d %v at %d/8: rect %v in %dx%d, want %v's size", i, r, num, cr, crop.W, crop.H, sr)
				}
				for y := range sr.Dy() {
					for x := range sr.Dx() {
						a := whole.Pix[((sr.Min.Y+y)*whole.W+sr.Min.X+x)*3:][:3]
						b := crop.Pix[((cr.Min.Y+y)*crop.W+cr.Min.X+x)*3:][:3]
						for c := range 3 {
							if a[c] != b[c] {
								t.Fatalf("input %d %v at %d/8: pixel (%d,%d) of the region is %v cropped, %v whole", i, r, num, x, y, b, a)
							}
						}
					}
				}
			}
		}
	}
}

// TestTurboNearGoDecoder measures how far the turbojpeg train path (region
// at a reduced DCT scale, resized to 224) is from the pure-Go one (whole
// image at full scale) on ImageNet-like photos and random crops. Measured
// with libjpeg-turbo 2.1.5: mean about 50 dB, worst about 34 dB.
func TestTurboNearGoDecoder(t *testing.T) {
	var sum, worst float64 = 0, math.Inf(1)
	n := 0
	scaled := 0
	for i, data := range photos(t, 16) {
		w, h, _ := Size(data)
		for k := range 6 {
			r := RandomResizedCrop(rand.New(rand.NewPCG(uint64(i), uint64(k)+100)), w, h, DefaultScale, DefaultRatio)
			if scaleFor(r, w, h, 224, 224) < 8 {
				scaled++
			}
			got := regionTo(t, data, r, 224, 224)
			want := goRegionTo(t, data, r, 224, 224)
			p := psnr(want.Pix, got.Pix)
			sum += p
			n++
			worst = min(worst, p)
		}
	}
	t.Logf("turbojpeg vs Go, %d crops (%d at a reduced scale): mean PSNR %.1f dB, worst %.1f dB", n, scaled, sum/float64(n), worst)
	if worst < 30 || sum/float64(n) < 38 {
		t.Errorf("mean PSNR %.1f dB, worst %.1f: want mean >= 38, worst >= 30", sum/float64(n), worst)
	}
	if scaled == 0 {
		t.Error("no crop was decoded at a reduced scale: the test does not exercise DCT scaling")
	}
}

func TestTurboProgressive(t *testing.T) {
	data := readTestdata(t, "progressive.jpg")
	for _, num := range []int{1, 2, 4, 8} {
		decodeWhole(t, data, num)
	}
	full := decodeWhole(t, data, 8)
	want, err := Decode(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Full scale, whole image: only the chroma upsampling differs
	// (libjpeg interpolates, Go replicates).
	if p := psnr(want.Pix, full.Pix); p < 30 {
		t.Errorf("progressive, full scale: PSNR %.1f dB against the Go decoder", p)
	}
}

func TestTurboCorruptFailsTheSample(t *testing.T) {
	data := photos(t, 1)[0]
	w, h, _ := Size(data)
	whole := image.Rect(0, 0, w, h)
	cases := map[string][]byte{
		"truncated":         data[:len(data)/3],
		"truncated at 90%":  data[:len(data)*9/10],
		"header only":       data[:2],
		"no scan":           data[:600],
		"garbage scan":      append(append([]byte{}, data[:len(data)/2]...), bytes.Repeat([]byte{0xff, 0x00, 0x13}, 200)...),
		"progressive, half": readTestdata(t, "progressive.jpg")[:3000],
	}
	for name, b := range cases {
		var dst RGB
		r := whole
		if name == "progressive, half" {
			r = image.Rect(0, 0, 200, 150)
		}
		if _, err := DecodeRegion(&dst, b, r, 224, 224, 0); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.Contains(err.Error(), "jpeg") {
			t.Errorf("%s: error %q does not say jpeg", name, err)
		}
	}
	// Random byte flips: an error or an image, never a crash (libjpeg
	// calling exit, or a longjmp gone wrong, would end the test binary).
	rng := rand.New(rand.NewPCG(7, 7))
	failed := 0
	for range 300 {
		b := bytes.Clone(data)
		for range 8 {
			b[2+rng.IntN(len(b)-2)] = uint8(rng.Uint32())
		}
		var dst RGB
		r := RandomResizedCrop(rng, w, h, DefaultScale, DefaultRatio)
		if _, err := DecodeRegion(&dst, b, r, 224, 224, 0); err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Error("no corrupted JPEG failed: warnings are not turned into errors")
	}
}

func TestTurboPixelLimit(t *testing.T) {
	data := encodeJPEG(t, 40, 30)
	var dst RGB
	_, err := DecodeRegion(&dst, data, image.Rect(0, 0, 40, 30), 10, 10, 1000)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("40x30 under a 1000-pixel limit: err %v, want ErrTooLarge", err)
	}
	for _, want := range []string{"40x30", "1200 pixels", "1000-pixel limit"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if _, err := DecodeRegion(&dst, data, image.Rect(0, 0, 40, 30), 10, 10, 1200); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

func TestTurboFallsBackForPNGAndCMYK(t *testing.T) {
	src := pattern(30, 20)
	img := image.NewRGBA(image.Rect(0, 0, 30, 20))
	for i := range 30 * 20 {
		copy(img.Pix[i*4:], src.Pix[i*3:i*3+3])
		img.Pix[i*4+3] = 255
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	var dst RGB
	got, err := DecodeRegion(&dst, b.Bytes(), image.Rect(5, 5, 25, 15), 1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := &RGB{}
	_ = Crop(want, src, image.Rect(5, 5, 25, 15))
	cropped := &RGB{}
	_ = Crop(cropped, &dst, got)
	if !bytes.Equal(cropped.Pix, want.Pix) {
		t.Error("PNG region differs from the source pixels")
	}
	if _, err := DecodeRegion(&dst, readTestdata(t, "cmyk.jpg"), image.Rect(0, 0, 64, 48), 8, 8, 0); err != nil {
		t.Errorf("CMYK JPEG: %v", err)
	}
}

func TestTurboReusesTheBuffer(t *testing.T) {
	data := photos(t, 1)[0]
	w, h, _ := Size(data)
	dst := &RGB{Pix: make([]uint8, 0, w*h*3)}
	before := &dst.Pix[:1][0]
	for k := range 5 {
		r := RandomResizedCrop(rand.New(rand.NewPCG(uint64(k), 0)), w, h, DefaultScale, DefaultRatio)
		if _, err := DecodeRegion(dst, data, r, 224, 224, 0); err != nil {
			t.Fatal(err)
		}
		if &dst.Pix[0] != before {
			t.Fatal("DecodeRegion allocated although dst had room")
		}
	}
}

// TestTurboOddSampling: libjpeg decodes sampling factors image/jpeg does
// not (3x1 luma here); Size reads the header with libjpeg in this build,
// so such a sample decodes rather than failing at Size.
func TestTurboOddSampling(t *testing.T) {
	data := readTestdata(t, "sampling_3x1.jpg")
	w, h, err := Size(data)
	if err != nil || w != 100 || h != 75 {
		t.Fatalf("Size = %d, %d, %v; want 100, 75", w, h, err)
	}
	var dst RGB
	r := image.Rect(10, 5, 90, 70)
	got, err := DecodeRegion(&dst, data, r, r.Dx(), r.Dy(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size() != r.Size() {
		t.Fatalf("region %v decoded as %v", r, got)
	}
	// The pure-Go decoder names what it does not decode.
	if _, err := Decode(data, 0); err == nil || !strings.Contains(err.Error(), "subsampling ratio") {
		t.Errorf("Decode: error %v, want one naming the subsampling ratio", err)
	}
}
