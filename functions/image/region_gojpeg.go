package image

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"sync"

	"github.com/sluice-project/sluice/functions/image/internal/jpeg"
)

// The pure-Go region decoder: internal/jpeg (the standard library's
// decoder, forked to reconstruct only the blocks a region covers, stop
// after its last row and decode at 1/2, 1/4 or 1/8 scale), then only the
// region converted to RGB.

// jpegDecoders pools the forked decoder, which keeps its pixel memory
// between images.
var jpegDecoders = sync.Pool{New: func() any { return new(jpeg.Decoder) }}

// maxPooledDecoderBytes caps the memory a pooled decoder may keep: after a
// huge image its buffers go to the garbage collector, not back to the pool.
const maxPooledDecoderBytes = 32 << 20

func decodeRegionGoJPEG(dst *RGB, data []byte, r image.Rectangle, minW, minH, maxPixels int) (_ image.Rectangle, err error) {
	if maxPixels <= 0 {
		maxPixels = DefaultMaxPixels
	}
	dec := jpegDecoders.Get().(*jpeg.Decoder)
	defer func() {
		if dec.Footprint() <= maxPooledDecoderBytes {
			jpegDecoders.Put(dec)
		}
	}()
	// A decoder panic on hostile bytes must fail the sample, not the
	// replica (which would fail the whole shard on every redelivery).
	defer func() {
		if p := recover(); p != nil {
			dec = new(jpeg.Decoder) // its state is suspect: pool a fresh one
			err = fmt.Errorf("decoding jpeg: decoder panicked: %v", p)
		}
	}()
	w, h, comps, err := dec.Config(data)
	if err != nil {
		return image.Rectangle{}, fmt.Errorf("reading jpeg header: %w", err)
	}
	if w <= 0 || h <= 0 {
		return image.Rectangle{}, fmt.Errorf("jpeg header: size %dx%d: want positive sides", w, h)
	}
	if px := int64(w) * int64(h); px > int64(maxPixels) {
		return image.Rectangle{}, fmt.Errorf("jpeg is %dx%d = %d pixels, over the %d-pixel limit: %w",
			w, h, px, maxPixels, ErrTooLarge)
	}
	if r.Empty() || !r.In(image.Rect(0, 0, w, h)) {
		return image.Rectangle{}, fmt.Errorf("region %v is not inside the %dx%d image", r, w, h)
	}
	if err := checkEOI(data); err != nil {
		return image.Rectangle{}, err
	}
	num := scaleFor(r, w, h, minW, minH)
	if comps == 4 {
		num = 8 // CMYK and YCbCrK are decoded at full scale
	}
	img, err := dec.Decode(data, r, num)
	if err != nil {
		return image.Rectangle{}, fmt.Errorf("decoding jpeg: %w", err)
	}
	sr := scaledRegion(r, w, h, num)
	if b := img.Bounds(); !sr.In(b) {
		return image.Rectangle{}, fmt.Errorf("decoding jpeg: %v decoded at %d/8 is %v, not covering %v", r, num, b, sr)
	}
	toRGB(dst, img, sr)
	return image.Rect(0, 0, sr.Dx(), sr.Dy()), nil
}

// goJPEGSize reads a JPEG's header with the forked decoder.
func goJPEGSize(data []byte) (w, h int, err error) {
	dec := jpegDecoders.Get().(*jpeg.Decoder)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panicked: %v", p)
			return // its state is suspect: not pooled
		}
		jpegDecoders.Put(dec)
	}()
	w, h, _, err = dec.Config(data)
	return w, h, err
}

// checkEOI fails a JPEG that does not end its last scan with an EOI marker.
// A region decoder stops reading after the region's rows, so it would not
// notice that a file was cut short further on; this does. Markers cannot
// occur inside entropy-coded data, so in a whole file an EOI follows the
// last SOS (what follows the EOI, if anything, is ignored as libjpeg and
// Go's decoder ignore it). The search starts from the end, so it costs
// little for a whole file.
func checkEOI(data []byte) error {
	eoi := bytes.LastIndex(data, []byte{0xff, 0xd9})
	if eoi < 0 || bytes.Contains(data[eoi:], []byte{0xff, 0xda}) {
		return errors.New("decoding jpeg: no end-of-image marker after the last scan: truncated")
	}
	return nil
}
