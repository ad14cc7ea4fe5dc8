package image

import (
	"fmt"
	"image"
)

// RGB is an 8-bit RGB image, rows top to bottom, pixels interleaved R, G,
// B: Pix[(y*W+x)*3+c]. It is the HWC uint8 layout of the output tensors.
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB allocates a black w×h image.
func NewRGB(w, h int) *RGB {
	return &RGB{W: w, H: h, Pix: make([]uint8, w*h*3)}
}

// Reset makes m a w×h image, reusing its buffer when it is large enough.
// The pixels are left as they were (callers overwrite them all).
func (m *RGB) Reset(w, h int) {
	n := w * h * 3
	if cap(m.Pix) < n {
		m.Pix = make([]uint8, n)
	}
	m.W, m.H, m.Pix = w, h, m.Pix[:n]
}

// Bounds is the image's rectangle, (0,0)-(W,H).
func (m *RGB) Bounds() image.Rectangle { return image.Rect(0, 0, m.W, m.H) }

// Crop copies the rectangle r of src into dst (reset to r's size).
func Crop(dst, src *RGB, r image.Rectangle) error {
	if r.Empty() || !r.In(src.Bounds()) {
		return fmt.Errorf("crop %v: not a non-empty part of the %dx%d image", r, src.W, src.H)
	}
	dst.Reset(r.Dx(), r.Dy())
	n := r.Dx() * 3
	for y := 0; y < r.Dy(); y++ {
		s := ((r.Min.Y+y)*src.W + r.Min.X) * 3
		copy(dst.Pix[y*n:(y+1)*n], src.Pix[s:s+n])
	}
	return nil
}

// FlipHorizontal mirrors m left to right, in place.
func FlipHorizontal(m *RGB) {
	row := m.W * 3
	for y := 0; y < m.H; y++ {
		p := m.Pix[y*row : (y+1)*row]
		for i, j := 0, row-3; i < j; i, j = i+3, j-3 {
			a, b := p[i:i+3:i+3], p[j:j+3:j+3]
			a[0], a[1], a[2], b[0], b[1], b[2] = b[0], b[1], b[2], a[0], a[1], a[2]
		}
	}
}
