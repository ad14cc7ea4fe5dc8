package image

import (
	"image"
	"image/color"
	"math/rand/v2"
	"testing"
)

// TestSixteenBitToRGBAsTheColorModel: the fast paths for 16-bit images
// give what the per-pixel conversion through color.NRGBAModel gives, on a
// part of the image too; translucent NRGBA64 keeps its unpremultiplied
// high bytes (as the 8-bit NRGBA path and PIL do), which the color model's
// round trip through premultiplied values can miss by one.
func TestSixteenBitToRGBAsTheColorModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rect := image.Rect(0, 0, 13, 7)
	gray := image.NewGray16(rect)
	nrgba := image.NewNRGBA64(rect)
	opaque := image.NewRGBA64(rect)
	translucent := image.NewRGBA64(rect)
	for y := range rect.Dy() {
		for x := range rect.Dx() {
			v := func() uint16 { return uint16(r.Uint32()) }
			gray.SetGray16(x, y, color.Gray16{Y: v()})
			nrgba.SetNRGBA64(x, y, color.NRGBA64{R: v(), G: v(), B: v(), A: v()})
			opaque.SetRGBA64(x, y, color.RGBA64{R: v(), G: v(), B: v(), A: 0xffff})
			a := v()
			translucent.SetRGBA64(x, y, color.RGBA64{R: v() % (a + 1), G: v() % (a + 1), B: v() % (a + 1), A: a})
		}
	}
	for name, img := range map[string]image.Image{"Gray16": gray, "NRGBA64": nrgba, "opaque RGBA64": opaque, "translucent RGBA64": translucent} {
		for _, b := range []image.Rectangle{rect, image.Rect(2, 1, 11, 6)} {
			var got, want RGB
			toRGB(&got, img, b)
			want.Reset(b.Dx(), b.Dy())
			convertRGB(&want, img, b)
			if name == "NRGBA64" {
				for i, y := 0, b.Min.Y; y < b.Max.Y; y++ {
					for x := b.Min.X; x < b.Max.X; x++ {
						c := nrgba.NRGBA64At(x, y)
						want.Pix[i], want.Pix[i+1], want.Pix[i+2] = uint8(c.R>>8), uint8(c.G>>8), uint8(c.B>>8)
						i += 3
					}
				}
			}
			if string(got.Pix) != string(want.Pix) {
				t.Errorf("%s, %v: fast path differs from the color model", name, b)
			}
		}
	}
}
