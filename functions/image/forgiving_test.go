package image

import (
	"bytes"
	"encoding/binary"
	"image"
	"strings"
	"testing"
)

// These tests run in both builds. The defects are those of real files in
// public image libraries' own test suites (Pillow's Tests/images,
// libjpeg-turbo's testimages): libjpeg-turbo's files are kept in
// testdata; Pillow's are reproduced here by the same byte surgery on a
// small file of ours. Every case that must decode, Debian's Pillow 9.4
// loads and its djpeg (libjpeg-turbo 2.1.5) decodes to the reference's
// exact pixels, with at most a warning; the cases that must fail, neither
// decodes, but for the last, which PIL loads with made-up blocks.

// jpegCase is a JPEG and what decoding it must give: exactly the pixels of
// ref, a file without the defect (the same coefficients where the coding
// differs), or, when ref is nil, an error naming reason.
type jpegCase struct {
	name   string
	data   []byte
	ref    []byte
	reason string
}

func forgivingCases(t *testing.T) []jpegCase {
	t.Helper()
	base := readTestdata(t, "baseline444.jpg") // JFIF, 4:4:4, Huffman
	progressive := readTestdata(t, "progressive.jpg")
	restart := readTestdata(t, "progressive_restart.jpg")

	// The real files' defects, copied onto base after its JFIF APP0.
	adobe := segment(0xee, []byte("Adobe\x00\x64\x40\x00\x00\x00\x01"))
	photoshop := segment(0xed, []byte("Photoshop 3.0\x008BIM\x03\xed\x00\x00\x00\x00\x00\x10"))
	exif := segment(0xe1, append([]byte("Exif\x00\x00MM\x00\x2a\xff\xff\xff\x00\xff\xff"), bytes.Repeat([]byte{0xff, 0x13}, 40)...))

	// Huffman tables left out, as in Motion-JPEG frames: libjpeg-turbo
	// then uses the standard tables of section K.3, which Go's encoder
	// writes.
	mjpeg := encodeJPEG(t, 96, 64)
	var noDHT []byte
	for _, s := range segments(t, mjpeg) {
		if s.marker != 0xc4 {
			noDHT = append(noDHT, s.bytes...)
		}
	}

	return []jpegCase{
		// Pillow junk_jpeg_header.jpg: "hello" between a COM and a DQT.
		{name: "junk bytes between segments", data: insertAfter(t, base, 0xe0, append(segment(0xfe, []byte("CREATOR: sluice")), "hello"...)), ref: base},
		// Pillow jpeg_ff00_header.jpg: FF 00 00 02 after the APP14.
		{name: "FF00 in the header", data: insertAfter(t, base, 0xe0, append(bytes.Clone(adobe), 0xff, 0x00, 0x00, 0x02)), ref: base},
		// Pillow truncated_app14.jpg: the Adobe segment's length one short,
		// its last byte (the transform) left between segments.
		{name: "truncated APP14", data: insertAfter(t, base, 0xe0, append(segment(0xee, []byte("Adobe\x00\x64\x40\x00\x00\x00")), 0x01)), ref: base},
		// Pillow photoshop-200dpi-broken.jpg: the APP13 ends 16 bytes early,
		// inside a resource, whose data is left between segments.
		{name: "broken Photoshop APP13", data: insertAfter(t, base, 0xe0, append(bytes.Clone(photoshop), 0x00, 0xc8, 0, 0, 0, 1, 0, 1, 0, 0xc8, 0, 0, 0, 1, 0, 1)), ref: base},
		{name: "malformed EXIF APP1", data: insertAfter(t, base, 0xe0, exif), ref: base},
		{name: "junk before a restart marker", data: insertBefore(t, restart, []byte{0xff, 0xd0}, []byte{0x42}), ref: progressive},
		{name: "progressive, restart interval", data: restart, ref: progressive},
		{name: "no Huffman tables (Motion-JPEG)", data: noDHT, ref: mjpeg},
		// libjpeg-turbo testimgari.jpg, testimgint.jpg.
		{name: "arithmetic, libjpeg-turbo testimgari", data: readTestdata(t, "testimgari.jpg"), ref: readTestdata(t, "testimgint.jpg")},
		{name: "arithmetic, 4:4:4, restart interval", data: readTestdata(t, "arith_444.jpg"), ref: base},
		{name: "arithmetic, progressive, conditioning, restart interval", data: readTestdata(t, "arith_progressive.jpg"), ref: progressive},
		{name: "arithmetic, grayscale, conditioning, restart interval", data: readTestdata(t, "arith_gray.jpg"), ref: readTestdata(t, "progressive_gray.jpg")},
		{name: "arithmetic, CMYK", data: readTestdata(t, "arith_cmyk.jpg"), ref: readTestdata(t, "cmyk.jpg")},

		// Neither PIL nor libjpeg-turbo decodes these.
		{name: "junk before SOI", data: append([]byte{0}, base...), reason: "unrecognised image format"},
		// libjpeg-turbo monkey12.jpg.
		{name: "12-bit precision", data: patchSOF(t, base, 0xc0, 12), reason: "precision"},
		{name: "lossless", data: patchSOF(t, base, 0xc3, 8), reason: "SOF type 0xc3"},
		// Pillow truncated_jpeg.jpg.
		{name: "truncated", data: base[:len(base)-200], reason: "truncated"},
		// Scan data that does not fit its restart markers: libjpeg-turbo
		// warns, resynchronises and makes up the blocks between, which PIL
		// takes; both builds fail the sample instead.
		{name: "restart markers out of order", data: replaceAfterSOS(t, restart, []byte{0xff, 0xd1}, []byte{0xff, 0xd3}), reason: "RST"},
	}
}

