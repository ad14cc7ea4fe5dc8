package image

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
)

// Size reads only the header of a JPEG or PNG and returns its dimensions.
// Pipelines call it first so that a crop can be chosen before any pixel is
// decoded, which lets DecodeRegion skip what the crop throws away.
func Size(data []byte) (w, h int, err error) {
	var cfg image.Config
	switch {
	case len(data) >= 2 && data[0] == 0xff && data[1] == 0xd8:
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
	case bytes.HasPrefix(data, pngMagic):
		cfg, err = png.DecodeConfig(bytes.NewReader(data))
	default:
		head := data[:min(len(data), 8)]
		return 0, 0, fmt.Errorf("unrecognised image format (%d bytes starting % x): want jpeg or png", len(data), head)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading image header: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return 0, 0, fmt.Errorf("image header: size %dx%d: want positive sides", cfg.Width, cfg.Height)
	}
	return cfg.Width, cfg.Height, nil
}

// DecodeRegion decodes at least the part of the image that r (in the full
// image's pixel coordinates) covers, possibly at a reduced scale that still
// leaves the region at least minW x minH pixels, into dst. It returns where
// r lies in dst's pixels; the caller then resizes that rectangle.
//
// Which decoder runs is a build choice: the default, pure-Go build decodes
// the whole image at full scale (so the returned rectangle is r); the
// `turbojpeg` build decodes JPEGs through libjpeg-turbo, only the rows and
// columns the region needs, at the smallest DCT scale that still covers
// minW x minH. The two give the same shapes and nearly the same pixels.
func DecodeRegion(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (image.Rectangle, error) {
	return decodeRegion(dst, data, r, minW, minH, maxPixels)
}
