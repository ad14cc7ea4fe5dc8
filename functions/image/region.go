package image

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
)

// Size reads only the header of a JPEG or PNG and returns its dimensions.
// Pipelines call it first so that a crop can be chosen before any pixel is
// decoded, which lets DecodeRegion skip what the crop throws away.
func Size(data []byte) (w, h int, err error) {
	switch {
	case isJPEG(data):
		// The header parser of the decoder compiled in, so that Size takes
		// every JPEG DecodeRegion does.
		w, h, err = jpegSize(data)
	case bytes.HasPrefix(data, pngMagic):
		var cfg image.Config
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
		w, h = cfg.Width, cfg.Height
	default:
		head := data[:min(len(data), 8)]
		return 0, 0, fmt.Errorf("unrecognised image format (%d bytes starting % x): want jpeg or png", len(data), head)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading image header: %w", err)
	}
	if w <= 0 || h <= 0 {
		return 0, 0, fmt.Errorf("image header: size %dx%d: want positive sides", w, h)
	}
	return w, h, nil
}

// DecodeRegion decodes at least the part of the image that r (in the full
// image's pixel coordinates) covers, possibly at a reduced scale that still
// leaves the region at least minW x minH pixels, into dst. It returns where
// r lies in dst's pixels; the caller then resizes that rectangle.
//
// Both builds decode only what the region needs: a JPEG's rows down to the
// region's last, its blocks (or columns) that cover the region, at the
// smallest DCT scale (1/8, 1/4, 1/2 or 1) that still leaves the region
// minW×minH, or its own size where that is smaller. The default build does
// it in pure Go (a fork of the standard library's decoder); the
// `turbojpeg` build through libjpeg-turbo. The two give the same shapes and
// nearly the same pixels (Go's decoder replicates subsampled chroma where
// libjpeg interpolates it). A JPEG cut short anywhere fails, even below the
// region. PNGs are decoded whole.
func DecodeRegion(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (image.Rectangle, error) {
	return decodeRegion(dst, data, r, minW, minH, maxPixels)
}

// decodeRegionStd is the pure-Go path (and the turbojpeg build's path for
// PNG and for JPEGs libjpeg cannot convert to RGB). A JPEG goes to the
// forked decoder (region_gojpeg.go), which decodes only what the region
// needs, at the smallest of the scales 1/8, 1/4, 1/2 and 1 that keeps it
// at least minW×minH; a PNG is decoded whole. Either way only the region
// is converted to RGB, so dst holds just the region.
func decodeRegionStd(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (image.Rectangle, error) {
	if isJPEG(data) {
		return decodeRegionGoJPEG(dst, data, r, minW, minH, maxPixels)
	}
	img, err := decodePNG(data, maxPixels)
	if err != nil {
		return image.Rectangle{}, err
	}
	b := img.Bounds()
	if r.Empty() || !r.In(image.Rect(0, 0, b.Dx(), b.Dy())) {
		return image.Rectangle{}, fmt.Errorf("region %v is not inside the %dx%d image", r, b.Dx(), b.Dy())
	}
	toRGB(dst, img, r.Add(b.Min))
	return image.Rect(0, 0, r.Dx(), r.Dy()), nil
}