// TestDecodeAsForgivingAsLibjpeg: what libjpeg-turbo (and so PIL) decodes,
// both builds decode, to exactly the pixels of the same file without the
// defect, whole, through Decode, and in a region at a reduced scale; what
// neither decodes fails with an error that names why.
func TestDecodeAsForgivingAsLibjpeg(t *testing.T) {
	for _, c := range forgivingCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeWholeJPEG(c.data)
			if c.ref == nil {
				if err == nil {
					t.Fatalf("decoded; want an error naming %q", c.reason)
				}
				if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.reason)) {
					t.Fatalf("error %q does not name %q", err, c.reason)
				}
				if _, err := Decode(c.data, 0); err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.reason)) {
					t.Fatalf("Decode: error %v, want one naming %q", err, c.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := decodeWholeJPEG(c.ref)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			if got.W != want.W || got.H != want.H || !bytes.Equal(got.Pix, want.Pix) {
				t.Fatalf("%dx%d decoded differs from the reference's %dx%d", got.W, got.H, want.W, want.H)
			}

			gotD, err := Decode(c.data, 0)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			wantD, err := Decode(c.ref, 0)
			if err != nil {
				t.Fatalf("Decode reference: %v", err)
			}
			if !bytes.Equal(gotD.Pix, wantD.Pix) {
				t.Fatal("Decode differs from the reference's")
			}

			w, h := got.W, got.H
			r := image.Rect(w/5, h/4, w-w/6, h-h/5)
			var gr, wr RGB
			gotR, err := DecodeRegion(&gr, c.data, r, r.Dx()/4, r.Dy()/4, 0)
			if err != nil {
				t.Fatalf("region %v: %v", r, err)
			}
			wantR, err := DecodeRegion(&wr, c.ref, r, r.Dx()/4, r.Dy()/4, 0)
			if err != nil {
				t.Fatalf("reference region %v: %v", r, err)
			}
			var a, b RGB
			if err := Crop(&a, &gr, gotR); err != nil {
				t.Fatal(err)
			}
			if err := Crop(&b, &wr, wantR); err != nil {
				t.Fatal(err)
			}
			if a.W != b.W || a.H != b.H || !bytes.Equal(a.Pix, b.Pix) {
				t.Fatalf("region %v: %dx%d differs from the reference's %dx%d", r, a.W, a.H, b.W, b.H)
			}
		})
	}
}

