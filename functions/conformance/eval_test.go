package conformance

import (
	"bytes"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/wds"
	sluiceimage "github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/functions/pipeline"
)

// minPSNR is the bar for imagenet-eval against torchvision.
const minPSNR = 30.0

// TestImageNetEvalMatchesTorchvision runs imagenet-eval on each JPEG in
// testdata and compares its uint8 HWC image with torchvision's output
// (NAME.golden.png). Measured (see the log): the turbojpeg build decodes
// exactly as PIL does and its resize is Pillow's, so it matches bit for
// bit; the pure-Go build differs where Go's decoder does (chroma
// upsampling, IDCT rounding).
func TestImageNetEvalMatchesTorchvision(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.jpg")
	if err != nil || len(inputs) < 5 {
		t.Fatalf("testdata holds %d JPEGs (%v): run bench/make_goldens.py", len(inputs), err)
	}
	p, err := pipeline.Lookup("imagenet-eval", pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".jpg")
		data, err := os.ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		want := golden(t, strings.TrimSuffix(in, ".jpg")+".golden.png")
		out, err := p.Process(wds.Sample{Key: name, Files: map[string][]byte{"jpg": data, "cls": []byte("0")}}, pipeline.SampleSeed(1, 0, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img := out.Fields[0]
		if img.Name != "image" || len(img.Shape) != 3 || img.Shape[0] != 224 || img.Shape[1] != 224 || img.Shape[2] != 3 {
			t.Fatalf("%s: first field %s %v, want image [224 224 3]", name, img.Name, img.Shape)
		}
		p := psnr(want, img.Data)
		t.Logf("%-12s decoder %-13s PSNR %6.2f dB", name, sluiceimage.Decoder, p)
		if p < minPSNR {
			t.Errorf("%s: PSNR %.2f dB against torchvision, want >= %.0f", name, p, minPSNR)
		}
	}
}

// TestPSNRCanFail: the comparison notices a wrong crop (the image shifted
// by a few pixels) and wrong colours.
func TestPSNRCanFail(t *testing.T) {
	want := golden(t, "testdata/photo_420.golden.png")
	shifted := make([]byte, len(want))
	copy(shifted, want[4*224*3:])
	if p := psnr(want, shifted); p >= minPSNR {
		t.Errorf("a 4-row shift scores %.1f dB", p)
	}
	swapped := bytes.Clone(want)
	for i := 0; i < len(swapped); i += 3 {
		swapped[i], swapped[i+2] = swapped[i+2], swapped[i]
	}
	if p := psnr(want, swapped); p >= minPSNR {
		t.Errorf("swapping red and blue scores %.1f dB", p)
	}
}

// golden reads a 224x224 PNG as HWC RGB bytes.
func golden(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if m.Bounds() != image.Rect(0, 0, 224, 224) {
		t.Fatalf("%s: %v, want 224x224", path, m.Bounds())
	}
	rgba := image.NewRGBA(m.Bounds())
	draw.Draw(rgba, rgba.Bounds(), m, image.Point{}, draw.Src)
	out := make([]byte, 0, 224*224*3)
	for i := 0; i < len(rgba.Pix); i += 4 {
		out = append(out, rgba.Pix[i], rgba.Pix[i+1], rgba.Pix[i+2])
	}
	return out
}

func psnr(a, b []byte) float64 {
	if len(a) != len(b) {
		return math.Inf(-1)
	}
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255*float64(len(a))/se)
}
