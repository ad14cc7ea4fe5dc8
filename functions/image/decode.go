package image

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
)

// DefaultMaxPixels bounds a decoded image (64 megapixels, 192 MB as RGB),
// so one hostile header cannot exhaust a replica's memory.
const DefaultMaxPixels = 64_000_000

// ErrTooLarge is wrapped by Decode's error for an image over the pixel limit.
var ErrTooLarge = errors.New("image too large")

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// Decode decodes a JPEG or PNG into a new RGB image; maxPixels <= 0 means
// DefaultMaxPixels.
func Decode(data []byte, maxPixels int) (*RGB, error) {
	m := &RGB{}
	if err := DecodeInto(m, data, maxPixels); err != nil {
		return nil, err
	}
	return m, nil
}

// DecodeInto decodes a JPEG or PNG into dst, reusing its buffer. The header
// is read first and the size checked against maxPixels (<= 0 means
// DefaultMaxPixels) before any pixel memory is allocated. Alpha is dropped
// and grayscale replicated, as PIL's convert("RGB") does. A JPEG is decoded
// by the pure-Go decoder in both builds.
func DecodeInto(dst *RGB, data []byte, maxPixels int) error {
	if isJPEG(data) {
		w, h, err := goJPEGSize(data)
		if err != nil {
			return fmt.Errorf("reading jpeg header: %w", err)
		}
		_, err = decodeRegionGoJPEG(dst, data, image.Rect(0, 0, w, h), w, h, maxPixels)
		return err
	}
	img, err := decodePNG(data, maxPixels)
	if err != nil {
		return err
	}
	toRGB(dst, img, img.Bounds())
	return nil
}

// isJPEG reports whether data starts with a JPEG's SOI marker.
func isJPEG(data []byte) bool {
	return len(data) >= 2 && data[0] == 0xff && data[1] == 0xd8
}

// decodePNG decodes a PNG with the standard library's decoder, after
// checking the header's size against maxPixels; anything else that is not
// a JPEG gets an error naming what it starts with.
func decodePNG(data []byte, maxPixels int) (img image.Image, err error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	if !bytes.HasPrefix(data, pngMagic) {
		head := data[:min(len(data), 8)]
		return nil, fmt.Errorf("unrecognised image format (%d bytes starting % x): want jpeg or png", len(data), head)
	}
	// A decoder panic on hostile bytes must fail the sample, not the
	// replica (which would fail the whole shard on every redelivery).
	defer func() {
		if p := recover(); p != nil {
			img, err = nil, fmt.Errorf("decoding png: decoder panicked: %v", p)
		}
	}()
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading png header: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("png header: size %dx%d: want positive sides", cfg.Width, cfg.Height)
	}
	if px := int64(cfg.Width) * int64(cfg.Height); px > int64(maxPixels) {
		return nil, fmt.Errorf("png is %dx%d = %d pixels, over the %d-pixel limit: %w",
			cfg.Width, cfg.Height, px, maxPixels, ErrTooLarge)
	}
	img, err = png.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decoding png: %w", err)
	}
	return img, nil
}

// toRGB converts the part b of a decoded image (b within img's bounds),
// with fast paths for what the decoders return for ordinary files.
func toRGB(dst *RGB, img image.Image, b image.Rectangle) {
	w, h := b.Dx(), b.Dy()
	dst.Reset(w, h)
	switch m := img.(type) {
	case *image.YCbCr:
		ycbcrToRGB(dst, m, b)
	case *image.Gray:
		for y := 0; y < h; y++ {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):][:w]
			out := dst.Pix[y*w*3 : (y+1)*w*3]
			for x, v := range src {
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.RGBA: // the png decoder uses RGBA only for opaque images
		copy4to3(dst, m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), w, h)
	case *image.NRGBA:
		copy4to3(dst, m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), w, h)
	// 16-bit PNGs: the high byte of each (unpremultiplied) sample, as PIL
	// gives, without convertRGB's 16 bytes of garbage a pixel (an
	// 8000x8000 image took 1.48 GB through it).
	case *image.Gray16:
		for y := 0; y < h; y++ {
			src := m.Pix[m.PixOffset(b.Min.X, b.Min.Y+y):][:2*w]
			out := dst.Pix[y*w*3 : (y+1)*w*3]
			for x := 0; x < w; x++ {
				v := src[2*x]
				out[3*x], out[3*x+1], out[3*x+2] = v, v, v
			}
		}
	case *image.NRGBA64:
		copy8to3(dst, m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), w, h)
	case *image.RGBA64:
		if !m.Opaque() {
			convertRGB(dst, img, b) // premultiplied: divide by alpha
			break
		}
		copy8to3(dst, m.Pix, m.Stride, m.PixOffset(b.Min.X, b.Min.Y), w, h)
	default:
		convertRGB(dst, img, b)
	}
}

