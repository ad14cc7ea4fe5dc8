//go:build !turbojpeg || !cgo

package image

import "image"

// Decoder names the JPEG decoder compiled in.
const Decoder = "go"

func decodeRegion(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (image.Rectangle, error) {
	return decodeRegionStd(dst, data, r, minW, minH, maxPixels)
}

func jpegSize(data []byte) (w, h int, err error) { return goJPEGSize(data) }
