//go:build !turbojpeg || !cgo

package image

import (
	"fmt"
	"image"
)

// Decoder names the JPEG decoder compiled in.
const Decoder = "go"

func decodeRegion(dst *RGB, data []byte, r image.Rectangle, _, _, maxPixels int) (image.Rectangle, error) {
	if err := DecodeInto(dst, data, maxPixels); err != nil {
		return image.Rectangle{}, err
	}
	if r.Empty() || !r.In(dst.Bounds()) {
		return image.Rectangle{}, fmt.Errorf("region %v is not inside the %dx%d image", r, dst.W, dst.H)
	}
	return r, nil
}
