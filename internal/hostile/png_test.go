package hostile

import (
	"bytes"
	"image"
	"image/png"
	"testing"
)

func TestPNG16DecodesAs16Bit(t *testing.T) {
	data := PNG16(300, 200)
	m, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rgba, ok := m.(*image.RGBA64)
	if !ok || m.Bounds().Dx() != 300 || m.Bounds().Dy() != 200 {
		t.Fatalf("decoded %T %v, want a 300x200 *image.RGBA64", m, m.Bounds())
	}
	if c := rgba.RGBA64At(17, 42); c.R != 0x8000 || c.A != 0xffff {
		t.Fatalf("pixel %+v, want mid grey", c)
	}
}