// decodeWholeJPEG decodes as a pipeline does: Size, then the whole image
// through DecodeRegion at full scale.
func decodeWholeJPEG(data []byte) (*RGB, error) {
	w, h, err := Size(data)
	if err != nil {
		return nil, err
	}
	var dst RGB
	r, err := DecodeRegion(&dst, data, image.Rect(0, 0, w, h), w, h, 0)
	if err != nil {
		return nil, err
	}
	out := &RGB{}
	if err := Crop(out, &dst, r); err != nil {
		return nil, err
	}
	return out, nil
}

// segment is a marker segment: FF marker, length, payload.
func segment(marker byte, payload []byte) []byte {
	s := []byte{0xff, marker, 0, 0}
	binary.BigEndian.PutUint16(s[2:], uint16(2+len(payload)))
	return append(s, payload...)
}

type jpegSegment struct {
	marker byte
	bytes  []byte // the whole segment; for SOS, up to the end of the file
}

// segments splits a well-formed JPEG: SOI, the header's segments, then
// the first SOS with everything after it.
func segments(t *testing.T, data []byte) []jpegSegment {
	t.Helper()
	out := []jpegSegment{{0xd8, data[:2]}}
	for i := 2; i < len(data); {
		if data[i] != 0xff || i+4 > len(data) {
			t.Fatalf("no marker at byte %d", i)
		}
		m := data[i+1]
		if m == 0xda {
			return append(out, jpegSegment{m, data[i:]})
		}
		n := 2 + int(binary.BigEndian.Uint16(data[i+2:]))
		out = append(out, jpegSegment{m, data[i : i+n]})
		i += n
	}
	t.Fatal("no SOS")
	return nil
}

// insertAfter puts extra right after the first segment with marker.
func insertAfter(t *testing.T, data []byte, marker byte, extra []byte) []byte {
	t.Helper()
	var out []byte
	done := false
	for _, s := range segments(t, data) {
		out = append(out, s.bytes...)
		if s.marker == marker && !done {
			out, done = append(out, extra...), true
		}
	}
	if !done {
		t.Fatalf("no segment FF%02X", marker)
	}
	return out
}

// insertBefore puts extra before the first occurrence of at after the
// first SOS.
func insertBefore(t *testing.T, data, at, extra []byte) []byte {
	t.Helper()
	sos := bytes.Index(data, []byte{0xff, 0xda})
	i := -1
	if sos >= 0 {
		i = bytes.Index(data[sos:], at)
	}
	if i < 0 {
		t.Fatalf("no % x after an SOS", at)
	}
	i += sos
	return append(append(append([]byte{}, data[:i]...), extra...), data[i:]...)
}

// replaceAfterSOS replaces the first occurrence of old after the first SOS.
func replaceAfterSOS(t *testing.T, data, old, new []byte) []byte {
	t.Helper()
	sos := bytes.Index(data, []byte{0xff, 0xda})
	i := -1
	if sos >= 0 {
		i = bytes.Index(data[sos:], old)
	}
	if i < 0 {
		t.Fatalf("no % x after an SOS", old)
	}
	i += sos
	return append(append(append([]byte{}, data[:i]...), new...), data[i+len(old):]...)
}

// patchSOF changes the SOF marker and its sample precision.
func patchSOF(t *testing.T, data []byte, marker, precision byte) []byte {
	t.Helper()
	var out []byte
	for _, s := range segments(t, data) {
		b := bytes.Clone(s.bytes)
		if s.marker == 0xc0 {
			b[1], b[4] = marker, precision
		}
		out = append(out, b...)
	}
	return out
}
