package image

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// DecodeCost is how many bytes decoding all of data (a JPEG or PNG) and
// converting it to RGB may hold at once, read from its header alone: the
// decoder's image, a progressive JPEG's coefficients, and the RGB output.
// It is an upper bound for the decoders of both builds (a region or a
// reduced scale needs less); a 16-bit PNG counts at the 8 bytes a pixel
// Go's decoder gives it, not at the 3 of its RGB.
func DecodeCost(data []byte) (int64, error) {
	w, h, err := Size(data)
	if err != nil {
		return 0, err
	}
	px := int64(w) * int64(h)
	var perPixel int64
	if bytes.HasPrefix(data, pngMagic) {
		perPixel, err = pngBytesPerPixel(data)
		if err != nil {
			return 0, err
		}
	} else {
		perPixel = jpegBytesPerPixel(data)
	}
	return px * (perPixel + 3), nil
}

// pngBytesPerPixel is the size of a pixel of the image Go's png decoder
// returns for data's IHDR, twice that when interlaced (each pass is
// decoded into an image of its own, then copied into the whole).
func pngBytesPerPixel(data []byte) (int64, error) {
	// Signature, then IHDR: length, type, width, height, depth, colour
	// type, compression, filter, interlace.
	if len(data) < 8+8+13 || string(data[12:16]) != "IHDR" {
		return 0, fmt.Errorf("png: no IHDR chunk first")
	}
	ihdr := data[16:29]
	depth, colour, interlace := ihdr[8], ihdr[9], ihdr[12]
	var n int64
	switch colour {
	case 0, 3: // gray (Gray or Gray16), palette (Paletted)
		n = 1
	case 2, 4, 6: // RGB (RGBA or RGBA64), gray+alpha and RGBA (NRGBA or NRGBA64)
		n = 4
	default:
		return 0, fmt.Errorf("png: colour type %d", colour)
	}
	if depth == 16 {
		n *= 2
	}
	if interlace != 0 {
		n *= 2
	}
	return n, nil
}

// jpegBytesPerPixel bounds what the Go decoder holds per pixel of a JPEG:
// a byte per component for its planes and, when progressive, the
// coefficients (int32s, 4 bytes per component; the buffer they are
// carved from may grow to 3 planes' worth). A frame header it cannot find
// counts as the worst case, 4 components, progressive.
func jpegBytesPerPixel(data []byte) int64 {
	comps, progressive, ok := jpegFrame(data)
	if !ok {
		comps, progressive = 4, true
	}
	n := int64(comps)
	if progressive {
		planes := int64(1)
		if comps > 1 {
			planes = 3
		}
		n += 4 * planes
	}
	return n
}

// jpegFrame reads the component count of a JPEG's frame header (SOFn)
// and whether it is progressive, walking the marker segments before it.
func jpegFrame(data []byte) (comps int, progressive bool, ok bool) {
	for i := 2; i+4 <= len(data); {
		if data[i] != 0xff {
			i++ // junk between segments, which libjpeg skips too
			continue
		}
		m := data[i+1]
		switch {
		case m == 0xff: // fill byte
			i++
			continue
		case m == 0x00 || m == 0x01 || (m >= 0xd0 && m <= 0xd8): // no length
			i += 2
			continue
		case m == 0xd9 || m == 0xda: // end of image or start of scan: no frame header before
			return 0, false, false
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc {
			// SOFn: length, precision, height, width, component count.
			if i+10 > len(data) {
				return 0, false, false
			}
			comps = int(data[i+9])
			if comps < 1 || comps > 4 {
				return 0, false, false
			}
			return comps, m&3 == 2, true // SOF2, 6, 10, 14 are progressive
		}
		i += 2 + n
	}
	return 0, false, false
}