// convertRGB converts pixel by pixel through color.NRGBAModel: any image,
// slowly.
func convertRGB(dst *RGB, img image.Image, b image.Rectangle) {
	i := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			dst.Pix[i], dst.Pix[i+1], dst.Pix[i+2] = c.R, c.G, c.B
			i += 3
		}
	}
}

// copy8to3 takes the high bytes of R, G and B of 16-bit RGBA rows.
func copy8to3(dst *RGB, pix []uint8, stride, off, w, h int) {
	for y := 0; y < h; y++ {
		src := pix[off+y*stride:][:w*8]
		out := dst.Pix[y*w*3 : (y+1)*w*3]
		for x := 0; x < w; x++ {
			out[3*x], out[3*x+1], out[3*x+2] = src[8*x], src[8*x+2], src[8*x+4]
		}
	}
}

func copy4to3(dst *RGB, pix []uint8, stride, off, w, h int) {
	for y := 0; y < h; y++ {
		src := pix[off+y*stride:][:w*4]
		out := dst.Pix[y*w*3 : (y+1)*w*3]
		for x := 0; x < w; x++ {
			out[3*x], out[3*x+1], out[3*x+2] = src[4*x], src[4*x+1], src[4*x+2]
		}
	}
}

// ycbcrToRGB converts the part b of m. The arithmetic is
// color.YCbCrToRGB's, inlined, with each chroma sample's terms computed
// once for the pixels that share it (through color.YCbCrToRGB, the
// conversion took a fifth of the pure-Go pipeline's time).
func ycbcrToRGB(dst *RGB, m *image.YCbCr, b image.Rectangle) {
	w, h := b.Dx(), b.Dy()
	// Chroma columns are subsampled by 2^hs; COffset handles the rows.
	hs := 0
	switch m.SubsampleRatio {
	case image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420:
		hs = 1
	case image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410:
		hs = 2
	}
	for y := 0; y < h; y++ {
		yrow := m.Y[m.YOffset(b.Min.X, b.Min.Y+y):][:w]
		c0 := m.COffset(b.Min.X, b.Min.Y+y)
		cw := ((b.Min.X+w-1)>>hs - b.Min.X>>hs) + 1
		cb := m.Cb[c0:][:cw]
		cr := m.Cr[c0:][:cw]
		out := dst.Pix[y*w*3 : (y+1)*w*3]
		x := 0
		// The first chroma sample may cover fewer than 2^hs pixels of b.
		for ci := range cw {
			cb1, cr1 := int32(cb[ci])-128, int32(cr[ci])-128
			rc, gc, bc := 91881*cr1, -22554*cb1-46802*cr1, 116130*cb1
			end := min(((b.Min.X>>hs)+ci+1)<<hs-b.Min.X, w)
			for ; x < end; x++ {
				yy := int32(yrow[x]) * 0x10101
				o := out[3*x : 3*x+3]
				o[0], o[1], o[2] = clampYCC(yy+rc), clampYCC(yy+gc), clampYCC(yy+bc)
			}
		}
	}
}

// clampYCC turns a 16.16 fixed-point channel value into a byte, clamping
// as color.YCbCrToRGB does.
func clampYCC(v int32) uint8 {
	if uint32(v)&0xff000000 == 0 {
		return uint8(v >> 16)
	}
	return uint8(^(v >> 31))
}
